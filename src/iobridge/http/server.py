"""Running the HTTP app under uvicorn inside a loop the caller owns (``iobridge serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator

import uvicorn

from iobridge.app import Backend
from iobridge.http.app import create_app
from iobridge.http.server_limits import uvicorn_options

__all__ = ["serve_http"]


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the caller decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(
    backend: Backend,
    stop: asyncio.Event,
    *,
    before_exit: Callable[[], Awaitable[None]] | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``backend`` (already open) over HTTP until ``stop`` is set.

    ``sock`` is an already bound listening socket (``--workers``: every worker accepts on
    the one its parent bound); default: bind ``settings.host``/``settings.port``.

    ``before_exit`` runs once ``stop`` is set, while connections are still served (so live
    streams receive their last events), before uvicorn shuts down.
    """
    settings = backend.settings
    server = _Server(
        uvicorn.Config(
            create_app(backend),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            # JSON logs: uvicorn's loggers already write through iobridge's JSON handler.
            log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
            timeout_graceful_shutdown=5,
            **uvicorn_options(settings),
        )
    )

    async def stop_when_asked() -> None:
        await stop.wait()
        try:
            if before_exit is not None:
                await before_exit()
        finally:
            server.should_exit = True

    watcher = asyncio.create_task(stop_when_asked())
    try:
        await server.serve(sockets=None if sock is None else [sock])
    finally:
        watcher.cancel()
