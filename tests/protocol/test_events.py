"""The AG-UI event constructors: the exact wire shape of each (camelCase, optional keys)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from iobridge.protocol import events as ev

CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (ev.run_started("t", "r"), {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
    (ev.run_started("t", "r", "p"),
     {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "parentRunId": "p"}),
    (ev.run_finished("t", "r"), {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
    (ev.run_finished("t", "r", result=0, outcome={"type": "cancelled"}),
     {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "result": 0,
      "outcome": {"type": "cancelled"}}),
    (ev.run_error("boom"), {"type": "RUN_ERROR", "message": "boom"}),
    (ev.run_error("boom", "E"), {"type": "RUN_ERROR", "message": "boom", "code": "E"}),
    (ev.text_start("m"), {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
    (ev.text_start("m", "user"), {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "user"}),
    (ev.text_content("m", "d"), {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d"}),
    (ev.text_end("m"), {"type": "TEXT_MESSAGE_END", "messageId": "m"}),
    (ev.tool_call_start("c", "f"),
     {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"}),
    (ev.tool_call_start("c", "f", "m"),
     {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f",
      "parentMessageId": "m"}),
    (ev.tool_call_args("c", "{"), {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{"}),
    (ev.tool_call_end("c"), {"type": "TOOL_CALL_END", "toolCallId": "c"}),
    (ev.tool_call_result("t", "c", "ok"),
     {"type": "TOOL_CALL_RESULT", "messageId": "t", "toolCallId": "c", "content": "ok",
      "role": "tool"}),
    (ev.step_started("s"), {"type": "STEP_STARTED", "stepName": "s"}),
    (ev.step_finished("s"), {"type": "STEP_FINISHED", "stepName": "s"}),
    (ev.reasoning_start("r"), {"type": "REASONING_START", "messageId": "r"}),
    (ev.reasoning_end("r"), {"type": "REASONING_END", "messageId": "r"}),
    (ev.reasoning_message_start("r"),
     {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"}),
    (ev.reasoning_message_content("r", "d"),
     {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "d"}),
    (ev.reasoning_message_end("r"), {"type": "REASONING_MESSAGE_END", "messageId": "r"}),
    (ev.state_snapshot({"a": 1}), {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}}),
    (ev.state_delta([{"op": "remove", "path": "/a"}]),
     {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/a"}]}),
    (ev.custom("n", None), {"type": "CUSTOM", "name": "n", "value": None}),
]


@pytest.mark.parametrize(("built", "wire"), CASES, ids=[w["type"] for _, w in CASES])
def test_each_constructor_builds_the_wire_event(
    built: dict[str, Any], wire: dict[str, Any]
) -> None:
    assert built == wire
    encoded = ev.encode_event(built)
    assert type(encoded) is bytes and b"\n" not in encoded
    assert orjson.loads(encoded) == wire
