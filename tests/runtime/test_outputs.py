"""Every agent output, as the client receives it and as the thread stores it: how outputs
open and close messages, reasoning and steps, a tool call completed elsewhere, and what a
failing run's terminal event carries."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.helpers import parse_sse, run_body

from iobridge.agents import outputs as out
from iobridge.agents.context import RunContext, ToolResult
from iobridge.agents.function import FunctionAgent
from iobridge.errors import AgentError


class Text(str):
    """A ``str`` subclass: still text."""


async def every_output(ctx: RunContext) -> AsyncIterator[out.AgentOutput]:
    ctx.emit(out.StepStarted(name="plan"))
    yield out.ReasoningDelta(delta="think")
    yield out.ReasoningDelta(delta="ing")
    yield out.ReasoningEnd()
    yield "hel"
    yield Text("lo")
    yield out.TextEnd()
    yield out.TextDelta(delta="again", message_id="m-own")
    yield out.StepFinished(name="plan")
    yield out.StateSnapshot(snapshot={"n": 1})
    yield out.StateDelta(patch=[{"op": "replace", "path": "/n", "value": 2}])
    yield out.CustomEvent(name="note", value={"k": 1})
    yield out.RawEvent(event={"type": "CUSTOM", "name": "raw", "value": 3})
    handle = ctx.start_tool_call("upstream", tool_call_id="call-1")
    handle.add_args('{"q":')
    handle.add_args("")
    handle.add_args("1}")
    handle.complete(ToolResult(content="upstream said hi"))
    yield "after"
    yield out.FinalResult(value={"ok": True})


def _shape(event: dict[str, Any]) -> tuple[Any, ...]:
    """An event without its generated ids."""
    kept = {k: v for k, v in event.items() if k not in ("messageId", "type")}
    return (event["type"], *sorted(kept.items()))


async def test_each_output_becomes_its_events_and_its_stored_message(serve: Any) -> None:
    server = serve(agents=[FunctionAgent(every_output, id="every")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("x", agentId="every"))).text)
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
    ids = [e.get("messageId") for e in events]
    assert [_shape(e) for e in events] == [
        ("RUN_STARTED", ("protocolVersion", "1.0"), ("runId", "r1"), ("threadId", "t1")),
        ("STEP_STARTED", ("stepName", "plan")),
        ("REASONING_START",),
        ("REASONING_MESSAGE_START", ("role", "reasoning")),
        ("REASONING_MESSAGE_CONTENT", ("delta", "think")),
        ("REASONING_MESSAGE_CONTENT", ("delta", "ing")),
        ("REASONING_MESSAGE_END",),
        ("REASONING_END",),
        ("TEXT_MESSAGE_START", ("role", "assistant")),
        ("TEXT_MESSAGE_CONTENT", ("delta", "hel")),
        ("TEXT_MESSAGE_CONTENT", ("delta", "lo")),
        ("TEXT_MESSAGE_END",),
        ("TEXT_MESSAGE_START", ("role", "assistant")),
        ("TEXT_MESSAGE_CONTENT", ("delta", "again")),
        ("TEXT_MESSAGE_END",),
        ("STEP_FINISHED", ("stepName", "plan")),
        ("STATE_SNAPSHOT", ("snapshot", {"n": 1})),
        ("STATE_DELTA", ("delta", [{"op": "replace", "path": "/n", "value": 2}])),
        ("CUSTOM", ("name", "note"), ("value", {"k": 1})),
        ("CUSTOM", ("name", "raw"), ("value", 3)),
        ("TOOL_CALL_START", ("parentMessageId", "m-own"), ("toolCallId", "call-1"),
         ("toolCallName", "upstream")),
        ("TOOL_CALL_ARGS", ("delta", '{"q":'), ("toolCallId", "call-1")),
        ("TOOL_CALL_ARGS", ("delta", "1}"), ("toolCallId", "call-1")),
        ("TOOL_CALL_END", ("toolCallId", "call-1")),
        ("TOOL_CALL_RESULT", ("content", "upstream said hi"), ("role", "tool"),
         ("toolCallId", "call-1")),
        ("TEXT_MESSAGE_START", ("role", "assistant")),
        ("TEXT_MESSAGE_CONTENT", ("delta", "after")),
        ("TEXT_MESSAGE_END",),
        ("RUN_FINISHED", ("result", {"ok": True}), ("runId", "r1"), ("threadId", "t1")),
    ]
    # The reasoning span and its message, then each text message, have their own ids.
    assert ids[2] == ids[7] and ids[3] == ids[4] == ids[5] == ids[6]
    assert ids[8] == ids[9] == ids[10] == ids[11]
    assert ids[12:15] == ["m-own"] * 3
    assert ids[25] == ids[26] == ids[27]
    assert len({ids[2], ids[3], ids[8], ids[24], ids[25], "m-own"}) == 6
    assert stored["messages"] == [
        {"id": "u-r1", "role": "user", "content": "x"},
        {"id": ids[3], "role": "reasoning", "content": "thinking"},
        {"id": ids[8], "role": "assistant", "content": "hello"},
        {"id": "m-own", "role": "assistant", "content": "again", "toolCalls": [
            {"id": "call-1", "type": "function",
             "function": {"name": "upstream", "arguments": '{"q":1}'}}]},
        {"id": ids[24], "role": "tool", "toolCallId": "call-1", "content": "upstream said hi"},
        {"id": ids[25], "role": "assistant", "content": "after"},
    ]


async def test_a_tool_call_on_a_fresh_turn_gets_its_own_assistant_message(serve: Any) -> None:
    async def calls_first(ctx: RunContext) -> AsyncIterator[out.AgentOutput]:
        first = ctx.start_tool_call("upstream")
        first.complete(ToolResult(content="one", is_error=True))
        yield "between"
        second = ctx.start_tool_call("upstream")
        second.complete(ToolResult(content="two"))

    server = serve(agents=[FunctionAgent(calls_first, id="calls")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("x", agentId="calls"))).text)
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
    starts = [e for e in events if e["type"] == "TOOL_CALL_START"]
    text = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")
    assert starts[0]["parentMessageId"] not in (None, text["messageId"])
    assert starts[1]["parentMessageId"] == text["messageId"]  # the text's message, same turn
    assert starts[0]["toolCallId"] != starts[1]["toolCallId"]
    roles = [(m["role"], m.get("error")) for m in stored["messages"]]
    assert roles == [("user", None), ("assistant", None), ("tool", "one"),
                     ("assistant", None), ("tool", None)]


async def test_something_that_is_not_an_output_fails_the_run(
    serve: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    async def wrong(ctx: RunContext) -> AsyncIterator[Any]:
        yield "fine so far"
        yield 42

    server = serve(agents=[FunctionAgent(wrong, id="wrong")])
    with caplog.at_level(logging.ERROR, logger="iobridge.runtime"):
        async with httpx.AsyncClient(base_url=server.url) as client:
            events = parse_sse((await client.post(
                "/io-bridge/run", json=run_body("x", agentId="wrong"))).text)
    # The operator's log has what the client is not told.
    (record,) = [r for r in caplog.records if r.name == "iobridge.runtime"]
    assert record.getMessage() == "agent wrong failed in run r1"
    assert record.exc_info is not None and record.exc_info[0] is TypeError
    assert events[-1] == {"type": "RUN_ERROR", "message": "The agent failed unexpectedly.",
                          "code": "AGENT_ERROR"}
    # The bad output never reaches the wire.
    assert [e["delta"] for e in events if "delta" in e] == ["fine so far"]


async def test_a_failed_run_reports_the_usage_it_spent(serve: Any) -> None:
    async def spends(ctx: RunContext) -> AsyncIterator[out.AgentOutput]:
        ctx.add_usage("openai", "gpt", {"inputTokens": 7, "outputTokens": 2})
        yield "partial"
        raise AgentError("the model gave up", code="MODEL_GAVE_UP")

    async def free(ctx: RunContext) -> AsyncIterator[out.AgentOutput]:
        yield "partial"
        raise AgentError("the model gave up", code="MODEL_GAVE_UP")

    server = serve(agents=[FunctionAgent(spends, id="spends"), FunctionAgent(free, id="free")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        spent = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("x", agentId="spends"))).text)[-1]
        unspent = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("x", run_id="r2", thread_id="t2",
                                            agentId="free"))).text)[-1]
    assert spent["type"] == "RUN_ERROR" and spent["code"] == "MODEL_GAVE_UP"
    assert spent["usage"] == [
        {"provider": "openai", "model": "gpt", "inputTokens": 7, "outputTokens": 2}]
    assert unspent == {"type": "RUN_ERROR", "message": "the model gave up",
                       "code": "MODEL_GAVE_UP"}


async def nul_outputs(ctx: RunContext) -> AsyncIterator[out.AgentOutput]:
    yield "a\x00b"
    handle = ctx.start_tool_call("upstream", tool_call_id="call-nul")
    handle.add_args('{"q": 1}')
    handle.complete(ToolResult(content="said \x00"))
    yield out.CustomEvent(name="n\x00", value={"k\x00": ["v\x00"]})
    yield "done"


async def test_u0000_from_an_agent_is_replaced_on_the_wire_and_in_the_thread(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent's text, tool result and custom event holding U+0000 (no store can hold it):
    the client sees U+FFFD in its place, the thread stores exactly what the client saw, and
    the run's messages are all stored (the write is not refused)."""
    server = serve(agents=[FunctionAgent(nul_outputs, id="nul")])
    caplog.set_level(logging.ERROR, logger="iobridge")
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("x", agentId="nul"))
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
    assert "\\u0000" not in response.text
    events = parse_sse(response.text)
    assert events[-1]["type"] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "a\ufffdbdone"
    custom = next(e for e in events if e["type"] == "CUSTOM")
    assert (custom["name"], custom["value"]) == ("n\ufffd", {"k\ufffd": ["v\ufffd"]})
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "said \ufffd"
    messages = stored["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] == "a\ufffdb"
    assert messages[2]["content"] == "said \ufffd"
    assert messages[3]["content"] == "done"
    assert not [r for r in caplog.records if "could not store" in r.getMessage()]
