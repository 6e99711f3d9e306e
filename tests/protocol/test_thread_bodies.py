"""Thread bodies: the checks ``validate_title`` and ``validate_metadata`` make on their own
(the stores call them without a parsed body), ids named by their field, and the nesting bound."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.errors import InputError
from iobridge.protocol.thread_bodies import (
    MAX_METADATA_BYTES,
    MAX_TITLE_LENGTH,
    parse_thread_create,
    parse_thread_update,
    validate_metadata,
    validate_title,
)


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str, Any]:
    with pytest.raises(InputError) as refused:
        call(*args, **kwargs)
    return refused.value.code, refused.value.message, refused.value.details


def test_a_title_up_to_the_limit_is_kept_one_more_character_is_refused() -> None:
    title = "é" * MAX_TITLE_LENGTH
    assert validate_title(title) is title
    assert refusal(validate_title, title + "x") == (
        "INVALID_REQUEST", "title is longer than 1024 characters", None)


def test_a_title_that_is_not_text_or_holds_nul_is_refused() -> None:
    assert refusal(validate_title, 3) == ("INVALID_REQUEST", "title must be a string", None)
    assert refusal(validate_title, "a\x00b") == (
        "INVALID_TEXT", "text must not contain U+0000",
        [{"loc": [], "message": "U+0000 is not accepted"}])


def test_metadata_up_to_the_limit_is_kept_one_more_byte_is_refused() -> None:
    fits = {"k": "x" * (MAX_METADATA_BYTES - len('{"k":""}'))}
    assert validate_metadata(fits) is fits
    assert refusal(validate_metadata, {"k": fits["k"] + "x"}) == (
        "INVALID_REQUEST", "metadata is larger than 65536 bytes", None)


def test_metadata_that_is_not_a_json_object_is_refused() -> None:
    assert refusal(validate_metadata, ["a"]) == (
        "INVALID_REQUEST", "metadata must be a JSON object", None)
    assert refusal(validate_metadata, {"k": {1, 2}}) == (
        "INVALID_REQUEST", "metadata is not JSON", None)


def test_metadata_holding_nul_is_refused_where_it_is() -> None:
    assert refusal(validate_metadata, {"a": [1, {"b": "x\x00"}]}) == (
        "INVALID_TEXT", "text must not contain U+0000",
        [{"loc": ["a", 1, "b"], "message": "U+0000 is not accepted"}])


def test_a_wrongly_typed_body_names_each_field_by_its_path() -> None:
    assert refusal(parse_thread_create, {"metadata": {1: "x"}, "title": 2}) == (
        "INVALID_REQUEST", "body is not valid",
        [{"field": "title", "message": "Input should be a valid string"},
         {"field": "metadata.1.[key]", "message": "Input should be a valid string"}])
    assert refusal(parse_thread_update, {"currentBranch": 1}) == (
        "INVALID_REQUEST", "body is not valid",
        [{"field": "currentBranch", "message": "Input should be a valid string"}])


def test_an_id_and_an_agent_id_are_checked_and_named() -> None:
    created = parse_thread_create({"id": "t 1", "agentId": "agent-1", "resourceId": "r"})
    assert (created.id, created.agentId, created.resourceId) == ("t 1", "agent-1", "r")
    assert refusal(parse_thread_create, {"id": ""}) == (
        "INVALID_ID", "id must be a non-empty string", None)
    assert refusal(parse_thread_create, {"agentId": "a\tb"}) == (
        "INVALID_ID", "agentId contains non-printable characters", None)


def test_a_current_branch_is_checked_and_named() -> None:
    assert parse_thread_update({"currentBranch": "b-2"}).currentBranch == "b-2"
    assert parse_thread_update({"title": "T"}).currentBranch is None
    assert refusal(parse_thread_update, {"currentBranch": ""}) == (
        "INVALID_ID", "currentBranch must be a non-empty string", None)


def test_the_nesting_bound_is_the_callers() -> None:
    assert parse_thread_create(b'{"metadata": {"a": 1}}', max_depth=2).metadata == {"a": 1}
    assert refusal(parse_thread_create, b'{"metadata": {"a": {}}}', max_depth=2)[0] == (
        "JSON_TOO_DEEP")
    assert refusal(parse_thread_update, b'{"metadata": {"a": {}}}', max_depth=2)[0] == (
        "JSON_TOO_DEEP")
