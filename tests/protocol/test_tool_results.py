"""``parse_tool_result``: content parts posted by a frontend, structured values as compact
JSON, and the nesting bound the caller sets."""

from __future__ import annotations

import pytest

from iobridge.errors import InputError
from iobridge.protocol.tool_results import ToolResult, parse_tool_result

IMAGE = {"type": "image", "source": {"type": "data", "value": "aGk=", "mimeType": "image/png"}}


def test_content_parts_are_kept_and_their_text_parts_joined() -> None:
    parts = [{"type": "text", "text": "a"}, IMAGE, {"type": "custom", "text": "not text"},
             {"type": "text", "text": "b"}]
    assert parse_tool_result({"content": parts}) == ToolResult(
        content="ab", value=parts, parts=parts, is_error=False)


def test_content_parts_with_an_error_or_is_error_are_an_error() -> None:
    parts = [{"type": "text", "text": "x"}]
    assert parse_tool_result({"content": parts, "error": "bad"}).is_error is True
    assert parse_tool_result({"content": parts, "isError": True}).is_error is True
    assert parse_tool_result({"content": parts, "isError": False}).is_error is False


def test_media_only_content_parts_have_empty_text() -> None:
    result = parse_tool_result({"content": [IMAGE]})
    assert (result.content, result.parts) == ("", [IMAGE])


def test_malformed_content_parts_are_refused_with_where_and_why() -> None:
    with pytest.raises(InputError) as refused:
        parse_tool_result({"content": [{"type": "text", "text": "a"}, 3, {"type": "text"}]})
    assert refused.value.code == "INVALID_REQUEST"
    assert refused.value.message == "content must be text or a list of content parts"
    assert refused.value.details == [
        {"loc": ["content", 1], "message": "a content part must be an object"},
        {"loc": ["content", 2, "text"], "message": "Field required"}]


def test_a_structured_result_is_compact_json() -> None:
    result = parse_tool_result({"result": {"a": [1, 2], "b": "c d"}})
    assert result.content == '{"a":[1,2],"b":"c d"}'


def test_the_nesting_bound_is_the_callers() -> None:
    assert parse_tool_result(b'{"result": [[1]]}', max_depth=3).value == [[1]]
    with pytest.raises(InputError) as refused:
        parse_tool_result(b'{"result": [[[1]]]}', max_depth=3)
    assert refused.value.code == "JSON_TOO_DEEP"
