"""Test helpers: a real server on loopback, free ports, run bodies, SSE parsing."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from agui_verify import parse_sse

__all__ = [
    "CollectingSink",
    "LiveServer",
    "app_client",
    "free_port",
    "parse_sse",
    "run_body",
    "terminal",
    "types",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """A uvicorn server in a background thread on 127.0.0.1."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30  # a loaded machine starts a server slowly
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def runtime(self) -> Any:
        return self.app.state.backend.runtime

    def run(self, run_id: str, owner: str = "anonymous") -> Any:
        """The engine's record of a run (``owner``: the principal that started it)."""
        return self.runtime.get_run(owner, run_id)


class CollectingSink:
    """An ``EventSink`` that keeps what ``Backend.follow`` hands it (tests of the Backend
    itself); ``stop_after``: answer False (consumer gone) once that many batches came."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.events: list[tuple[int, bytes]] = []
        #: Each batch's ``last`` flag, in order.
        self.lasts: list[bool] = []
        self.keep_alives = 0
        #: ``"end"`` or ``"cut_off"`` once the stream was ended that way.
        self.ending: str | None = None
        self.error: Exception | None = None
        self._stop_after = stop_after

    async def send(
        self, events: list[tuple[int, bytes]], *, last: bool, tags: list[bytes] | None = None
    ) -> bool:
        self.events += events
        self.lasts.append(last)
        return self._stop_after is None or len(self.lasts) < self._stop_after

    async def keep_alive(self) -> None:
        self.keep_alives += 1

    async def queued(self) -> None:
        self.keep_alives += 1

    async def end(self) -> None:
        self.ending = "end"

    async def cut_off(self, error: Exception) -> None:
        self.ending, self.error = "cut_off", error


def terminal(run: Any) -> dict[str, Any]:
    """The last event in a run's log, decoded (its terminal event once the run ended)."""
    entries = run.log.entries()
    return dict(json.loads(entries[-1][1]))


@contextlib.asynccontextmanager
async def app_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of ``app`` with its lifespan running (startup, then shutdown).

    For stores opened in the test's own event loop (a uvicorn thread has another loop).
    """
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=10
        ) as client:
            yield client


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def run_body(
    text: str, *, thread_id: str = "t1", run_id: str = "r1", tools: list[Any] | None = None,
    **props: Any,
) -> dict[str, Any]:
    """A RunAgentInput with one user message."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": text}],
        "tools": tools or [],
        "context": [],
        "forwardedProps": props,
    }
