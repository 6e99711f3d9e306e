"""``pre_1_0_outcomes``: AG-UI 0.x clients (no ``protocolVersion``) get outcomes they accept.

assistant-ui and CopilotKit bundle ``@ag-ui/client`` 0.0.x, whose strict RUN_FINISHED schema
fails a whole run on ``pendingToolCallIds`` or ``cancelled`` (tests/frontends drive them).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from tests.helpers import parse_sse, run_body

from iobridge.protocol.events import pre_1_0_outcome

WEATHER = {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_only_interrupt_outcomes_survive() -> None:
    interrupt = {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "approval"}]}
    assert pre_1_0_outcome(interrupt) is interrupt
    assert pre_1_0_outcome({"type": "success", "pendingToolCallIds": ["c1"]}) is None
    assert pre_1_0_outcome({"type": "success"}) is None
    assert pre_1_0_outcome({"type": "cancelled"}) is None


@pytest.mark.parametrize(("version", "outcome"), [
    (None, None),
    ("1.0", {"type": "success", "pendingToolCallIds": ["CALL"]}),
])
async def test_next_run_pending_calls(serve: Any, version: str | None, outcome: Any) -> None:
    server = serve(tool_result_mode="next-run", pre_1_0_outcomes=True)
    body = run_body("get_weather city=Oslo", tools=[WEATHER])
    if version is not None:
        body["protocolVersion"] = version
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=body)).text)
        thread = (await client.get("/io-bridge/threads/t1/messages",
                                   params={"format": "agui"})).json()["messages"]
    call_id = next(e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_END")
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    if outcome is None:
        assert "outcome" not in finished
    else:
        assert finished["outcome"] == {**outcome, "pendingToolCallIds": [call_id]}
    # What is stored does not depend on the client's version: the call waits for its result.
    assert thread[-1]["toolCalls"][0]["id"] == call_id


async def test_a_cancel_seen_by_a_0x_client_has_no_outcome(serve: Any) -> None:
    server = serve(pre_1_0_outcomes=True)
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=run_body("get_weather", tools=[WEATHER]))
        as response,
    ):
        events = []
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == "TOOL_CALL_END":
                cancel = await client.post("/io-bridge/runs/r1/cancel", json={})
                assert cancel.status_code == 202
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


async def test_off_by_default(serve: Any) -> None:
    server = serve(tool_result_mode="next-run")
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("get_weather", tools=[WEATHER]))).text)
    assert events[-1]["outcome"]["pendingToolCallIds"]
