"""Tolerant ``RunAgentInput`` parsing: lenient about extras, strict about ids and pairing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iobridge.app import parse_run_input_off_loop
from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.run_input import (
    MAX_ID_LENGTH,
    OFF_LOOP_BYTES,
    RUN_AGENT_INPUT_SCHEMA,
    _inline_refs,
    parse_run_input,
)


def body(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"threadId": "t", "runId": "r",
                            "messages": [{"id": "u1", "role": "user", "content": "hi"}]}
    data.update(overrides)
    return data


def test_minimal_body_gets_defaults() -> None:
    parsed = parse_run_input(json.dumps(body()).encode())
    assert (parsed.thread_id, parsed.run_id, parsed.parent_run_id) == ("t", "r", None)
    assert parsed.tools == [] and parsed.context == [] and parsed.forwarded_props == {}
    assert parsed.messages == [{"id": "u1", "role": "user", "content": "hi"}]
    assert parsed.resume == [] and parsed.state is None


def test_resume_entries_keep_their_wire_form_without_empty_fields() -> None:
    resume = [{"interruptId": "i1", "status": "resolved", "payload": {"ok": True},
               "metadata": {"by": "me"}},
              {"interruptId": "i2", "status": "cancelled"}]
    assert parse_run_input(body(resume=resume)).resume == resume
    assert parse_run_input(body(resume=None)).resume == []


def test_what_the_real_client_sends_is_accepted_and_unknown_keys_are_kept() -> None:
    data = body(protocolVersion="1.0", state={}, parentRunId="p", extra={"x": 1},
                tools=[{"name": "get_weather", "description": "d",
                        "parameters": {"type": "object"}, "metadata": {"k": 1}}],
                context=[{"description": "tz", "value": "UTC"}],
                forwardedProps={"agentId": "demo", "unknownKey": [1]})
    parsed = parse_run_input(data)
    assert parsed.parent_run_id == "p" and parsed.state == {}
    assert parsed.tools == [{"name": "get_weather", "description": "d",
                             "parameters": {"type": "object"}, "metadata": {"k": 1}}]
    assert parsed.context == [{"description": "tz", "value": "UTC"}]
    assert parsed.forwarded_props == {"agentId": "demo", "unknownKey": [1]}
    assert parsed.raw["extra"] == {"x": 1}


@pytest.mark.parametrize(
    "message",
    [{"id": "a", "role": "assistant", "toolCalls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
     {"id": "t", "role": "tool", "toolCallId": "c", "content": "ok", "error": "x"},
     {"id": "s", "role": "system", "content": "be brief"},
     {"id": "d", "role": "developer", "content": "dev"},
     {"id": "act", "role": "activity", "activityType": "plan", "content": {}},
     {"id": "rs", "role": "reasoning", "content": "hmm"},
     {"id": "b", "role": "user", "content": [{"type": "binary", "mimeType": "image/png",
                                             "data": "AA=="}]}],
    ids=lambda m: m["role"],
)
def test_every_role_is_accepted(message: dict[str, Any]) -> None:
    assert parse_run_input(body(messages=[message])).messages == [message]


@pytest.mark.parametrize("role", ["human", "User", "some-future-role", "future\nrole", "x" * 300])
def test_a_role_that_is_no_agui_role_is_refused_naming_the_roles(role: str) -> None:
    messages = [{"id": "u", "role": "user", "content": "ok"}, {"id": "h", "role": role}]
    with pytest.raises(InputError) as refused:
        parse_run_input(body(messages=messages))
    assert refused.value.code == "INVALID_REQUEST"
    assert refused.value.details == [{
        "loc": ["messages", 1, "role"],
        "message": f"unknown role {role[:64]!r}; a message's role is one of activity, "
                   "assistant, developer, reasoning, system, tool, user",
    }]


def test_forwarded_props_that_are_not_an_object_become_empty() -> None:
    assert parse_run_input(body(forwardedProps=None)).forwarded_props == {}
    assert parse_run_input(body(forwardedProps=[1])).forwarded_props == {}


@pytest.mark.parametrize(
    ("raw", "code"),
    [(b"{not json", "INVALID_JSON"), (b"[]", "INVALID_REQUEST"), (b'"x"', "INVALID_REQUEST")],
)
def test_bodies_that_are_not_json_objects(raw: bytes, code: str) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(raw)
    assert info.value.code == code and info.value.status == 400


@pytest.mark.parametrize(
    ("data", "loc"),
    [({"runId": "r", "messages": []}, ["threadId"]),
     (body(runId=""), ["runId"]),
     (body(messages="hi"), ["messages"]),
     (body(tools=[{"description": "no name"}]), ["tools", 0, "name"]),
     (body(context=[{"description": "d"}]), ["context", 0, "value"]),
     (body(messages=[{"role": "user", "content": "no id"}]), ["messages", 0, "user", "id"]),
     (body(messages=[{"id": "t", "role": "tool", "content": "x"}]),
      ["messages", 0, "tool", "toolCallId"]),
     (body(messages=[{"id": "a", "role": "assistant", "toolCalls": [{"id": "c"}]}]),
      ["messages", 0, "assistant", "toolCalls", 0, "function"])],
    ids=["no-thread", "empty-run-id", "messages-not-list", "tool-no-name",
         "context-no-value", "message-no-id", "tool-msg-no-call-id", "call-no-function"],
)
def test_malformed_fields_are_reported_with_their_location(
    data: dict[str, Any], loc: list[Any]
) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(data)
    assert info.value.code == "INVALID_REQUEST"
    locations = [d["loc"] for d in info.value.details]
    assert loc in locations, locations


def test_every_problem_is_listed_and_the_input_is_not_modified() -> None:
    messages = [{"id": "u", "role": "user", "content": "a"},
                {"id": "u", "role": "user", "content": "b"},
                {"id": "t", "role": "tool", "content": "x"}]
    data = body(messages=messages)
    snapshot = json.dumps(data, sort_keys=True)
    with pytest.raises(InputError) as info:
        parse_run_input(data)
    problems = info.value.details
    assert {"loc": ["messages", 1, "id"], "message": "duplicate message id"} in problems
    assert any(p["loc"][:2] == ["messages", 2] for p in problems)
    assert json.dumps(data, sort_keys=True) == snapshot


def test_message_count_is_limited_before_validation() -> None:
    # Invalid messages beyond the limit: the count refuses them before any is looked at.
    messages = [{"id": "", "role": 1}] * 4
    with pytest.raises(PayloadTooLarge) as info:
        parse_run_input(body(messages=messages), max_messages=3)
    assert info.value.status == 413 and info.value.code == "TOO_MANY_MESSAGES"
    assert info.value.message == "a run request carries at most 3 messages"
    ok = [{"id": f"u{i}", "role": "user", "content": "hi"} for i in range(3)]
    assert len(parse_run_input(body(messages=ok), max_messages=3).messages) == 3



@pytest.mark.parametrize("key", ["threadId", "runId", "parentRunId"])
def test_run_ids_of_exactly_the_longest_length_are_accepted(key: str) -> None:
    longest = "x" * MAX_ID_LENGTH
    assert MAX_ID_LENGTH == 256  # what the stores' id columns hold
    parsed = parse_run_input(body(**{key: longest}))
    assert {"threadId": parsed.thread_id, "runId": parsed.run_id,
            "parentRunId": parsed.parent_run_id}[key] == longest


@pytest.mark.parametrize("key", ["threadId", "runId", "parentRunId"])
@pytest.mark.parametrize(
    "value", ["a\x00b", "line\nforged", "tab\there", "\x1b[31mred", "x" * (MAX_ID_LENGTH + 1),
              "zero\u200bwidth", "\ud800"],
    ids=["nul", "newline", "tab", "escape", "too-long", "format-char", "lone-surrogate"],
)
def test_run_ids_must_be_printable_and_bounded(key: str, value: str) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(body(**{key: value}))
    assert info.value.code == "INVALID_ID" and info.value.status == 400
    assert key in info.value.message


@pytest.mark.parametrize(
    ("message", "loc"),
    [({"id": "a\nb", "role": "user", "content": "x"}, ["messages", 0, "user", "id"]),
     ({"id": "t", "role": "tool", "toolCallId": "c\r", "content": "x"},
      ["messages", 0, "tool", "toolCallId"])],
    ids=["message-id", "tool-call-id"],
)
def test_message_ids_must_be_printable(
    message: dict[str, Any], loc: list[Any]
) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(body(messages=[message]))
    assert info.value.code == "INVALID_REQUEST"
    assert {"loc": loc, "message": "must contain only printable characters"} in (
        info.value.details)


@pytest.mark.parametrize(
    ("overrides", "loc"),
    [({"messages": [{"id": "u", "role": "user", "content": "a\x00b"}]},
      ["messages", 0, "content"]),
     ({"messages": [{"id": "u", "role": "user", "content": [{"type": "text", "text": "\x00"}]}]},
      ["messages", 0, "content", 0, "text"]),
     ({"messages": [{"id": "u", "role": "other", "k\x00": 1}]}, ["messages", 0, "k\x00"]),
     ({"state": {"deep": [[["\x00"]]]}}, ["state", "deep", 0, 0, 0]),
     ({"forwardedProps": {"agentId": "a\x00"}}, ["forwardedProps", "agentId"])],
    ids=["content", "content-part", "key", "state", "forwarded-props"],
)
def test_nul_anywhere_is_refused_with_its_location(
    overrides: dict[str, Any], loc: list[Any]
) -> None:
    data = body(**overrides)
    for form in (data, json.dumps(data).encode()):
        with pytest.raises(InputError) as info:
            parse_run_input(form)
        assert info.value.code == "INVALID_TEXT"
        assert info.value.details == [{"loc": loc, "message": "U+0000 is not accepted"}]


def test_an_escaped_backslash_before_u0000_is_plain_text() -> None:
    raw = json.dumps(body(messages=[{"id": "u", "role": "user", "content": "\\u0000"}]))
    assert "\\\\u0000" in raw
    assert parse_run_input(raw.encode()).messages[0]["content"] == "\\u0000"


def test_a_deeply_nested_body_is_refused_without_recursion() -> None:
    nested: Any = "\x00"
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(InputError) as info:
        parse_run_input(body(state=nested))
    assert info.value.code == "JSON_TOO_DEEP"


async def test_large_bodies_parse_off_the_loop_with_the_same_result() -> None:
    messages = [{"id": f"u{i}", "role": "user", "content": "x" * 100} for i in range(2000)]
    raw = json.dumps(body(messages=messages)).encode()
    assert len(raw) > OFF_LOOP_BYTES
    parsed = await parse_run_input_off_loop(raw, 2000)
    assert parsed.messages == messages
    with pytest.raises(PayloadTooLarge):
        await parse_run_input_off_loop(raw, 1999)


@pytest.mark.parametrize(
    ("raw", "message", "code"),
    [(b"{not json", "request body is not valid JSON", "INVALID_JSON"),
     (b"[]", "request body must be a JSON object", "INVALID_REQUEST"),
     ({"runId": "r"}, "invalid RunAgentInput", "INVALID_REQUEST"),
     (body(messages=[{"id": "u", "role": "user"}]), "invalid RunAgentInput", "INVALID_REQUEST")],
)
def test_each_refusal_has_its_message(raw: Any, message: str, code: str) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(raw)
    assert (info.value.message, info.value.code) == (message, code)


def test_problem_details_carry_location_and_message_only() -> None:
    messages = [{"id": "a", "role": "user"}, {"id": "b", "role": "user"}]
    with pytest.raises(InputError) as info:
        parse_run_input(body(messages=messages))
    assert info.value.details == [
        {"loc": ["messages", 0, "user", "content"], "message": "Field required"},
        {"loc": ["messages", 1, "user", "content"], "message": "Field required"},
    ]
    with pytest.raises(InputError) as top:
        parse_run_input({"threadId": "t", "runId": "r"})
    assert top.value.details == [{"loc": ["messages"], "message": "Field required"}]


def test_tools_keep_only_what_was_sent_and_context_keeps_its_fields() -> None:
    parsed = parse_run_input(body(tools=[{"name": "t1"}],
                                  context=[{"description": "d", "value": "v"}]))
    assert parsed.tools == [{"name": "t1", "description": ""}]
    assert parsed.context == [{"description": "d", "value": "v"}]


def test_the_published_schema_inlines_local_refs() -> None:
    defs = {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "string"}}
    schema = {"$defs": defs, "type": "object", "properties": {
        "a": {"$ref": "#/$defs/A"}, "many": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
        "other": {"$ref": "https://example.com/x"}}}
    assert _inline_refs(schema, defs) == {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "many": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "other": {"$ref": "https://example.com/x"}}}
    assert "$defs" not in json.dumps(RUN_AGENT_INPUT_SCHEMA)
