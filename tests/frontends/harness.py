"""Real parts of the frontend tests: the bundled apps, a static file server, iobridge
servers (one, or two replicas behind a balancer), the CopilotKit runtime in Node.

Everything listens on loopback ports picked at random. Without Node, Chromium or
``tests/frontends/node_modules`` the tests skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from tests.frontends.agents import FrontAgent
from tests.helpers import LiveServer

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

HERE = Path(__file__).resolve().parent
NODE = shutil.which("node")
CHROMIUM = Path(os.environ.get("IOBRIDGE_TEST_CHROMIUM", "/usr/bin/chromium"))


def require(what: str, ok: bool) -> None:
    if ok:
        return
    reason = f"FRONTEND TESTS NOT RUN: {what}"
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " (CI=true makes this a failure)")
    pytest.skip(reason)


def require_node() -> str:
    require("node is not installed", NODE is not None)
    require("tests/frontends/node_modules is missing (run `make frontend-deps`)",
            (HERE / "node_modules" / ".installed").is_file())
    assert NODE is not None
    return NODE


def bundle(out: Path) -> Path:
    """Both apps bundled by esbuild into ``out`` (``out/assistant-ui``, ``out/copilotkit``)."""
    completed = subprocess.run([require_node(), str(HERE / "build.mjs"), str(out)], cwd=HERE,
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def static_server(root: Path) -> Iterator[str]:
    """``root`` served over HTTP on a loopback port; yields the origin."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def bridge_settings(**overrides: Any) -> Settings:
    """What the tests' iobridge runs with: next-run frontend tools (neither frontend posts
    results into a live run) and outcomes their AG-UI 0.x client accepts."""
    return Settings(tool_result_mode="next-run", pre_1_0_outcomes=True, **overrides)


@contextlib.contextmanager
def bridge(**overrides: Any) -> Iterator[LiveServer]:
    """An iobridge server (in this process, on its own thread) serving ``FrontAgent``."""
    app = create_app(Backend(bridge_settings(**overrides), agents=[FrontAgent()]))
    with LiveServer(app) as server:
        yield server


class Balancer:
    """A reverse proxy on one loopback port sending each request to the next replica in
    turn (round robin per request, responses streamed, a client disconnect closes the
    upstream request). ``served`` counts the requests each replica got."""

    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = upstreams
        self.served: Counter[str] = Counter()
        self._next = itertools.cycle(upstreams)
        self._lock = threading.Lock()
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(60, read=None))
        app = Starlette(routes=[Route("/{path:path}", self._forward,
                                      methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"])])
        self.server = LiveServer(app)  # type: ignore[arg-type]
        self.url = self.server.url

    async def _forward(self, request: Request) -> Response:
        with self._lock:
            upstream = next(self._next)
            self.served[upstream] += 1
        headers = [(k, v) for k, v in request.headers.items() if k.lower() != "host"]
        outgoing = self.client.build_request(
            request.method, upstream + request.url.path + (
                f"?{request.url.query}" if request.url.query else ""),
            headers=headers, content=await request.body(),
        )
        response = await self.client.send(outgoing, stream=True)
        kept = {k: v for k, v in response.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")}

        async def body() -> AsyncIterator[bytes]:
            async for chunk in response.aiter_raw():
                yield chunk

        return StreamingResponse(body(), status_code=response.status_code, headers=kept,
                                 background=BackgroundTask(response.aclose))

    def __enter__(self) -> Balancer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


@contextlib.contextmanager
def copilot_runtime(bridge_url: str) -> Iterator[str]:
    """``copilotkit/runtime.mjs`` in Node with iobridge at ``bridge_url`` (its prefix
    included); yields the runtime's URL."""
    node = require_node()
    env = {**os.environ, "IOBRIDGE_URL": bridge_url, "PORT": "0",
           "COPILOTKIT_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "1"}
    process = subprocess.Popen([node, str(HERE / "copilotkit" / "runtime.mjs")], cwd=HERE,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        lines = []
        while True:
            line = process.stdout.readline().decode(errors="replace")
            if not line and process.poll() is not None:
                pytest.fail("the CopilotKit runtime exited:\n" + "".join(lines))
            lines.append(line)
            with contextlib.suppress(ValueError):
                port = json.loads(line)["port"]
                break
            if time.monotonic() > deadline:
                pytest.fail("the CopilotKit runtime did not start:\n" + "".join(lines))
        # Keep reading its output, so that a chatty runtime never blocks on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield f"http://127.0.0.1:{port}/api/copilotkit"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def stored_messages(bridge_url: str, thread_id: str) -> list[dict[str, Any]]:
    """The thread as iobridge stored it (AG-UI messages)."""
    response = httpx.get(f"{bridge_url}/io-bridge/threads/{thread_id}/messages",
                         params={"format": "agui"}, timeout=10)
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def run_events(bridge_url: str, run_id: str) -> list[dict[str, Any]]:
    """A run's events as iobridge retained them (its replay route)."""
    response = httpx.get(f"{bridge_url}/io-bridge/runs/{run_id}/events", timeout=10)
    assert response.status_code == 200, response.text
    return [json.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: ")]
