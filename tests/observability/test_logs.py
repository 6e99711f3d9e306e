"""JSON logs: every line logged in a run's context carries its runId and threadId (the
agent's own loggers, its server tools, tasks it starts), lines outside a run carry none; and
``iobridge serve --log-format json`` writes only JSON lines, uvicorn's included."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, free_port, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.observability.logs import JsonFormatter, RunFilter

shop = logging.getLogger("shop.agent")


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    shop.info("tool looks up %s", order)
    return "shipped"


async def chatty(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    shop.info("agent starts")

    async def background() -> None:
        shop.warning("background task of the agent")

    await asyncio.create_task(background())
    await ctx.call_tool("lookup", {"order": "A1"})
    yield "done"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root logger writing JSON to a buffer (what ``log_format = "json"`` installs)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(RunFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    saved = root.handlers, root.level
    root.handlers, root.level = [handler], logging.INFO
    try:
        yield buffer
    finally:
        root.handlers, root.level = saved


async def test_every_line_of_a_run_carries_its_ids(json_lines: io.StringIO) -> None:
    agent = FunctionAgent(chatty, id="chatty", tools=[lookup])
    app = create_app(Backend(Settings(database_url="memory://"), agents=[agent]))
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for thread_id, run_id in (("t-a", "r-a"), ("t-b", "r-b")):
                body = run_body("go", thread_id=thread_id, run_id=run_id, agentId="chatty")
                response = await client.post("/io-bridge/run", json=body)
                assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    shop.info("outside any run")
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    ours = [line for line in lines if line["logger"] == "shop.agent"]
    assert [(line["message"], line.get("threadId"), line.get("runId")) for line in ours] == [
        ("agent starts", "t-a", "r-a"),
        ("background task of the agent", "t-a", "r-a"),
        ("tool looks up A1", "t-a", "r-a"),
        ("agent starts", "t-b", "r-b"),
        ("background task of the agent", "t-b", "r-b"),
        ("tool looks up A1", "t-b", "r-b"),
        ("outside any run", None, None),
    ]
    assert "runId" not in ours[-1] and "threadId" not in ours[-1]
    assert {line["level"] for line in ours} == {"info", "warning"}
    assert all(line["time"].endswith("Z") for line in lines)


def test_json_lines_keep_exceptions_on_one_line(json_lines: io.StringIO) -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        shop.exception("it failed")
    [line] = json_lines.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "it failed"
    assert "ValueError: boom" in record["exception"]


def test_serve_with_json_logs_writes_only_json_lines(tmp_path: Any) -> None:
    port = free_port()
    env = {**os.environ, "IOBRIDGE_DATABASE_URL": "memory://", "IOBRIDGE_DRAIN_SECONDS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "iobridge.cli", "serve", "--port", str(port),
         "--log-format", "json"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        ran = httpx.post(f"http://127.0.0.1:{port}/io-bridge/run", json=run_body("hi"))
        assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"
        proc.send_signal(signal.SIGTERM)
        errors = proc.communicate(timeout=30)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errors
    lines = [json.loads(line) for line in errors.splitlines() if line.strip()]
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers, lines
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any("POST /io-bridge/run" in line["message"] for line in access)


def test_an_unknown_log_format_is_refused(tmp_path: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "iobridge.cli", "serve", "--log-format", "xml"],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "log_format" in done.stderr and "Traceback" not in done.stderr
