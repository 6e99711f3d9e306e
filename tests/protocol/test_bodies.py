"""Request bodies parsed once, in ``protocol/``: the same octets or decoded JSON give the same
answer, and every bad body is one ``InputError`` with a stable code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iobridge.errors import InputError
from iobridge.protocol.bodies import parse_json_object
from iobridge.protocol.thread_bodies import (
    MAX_METADATA_BYTES,
    MAX_TITLE_LENGTH,
    parse_thread_create,
    parse_thread_update,
)
from iobridge.protocol.tool_results import ToolResult, parse_tool_result


@pytest.mark.parametrize(("body", "code"), [
    (b"{not json", "INVALID_JSON"),
    (b"[1]", "INVALID_REQUEST"),
    (b'"text"', "INVALID_REQUEST"),
    (b'{"a": "\\u0000"}', "INVALID_TEXT"),
    ({"a": "\x00"}, "INVALID_TEXT"),
])
def test_a_body_that_is_not_a_clean_json_object_is_refused(body: Any, code: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_json_object(body)
    assert refused.value.code == code


def test_octets_text_and_decoded_json_read_alike() -> None:
    assert parse_json_object(b'{"a": [1]}') == parse_json_object('{"a": [1]}') == {"a": [1]}
    decoded = {"a": [1]}
    assert parse_json_object(decoded) is decoded


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"result": {"sky": "clear"}}',
     ToolResult(content='{"sky":"clear"}', value={"sky": "clear"})),
    ({"content": "plain"}, ToolResult(content="plain", value="plain")),
    (b'{"output": 3, "isError": true}', ToolResult(content="3", value=3, is_error=True)),
    ({"error": "no"}, ToolResult(content='{"error":"no"}', value={"error": "no"},
                                 is_error=True)),
])
def test_a_tool_result_body_becomes_the_result_the_agent_sees(
        body: Any, expected: ToolResult) -> None:
    assert parse_tool_result(body) == expected


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "request body is not valid JSON"),
    (b"[]", "request body must be a JSON object"),
    ({}, "body must carry one of: result, content, output, error"),
    ({"content": 3}, "content must be a string or a list of content parts"),
    ({"result": 1, "isError": "yes"}, "isError must be a boolean"),
    ({"result": 1, "error": 2}, "error must be a string"),
])
def test_a_bad_tool_result_body_says_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_tool_result(body)
    assert refused.value.message == message


def test_an_empty_thread_body_means_every_default() -> None:
    created = parse_thread_create(b"  ")
    assert (created.id, created.title, created.metadata) == (None, None, None)
    assert parse_thread_update(b"").title is None


def test_a_thread_body_is_checked_field_by_field() -> None:
    created = parse_thread_create(b'{"id": "t1", "title": "T", "metadata": {"k": 1}, "x": 1}')
    assert (created.id, created.title, created.metadata) == ("t1", "T", {"k": 1})
    with pytest.raises(InputError) as wrong_type:
        parse_thread_create({"title": 3})
    assert wrong_type.value.details == [
        {"field": "title", "message": "Input should be a valid string"}]


@pytest.mark.parametrize(("body", "code"), [
    ({"id": "bad\nid"}, "INVALID_ID"),
    ({"agentId": ""}, "INVALID_ID"),
    ({"title": "x" * (MAX_TITLE_LENGTH + 1)}, "INVALID_REQUEST"),
    ({"metadata": {"k": "x" * MAX_METADATA_BYTES}}, "INVALID_REQUEST"),
    ({"title": "a\x00b"}, "INVALID_TEXT"),
])
def test_a_thread_body_the_store_would_refuse_is_refused_before_it(body: Any, code: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_thread_create(body)
    assert refused.value.code == code
    if "id" not in body and "agentId" not in body:
        with pytest.raises(InputError):
            parse_thread_update(body)


def test_titles_and_metadata_at_their_limits_are_accepted() -> None:
    title = "x" * MAX_TITLE_LENGTH
    metadata = {"k": "x" * (MAX_METADATA_BYTES - len('{"k":""}'))}
    patch = parse_thread_update({"title": title, "metadata": metadata})
    assert (patch.title, patch.metadata) == (title, metadata)


@pytest.mark.parametrize("as_text", [False, True])
def test_the_configured_depth_applies_to_every_body(as_text: bool) -> None:
    fits, deep = {"a": {"b": {"c": 1}}}, {"a": {"b": {"c": {"d": 1}}}}
    assert parse_json_object(json.dumps(fits) if as_text else fits, max_depth=3) == fits
    with pytest.raises(InputError) as info:
        parse_json_object(json.dumps(deep) if as_text else deep, max_depth=3)
    assert info.value.code == "JSON_TOO_DEEP"
