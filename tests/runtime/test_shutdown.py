"""SIGTERM on a real ``iobridge serve`` process with 100 live runs: each client receives
RUN_ERROR ``SERVER_SHUTDOWN``, what each run produced is stored, and the process exits 0.
The engine's drain, which that shutdown drives, is also tested in process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import free_port, run_body, terminal

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.protocol.options import parse_run_options
from iobridge.protocol.run_input import parse_run_input
from iobridge.runtime.engine import Runtime

pytestmark = pytest.mark.timeout(90)

CLIENTS = 100
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


async def _client(http: httpx.AsyncClient, n: int, ready: asyncio.Queue[int]) -> dict[str, Any]:
    body = {
        "threadId": f"t{n}", "runId": f"r{n}", "tools": [WEATHER], "context": [],
        "messages": [{"id": f"u{n}", "role": "user", "content": "get_weather for Oslo"}],
    }
    last: dict[str, Any] = {}
    async with http.stream("POST", "/io-bridge/run", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                last = json.loads(line[6:])
                if last["type"] == "TOOL_CALL_END":
                    ready.put_nowait(n)  # pending forever: only the shutdown ends it
    return last


async def _run_clients(port: int, proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    ready: asyncio.Queue[int] = asyncio.Queue()
    limits = httpx.Limits(max_connections=CLIENTS + 10)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits
    ) as http:
        tasks = [asyncio.create_task(_client(http, n, ready)) for n in range(CLIENTS)]
        for _ in range(CLIENTS):
            await asyncio.wait_for(ready.get(), 30)
        proc.send_signal(signal.SIGTERM)
        return await asyncio.gather(*tasks)


def test_sigterm_ends_every_live_run_with_server_shutdown(tmp_path: Path) -> None:
    port = free_port()
    database = tmp_path / "iobridge.db"
    env = {
        **os.environ,
        "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "IOBRIDGE_DRAIN_SECONDS": "0.5",
        "IOBRIDGE_LOG_LEVEL": "warning",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "iobridge.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/io-bridge/agents").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        finals = asyncio.run(_run_clients(port, proc))
        output = proc.communicate(timeout=30)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    assert [f.get("type") for f in finals] == ["RUN_ERROR"] * CLIENTS
    assert {f.get("code") for f in finals} == {"SERVER_SHUTDOWN"}
    # Each run stored what it produced, its unanswered call closed with an error result.
    import sqlite3

    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT thread_id, role, data FROM iobridge_messages ORDER BY thread_id, position"
        ).fetchall()
    by_thread: dict[str, list[tuple[str, str]]] = {}
    for thread_id, role, data in rows:
        by_thread.setdefault(thread_id, []).append((role, data))
    assert len(by_thread) == CLIENTS
    for messages in by_thread.values():
        assert [role for role, _ in messages] == ["user", "assistant", "tool"]
        assert json.loads(messages[2][1])["error"] == (
            "the server shut down before the client answered"
        )


# -- draining, in process (the engine the server's shutdown drives) -----------------------


def _gated_agent(gates: dict[str, asyncio.Event]) -> FunctionAgent:
    async def wait_for_gate(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "working"
        await gates[ctx.run_id].wait()
        yield " done"

    return FunctionAgent(wait_for_gate, id="gated")


async def _start(runtime: Runtime, agent: FunctionAgent, run_id: str) -> Any:
    run_input = parse_run_input(run_body("go", run_id=run_id, thread_id=f"t-{run_id}"))
    return await runtime.start(run_input, parse_run_options({}), agent,
                               owner="alice", resource_id="alice")


async def test_drain_waits_for_live_runs_up_to_its_deadline_then_shutdown_ends_the_rest() -> None:
    gates = {"quick": asyncio.Event(), "slow": asyncio.Event()}
    agent = _gated_agent(gates)
    runtime = Runtime()
    quick, slow = [await _start(runtime, agent, run_id) for run_id in ("quick", "slow")]
    asyncio.get_running_loop().call_later(0.05, gates["quick"].set)
    started = time.monotonic()
    await runtime.drain(0.5)
    waited = time.monotonic() - started
    # Not before its deadline (the loop may fire a timer a clock tick early).
    assert waited >= 0.45
    assert terminal(quick)["type"] == "RUN_FINISHED"
    assert not slow.done
    await runtime.aclose()
    assert terminal(slow)["type"] == "RUN_ERROR"
    assert terminal(slow)["code"] == "SERVER_SHUTDOWN"
    assert terminal(slow)["message"] == "The server is shutting down."
    assert runtime.active_runs == 0


async def test_drain_returns_once_every_run_ended_or_at_once_without_runs() -> None:
    gates = {"r1": asyncio.Event()}
    runtime = Runtime()
    started = time.monotonic()
    await runtime.drain(30)
    assert time.monotonic() - started < 5
    run = await _start(runtime, _gated_agent(gates), "r1")
    asyncio.get_running_loop().call_later(0.05, gates["r1"].set)
    await asyncio.wait_for(runtime.drain(30), 10)
    assert terminal(run)["type"] == "RUN_FINISHED"
    await runtime.drain(0)  # nothing live, nothing to wait for


async def test_a_run_started_in_the_iteration_the_runtime_closes_still_ends_with_shutdown() -> None:
    """Closed before the run's task ever ran: a task cancelled before its first step never
    enters its coroutine, so the run would end with no terminal event and not be counted out."""
    runtime = Runtime()
    run = await _start(runtime, _gated_agent({"r1": asyncio.Event()}), "r1")
    await runtime.aclose()
    assert terminal(run)["type"] == "RUN_ERROR"
    assert terminal(run)["code"] == "SERVER_SHUTDOWN"
    assert run.log.closed and runtime.active_runs == 0
