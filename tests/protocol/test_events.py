"""The AG-UI event constructors: the exact wire shape of each (camelCase, optional keys)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from iobridge.protocol import events as ev

# Each event is built inside the test (a lambda), not at collection: mutation testing swaps a
# function only while a test runs, so an event built at import would hide every mutant.
CASES: list[tuple[Callable[[], dict[str, Any]], dict[str, Any]]] = [
    (lambda: ev.run_started("t", "r"),
     {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0"}),
    (lambda: ev.run_started("t", "r", "p"),
     {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "parentRunId": "p",
      "protocolVersion": "1.0"}),
    (lambda: ev.run_finished("t", "r"), {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
    (lambda: ev.run_finished("t", "r", result=0, outcome={"type": "cancelled"}),
     {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "result": 0,
      "outcome": {"type": "cancelled"}}),
    (lambda: ev.run_error("boom"), {"type": "RUN_ERROR", "message": "boom"}),
    (lambda: ev.run_error("boom", "E"), {"type": "RUN_ERROR", "message": "boom", "code": "E"}),
    (lambda: ev.text_start("m"),
     {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
    (lambda: ev.text_start("m", "user"),
     {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "user"}),
    (lambda: ev.text_content("m", "d"),
     {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d"}),
    (lambda: ev.text_end("m"), {"type": "TEXT_MESSAGE_END", "messageId": "m"}),
    (lambda: ev.tool_call_start("c", "f"),
     {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"}),
    (lambda: ev.tool_call_start("c", "f", "m"),
     {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f",
      "parentMessageId": "m"}),
    (lambda: ev.tool_call_args("c", "{"),
     {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{"}),
    (lambda: ev.tool_call_end("c"), {"type": "TOOL_CALL_END", "toolCallId": "c"}),
    (lambda: ev.tool_call_result("t", "c", "ok"),
     {"type": "TOOL_CALL_RESULT", "messageId": "t", "toolCallId": "c", "content": "ok",
      "role": "tool"}),
    (lambda: ev.step_started("s"), {"type": "STEP_STARTED", "stepName": "s"}),
    (lambda: ev.step_finished("s"), {"type": "STEP_FINISHED", "stepName": "s"}),
    (lambda: ev.reasoning_start("r"), {"type": "REASONING_START", "messageId": "r"}),
    (lambda: ev.reasoning_end("r"), {"type": "REASONING_END", "messageId": "r"}),
    (lambda: ev.reasoning_message_start("r"),
     {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"}),
    (lambda: ev.reasoning_message_content("r", "d"),
     {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "d"}),
    (lambda: ev.reasoning_message_end("r"), {"type": "REASONING_MESSAGE_END", "messageId": "r"}),
    (lambda: ev.state_snapshot({"a": 1}), {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}}),
    (lambda: ev.state_delta([{"op": "remove", "path": "/a"}]),
     {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/a"}]}),
    (lambda: ev.custom("n", None), {"type": "CUSTOM", "name": "n", "value": None}),
    (lambda: ev.run_error("boom", "E", usage=[{"inputTokens": 1}]),
     {"type": "RUN_ERROR", "message": "boom", "code": "E", "usage": [{"inputTokens": 1}]}),
    (lambda: ev.run_error("boom", usage=[]), {"type": "RUN_ERROR", "message": "boom"}),
    (lambda: ev.run_finished("t", "r", usage=[{"outputTokens": 2}]),
     {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "usage": [{"outputTokens": 2}]}),
    (lambda: ev.messages_snapshot([{"id": "u", "role": "user", "content": "hi"}]),
     {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u", "role": "user", "content": "hi"}]}),
    (lambda: ev.reasoning_encrypted_value("message", "r", "sig"),
     {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "r",
      "encryptedValue": "sig"}),
    (lambda: ev.reasoning_encrypted_value("tool-call", "c", "sig", {}),
     {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c",
      "encryptedValue": "sig"}),
    (lambda: ev.reasoning_encrypted_value("tool-call", "c", "sig", {"provider": "anthropic"}),
     {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c",
      "encryptedValue": "sig", "metadata": {"provider": "anthropic"}}),
]


@pytest.mark.parametrize(("build", "wire"), CASES, ids=[w["type"] for _, w in CASES])
def test_each_constructor_builds_the_wire_event(
    build: Callable[[], dict[str, Any]], wire: dict[str, Any]
) -> None:
    built = build()
    assert built == wire
    encoded = ev.encode_event(built)
    assert type(encoded) is bytes and b"\n" not in encoded
    assert orjson.loads(encoded) == wire


def test_a_pre_1_0_client_is_sent_only_an_interrupt_outcome() -> None:
    interrupt = {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "approve"}]}
    assert ev.pre_1_0_outcome(interrupt) is interrupt
    assert ev.pre_1_0_outcome({"type": "success", "pendingToolCallIds": ["c1"]}) is None
    assert ev.pre_1_0_outcome({"type": "cancelled"}) is None
    assert ev.pre_1_0_outcome({"TYPE": "interrupt"}) is None
