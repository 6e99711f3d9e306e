"""A run's parts are freed by reference counting when the run ends, not left to the cycle
collector: under a burst of runs, every object stuck in a cycle until the next collection
counts towards the young generation's threshold and is walked again by each collection."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from pathlib import Path

from tests.helpers import app_client, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StepFinished, StepStarted
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store.migrate import upgrade


def _agents() -> list[FunctionAgent]:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    async def helper(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "found it"

    async def lead(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        found = await ctx.subagent("helper", "look")
        total = await ctx.call_tool("add", {"a": 1, "b": 2})
        yield f"{found.content} {total.content}"

    return [FunctionAgent(lead, id="lead", tools=[add]), FunctionAgent(helper, id="helper")]


def _ours() -> list[str]:
    return sorted(
        type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("iobridge.")
    )


async def _stepping(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield StepStarted(name="reply")
    yield "done"
    yield StepFinished(name="reply")


async def test_a_finished_run_with_a_server_tool_and_a_subagent_leaves_no_cycles() -> None:
    settings = Settings(database_url="memory://", playground=False, max_retained_runs=0)
    assert await _left_behind(Backend(settings, agents=_agents()), "lead") == []


async def test_a_finished_durable_run_leaves_no_cycles(tmp_path: Path) -> None:
    """Its checkpoints, event ids and park callback go with it (a SQL store keeps them)."""
    url = f"sqlite:///{tmp_path / 'cycles.db'}"
    await upgrade(url)
    settings = Settings(database_url=url, playground=False, max_retained_runs=0)
    agent = FunctionAgent(_stepping, id="steps", durable=True)
    assert await _left_behind(Backend(settings, agents=[agent]), "steps") == []


async def _left_behind(backend: Backend, agent_id: str) -> list[str]:
    """What of iobridge's a finished run leaves to the cycle collector (a warm-up run first)."""
    app = create_app(backend)
    async with app_client(app) as client:
        body = run_body("go", thread_id="warm", run_id="warm", agentId=agent_id)
        warm = await client.post("/io-bridge/run", json=body)
        assert parse_sse(warm.text)[-1]["type"] == "RUN_FINISHED"
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            response = await client.post(
                "/io-bridge/run", json=run_body("go", thread_id="t", run_id="r", agentId=agent_id)
            )
            events = parse_sse(response.text)
            del response
            gc.collect()
            left = _ours()
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
    assert [e["type"] for e in events][-1] == "RUN_FINISHED"
    assert agent_id != "lead" or any(e["type"] == "SUBAGENT_FINISHED" for e in events)
    return left
