"""Busy-thread strategies over N-PAMP: the options come through the Backend as over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.helpers import run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.npamp_server.client import AgUiEvent

from .conftest import WAIT, StartHarness

pytestmark = pytest.mark.timeout(30)


def gated_agent(gate: asyncio.Event) -> FunctionAgent:
    async def paced(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "a "
        await gate.wait()
        yield "b"

    return FunctionAgent(paced, id="paced")


async def collect(stream: Any) -> list[AgUiEvent]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


@pytest.mark.parametrize("strategy", ["enqueue", "rollback"])
async def test_busy_thread_strategies_apply_over_npamp(
    harness: StartHarness, client_key: Any, strategy: str
) -> None:
    gate = asyncio.Event()
    async with harness(agents=[gated_agent(gate)], default_agent="demo") as h, \
            h.client(client_key) as client:
        first = aiter(client.run(run_body("first", run_id="r1", agentId="paced")))
        assert (await anext(first)).type == "RUN_STARTED"
        second = asyncio.ensure_future(collect(client.run(
            run_body("second", run_id="r2", multitaskStrategy=strategy))))
        if strategy == "enqueue":
            await asyncio.sleep(0.2)
            assert not second.done()  # queued behind r1
            gate.set()
        rest = await collect(first)
        outcome = rest[-1].data.get("outcome", {"type": "success"})
        assert outcome["type"] == ("success" if strategy == "enqueue" else "cancelled")
        events = await second
        assert [events[0].type, events[-1].type] == ["RUN_STARTED", "RUN_FINISHED"]
        stored = await h.backend.store.list_messages("t1")
        users = [m["content"] for m in stored if m["role"] == "user"]
        assert users == (["first", "second"] if strategy == "enqueue" else ["second"])
