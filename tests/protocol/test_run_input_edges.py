"""``RunAgentInput`` at its edges: the configured depth reaches every field and each tool call's
arguments, and problems of one message never hide another's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iobridge.errors import InputError
from iobridge.protocol.run_input import parse_run_input


def body(*messages: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"threadId": "t", "runId": "r", "messages": list(messages)}
    data.update(overrides)
    return data


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def assistant(*arguments: str, id: str = "a1") -> dict[str, Any]:
    return {"id": id, "role": "assistant", "toolCalls": [
        {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": text}}
        for n, text in enumerate(arguments)]}


@pytest.mark.parametrize("as_text", [False, True])
def test_the_configured_depth_applies_to_the_whole_body(as_text: bool) -> None:
    fits, deep = body(state=nested(5)), body(state=nested(6))
    assert parse_run_input(json.dumps(fits) if as_text else fits, max_depth=6).state == nested(5)
    with pytest.raises(InputError) as info:
        parse_run_input(json.dumps(deep) if as_text else deep, max_depth=6)
    assert info.value.code == "JSON_TOO_DEEP"


def test_tool_call_arguments_nest_at_most_the_configured_depth() -> None:
    """The body itself nests six levels down to ``arguments``; the text inside counts alone."""
    fits = json.dumps(nested(6))
    parsed = parse_run_input(body(assistant("{}", fits)), max_depth=6)
    assert parsed.messages[0]["toolCalls"][1]["function"]["arguments"] == fits
    messages = [{"id": "u1", "role": "user", "content": "hi"},
                assistant("{}", json.dumps(nested(7)))]
    with pytest.raises(InputError) as info:
        parse_run_input(body(*messages), max_depth=6)
    assert info.value.code == "JSON_TOO_DEEP"
    assert info.value.message == (
        "messages[1].toolCalls[1].function.arguments nests deeper than 6 levels"
    )
    assert info.value.details == [{"field": "messages[1].toolCalls[1].function.arguments",
                                   "message": "at most 6 nested arrays/objects"}]


def test_only_assistant_messages_have_their_arguments_decoded() -> None:
    """A tool call on another role is kept as sent (an unknown key) and never decoded."""
    deep = json.dumps(nested(7))
    user = {"id": "u1", "role": "user", "content": "hi", "toolCalls": [
        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": deep}}]}
    assert parse_run_input(body(user), max_depth=6).messages == [user]


def test_a_message_without_a_role_is_named() -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(body({"id": "m1", "content": "hi"}, {"id": "m2", "role": 7}))
    assert info.value.details == [
        {"loc": ["messages", 0, "role"], "message": "Field required"},
        {"loc": ["messages", 1, "role"], "message": "Input should be a valid string"},
    ]


def test_problems_after_an_unknown_role_are_listed_too() -> None:
    messages = [
        {"id": "h1", "role": "human", "content": "hi"},
        {"id": "u1", "role": "user", "content": [{"type": "text", "text": "ok"}]},
        {"id": "u2", "role": "user", "content": [{"type": "image"}]},
    ]
    with pytest.raises(InputError) as info:
        parse_run_input(body(*messages))
    assert [p["loc"] for p in info.value.details] == [
        ["messages", 0, "role"], ["messages", 2, "content", 0, "source"]]


def test_content_problems_keep_the_problems_before_them() -> None:
    messages = [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "u1", "role": "user", "content": "again"},
        {"id": "u2", "role": "user", "content": [{"type": "text", "text": "fine"}]},
    ]
    with pytest.raises(InputError) as info:
        parse_run_input(body(*messages))
    assert info.value.details == [{"loc": ["messages", 1, "id"], "message": "duplicate message id"}]
