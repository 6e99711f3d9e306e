"""Shared fixtures: a real server on loopback, and SSE parsing helpers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from iobridge.config import Settings
from iobridge.http.app import create_app


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
        deadline = time.monotonic() + 10
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
        return self.app.state.runtime


@pytest.fixture
def serve(tmp_path: Any) -> Iterator[Callable[..., LiveServer]]:
    """Start servers for a test: ``serve(agents=[...], **settings)``."""
    started: list[LiveServer] = []

    def start(*, agents: list[Any] | None = None, **overrides: Any) -> LiveServer:
        overrides.setdefault("database_url", f"sqlite+aiosqlite:///{tmp_path}/iobridge.db")
        settings = Settings(**overrides)
        server = LiveServer(create_app(settings, agents=agents or []))
        started.append(server.__enter__())
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


def parse_sse(body: str) -> list[dict[str, Any]]:
    """Events of an SSE body; asserts LF-only framing and increasing ids from 1."""
    assert "\r" not in body
    events = []
    expected = 1
    for frame in body.split("\n\n"):
        if not frame or frame.startswith(":"):
            continue
        lines = frame.split("\n")
        assert lines[0] == f"id: {expected}", frame
        assert lines[1].startswith("data: ") and len(lines) == 2, frame
        events.append(json.loads(lines[1][len("data: ") :]))
        expected += 1
    return events


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
