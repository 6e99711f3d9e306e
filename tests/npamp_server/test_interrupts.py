"""Interrupts and state over N-PAMP: the same Backend path as HTTP, the same events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.helpers import run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StateDelta
from iobridge.npamp.bridge.envelope import TransportErrorCode
from iobridge.npamp_server.client import AgUiEvent, RunRefused

from .conftest import WAIT, StartHarness

pytestmark = pytest.mark.timeout(30)


async def collect(stream: Any) -> list[AgUiEvent]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


def resume(run_id: str, *entries: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {"threadId": "t1", "runId": run_id, "messages": [], "tools": [], "context": [],
            "resume": list(entries), "forwardedProps": props}


async def test_an_interrupt_and_its_resume_over_npamp(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.client(client_key) as client:
        first = await collect(client.run(run_body("approve the release", run_id="r1")))
        outcome = first[-1].data["outcome"]
        assert first[-1].type == "RUN_FINISHED" and outcome["type"] == "interrupt"
        (interrupt,) = outcome["interrupts"]
        assert interrupt["message"] == "Approve: the release?"
        entry = {"interruptId": interrupt["id"], "status": "resolved",
                 "payload": {"approved": True}}
        second = await collect(client.run(resume("r2", entry)))
        text = "".join(e.data["delta"] for e in second if e.type == "TEXT_MESSAGE_CONTENT")
        assert text == "Approved: the release."
        # Answered once: the same answer again is refused, not delivered, nothing stored.
        stored = await h.backend.store.list_messages("t1")
        with pytest.raises(RunRefused) as refused:
            await collect(client.run(resume("r3", entry)))
        assert refused.value.transport_code is TransportErrorCode.NOT_DELIVERED
        assert "INTERRUPT_ALREADY_ANSWERED" in refused.value.reason
        with pytest.raises(RunRefused) as unknown:
            await collect(client.run(resume("r4", {**entry, "interruptId": "nope"})))
        assert "INTERRUPT_NOT_FOUND" in unknown.value.reason
        assert await h.backend.store.list_messages("t1") == stored


async def counting(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield StateDelta(patch=[{"op": "add", "path": "/seen/-", "value": ctx.run_id}])


async def test_state_and_its_deltas_over_npamp(harness: StartHarness, client_key: Any) -> None:
    agents = [FunctionAgent(counting, id="counting")]
    async with harness(agents=agents) as h, h.client(client_key) as client:
        body = {**run_body("x", run_id="r1", agentId="counting"), "state": {"seen": []}}
        first = await collect(client.run(body))
        assert [e.data["delta"] for e in first if e.type == "STATE_DELTA"] == [
            [{"op": "add", "path": "/seen/-", "value": "r1"}]]
        second = await collect(client.run(run_body("y", run_id="r2", agentId="counting")))
        assert second[1].type == "STATE_SNAPSHOT" and second[1].data["snapshot"] == {
            "seen": ["r1"]}
        thread = await h.backend.store.get_thread("t1")
        assert thread is not None and thread.state == {"seen": ["r1", "r2"]}
