"""``Transcript``: subagent attribution, encrypted values, and a fold restored from stored
messages that goes on where it stopped."""

from __future__ import annotations

import copy
from typing import Any

from iobridge.protocol.transcript import Transcript


def fold(*events: dict[str, Any]) -> Transcript:
    transcript = Transcript()
    for event in events:
        transcript.apply(event)
    return transcript


def encrypted(entity: Any, value: Any, subtype: str = "message", **extra: Any) -> dict[str, Any]:
    return {"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype, "entityId": entity,
            "encryptedValue": value, **extra}


def call_start(cid: str, **extra: Any) -> dict[str, Any]:
    return {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "f", **extra}


def function_call(cid: str, arguments: str = "") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": arguments}}


def test_messages_a_subagent_produced_keep_its_run_id() -> None:
    transcript = fold(
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant",
         "subagentRunId": "sub-1"},
        call_start("c", subagentRunId="sub-2"),
        {"type": "TOOL_CALL_RESULT", "messageId": "t", "toolCallId": "c", "content": "ok",
         "subagentRunId": "sub-3"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "subagentRunId": "sub-4"},
        {"type": "TOOL_CALL_RESULT", "messageId": "t2", "toolCallId": "c", "content": "again"},
    )
    assert transcript.messages == [
        {"id": "m", "role": "assistant", "subagentRunId": "sub-1"},
        {"id": "c", "role": "assistant", "subagentRunId": "sub-2",
         "toolCalls": [function_call("c")]},
        {"id": "t", "role": "tool", "toolCallId": "c", "content": "ok", "subagentRunId": "sub-3"},
        {"id": "r", "role": "reasoning", "subagentRunId": "sub-4", "content": ""},
        {"id": "t2", "role": "tool", "toolCallId": "c", "content": "again"},
    ]


def test_several_calls_attach_to_one_parent_message() -> None:
    transcript = fold(
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant",
         "subagentRunId": "sub"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"},
        call_start("c1", parentMessageId="m"), call_start("c2", parentMessageId="m"),
    )
    assert transcript.messages == [
        {"id": "m", "role": "assistant", "subagentRunId": "sub", "content": "hi",
         "toolCalls": [function_call("c1"), function_call("c2")]},
    ]


def test_an_encrypted_value_lands_on_the_message_or_call_it_names() -> None:
    transcript = fold(
        {"type": "REASONING_MESSAGE_START", "messageId": "r"},
        call_start("c"),
        encrypted("r", "secret-r", metadata={"a": 1, "b": 1}),
        encrypted("r", "secret-r2", metadata={"b": 2}),
        encrypted("c", "secret-c", "tool-call", metadata={"ignored": True}),
    )
    assert transcript.messages == [
        {"id": "r", "role": "reasoning", "encryptedValue": "secret-r2",
         "metadata": {"a": 1, "b": 2}, "content": ""},
        {"id": "c", "role": "assistant", "toolCalls": [
            {**function_call("c"), "encryptedValue": "secret-c"}]},
    ]


def test_an_encrypted_value_without_metadata_leaves_the_messages_metadata_alone() -> None:
    transcript = fold({"type": "REASONING_MESSAGE_START", "messageId": "r"},
                      encrypted("r", "v"), encrypted("r", "w", metadata="not a dict"))
    assert transcript.messages == [
        {"id": "r", "role": "reasoning", "encryptedValue": "w", "content": ""}]


def test_encrypted_values_naming_nothing_known_or_malformed_are_ignored() -> None:
    events = [
        {"type": "REASONING_MESSAGE_START", "messageId": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        call_start("c", parentMessageId="m"),
        encrypted("r", 3), encrypted(None, "v"), encrypted(["r"], "v"),
        encrypted("c", "v"), encrypted("r", "v", "tool-call"), encrypted("nobody", "v"),
        encrypted("nobody", "v", "tool-call"),
        {"type": "CUSTOM", "name": "n", "value": 1, "entityId": "r", "encryptedValue": "v"},
    ]
    transcript = fold(*events)
    assert transcript.messages == [
        {"id": "r", "role": "reasoning", "content": ""},
        {"id": "m", "role": "assistant", "toolCalls": [function_call("c")]},
    ]


STORED: list[dict[str, Any]] = [
    {"id": "r", "role": "reasoning", "content": "thought"},
    {"id": "m", "role": "assistant", "content": "Hel", "metadata": {"k": "v"},
     "toolCalls": [function_call("c1", '{"a":'), function_call("c2", "{}")]},
    {"id": "t", "role": "tool", "toolCallId": "c2", "content": ""},
    {"id": "e", "role": "reasoning", "content": ""},
    {"id": "n", "role": "assistant", "toolCalls": [
        {"id": "c3", "type": "function", "function": {"name": "g"}}]},
]


def test_restored_messages_read_back_as_they_were_stored() -> None:
    stored = copy.deepcopy(STORED)
    transcript = Transcript()
    transcript.restore(stored)
    assert stored == STORED
    expected = copy.deepcopy(STORED)
    expected[4]["toolCalls"][0]["function"]["arguments"] = ""
    assert transcript.messages == expected
    assert transcript.unanswered_calls() == ["c1", "c3"]


def test_a_restored_fold_goes_on_with_text_arguments_and_encrypted_values() -> None:
    transcript = Transcript()
    transcript.restore(copy.deepcopy(STORED))
    for event in [
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": " 1}"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c3", "delta": "[]"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "n", "delta": "after"},
        encrypted("c1", "sealed", "tool-call"),
        encrypted("m", "sealed-m", metadata={"x": 1}),
        {"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "ok"},
    ]:
        transcript.apply(event)
    messages = {message["id"]: message for message in transcript.messages}
    assert messages["m"] == {
        "id": "m", "role": "assistant", "content": "Hel", "metadata": {"k": "v", "x": 1},
        "encryptedValue": "sealed-m",
        "toolCalls": [{**function_call("c1", '{"a": 1}'), "encryptedValue": "sealed"},
                      function_call("c2", "{}")]}
    assert messages["n"] == {"id": "n", "role": "assistant", "content": "after", "toolCalls": [
        {"id": "c3", "type": "function", "function": {"name": "g", "arguments": "[]"}}]}
    assert transcript.unanswered_calls() == ["c3"]


def test_text_streamed_to_a_restored_message_follows_its_stored_text() -> None:
    transcript = Transcript()
    transcript.restore([{"id": "m", "role": "assistant", "content": "Hel"}])
    transcript.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "lo"})
    assert transcript.messages == [{"id": "m", "role": "assistant", "content": "Hello"}]
