"""``serve_http`` (what ``iobridge serve`` runs) in this process: where it listens, that it
serves until told to stop and runs ``before_exit`` while connections are still answered, and
the uvicorn settings it derives from ours."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
import uvicorn
from tests.helpers import free_port

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http import server as http_server
from iobridge.http.server import serve_http


async def _answers(url: str, within: float = 10) -> int:
    """The status of ``GET url`` once the server accepts connections."""
    deadline = asyncio.get_running_loop().time() + within
    async with httpx.AsyncClient(timeout=2) as client:
        while True:
            try:
                return (await client.get(url)).status_code
            except httpx.TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)


async def test_it_listens_on_the_settings_address_and_stops_when_asked() -> None:
    """127.0.0.2 (loopback, not uvicorn's default 127.0.0.1) and a port of our choosing;
    ``before_exit`` runs once ``stop`` is set, while requests are still served."""
    port = free_port()
    settings = Settings(database_url="memory://", host="127.0.0.2", port=port,
                        allowed_hosts=["127.0.0.2"])
    base = f"http://127.0.0.2:{port}"
    stop = asyncio.Event()
    during_exit: list[int] = []

    async with Backend(settings) as backend:
        async def before_exit() -> None:
            async with httpx.AsyncClient(timeout=5) as client:
                during_exit.append((await client.get(f"{base}/healthz")).status_code)

        serving = asyncio.create_task(serve_http(backend, stop, before_exit=before_exit))
        assert await _answers(f"{base}/io-bridge/agents") == 200
        assert not serving.done()
        stop.set()
        await asyncio.wait_for(serving, 15)
    assert during_exit == [200]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/healthz", timeout=1)


async def test_it_serves_on_a_socket_it_is_handed() -> None:
    """``--workers``: every worker accepts on the socket its parent bound, not on the
    settings' port (which nobody listens on here)."""
    unused = free_port()
    settings = Settings(database_url="memory://", host="127.0.0.1", port=unused)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
        stop = asyncio.Event()
        async with Backend(settings) as backend:
            serving = asyncio.create_task(serve_http(backend, stop, sock=sock))
            assert await _answers(f"http://127.0.0.1:{port}/healthz") == 200
            with pytest.raises(httpx.TransportError):
                await _answers(f"http://127.0.0.1:{unused}/healthz", within=0.5)
            stop.set()
            await asyncio.wait_for(serving, 15)


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_uvicorn_gets_our_log_level_log_set_up_and_shutdown_bound(
    monkeypatch: pytest.MonkeyPatch, log_format: str
) -> None:
    """JSON logs: uvicorn's loggers keep iobridge's JSON handler (no log config of its
    own); text logs: uvicorn's own format. Open connections get 5 s to finish at shutdown."""
    seen: list[uvicorn.Config] = []

    async def record(self: uvicorn.Server, sockets: Any = None) -> None:
        seen.append(self.config)

    monkeypatch.setattr(http_server._Server, "serve", record)
    settings = Settings(database_url="memory://", log_level="warning", log_format=log_format,
                        host="127.0.0.3", port=4567)
    async with Backend(settings) as backend:
        await serve_http(backend, asyncio.Event())
    (config,) = seen
    assert (config.host, config.port, config.log_level) == ("127.0.0.3", 4567, "warning")
    assert config.timeout_graceful_shutdown == 5
    expected = None if log_format == "json" else uvicorn.config.LOGGING_CONFIG
    assert config.log_config == expected
    assert config.app.state.backend is backend  # type: ignore[attr-defined]
