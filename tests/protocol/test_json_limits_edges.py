"""The JSON limits at their edges: what a client reads in each refusal (message, code and
details, with the ``where`` and the limit it was given), text handed over as ``str``, the
range's very ends, and limits at or past orjson's own."""

from __future__ import annotations

from typing import Any

import pytest
from tests.protocol.test_json_limits import nested

from iobridge.protocol.json_limits import (
    MAX_INT,
    MIN_INT,
    JsonLimitError,
    check_json_text,
    check_value,
    depth_exceeds,
    loads,
)


def too_deep_body(where: str, limit: int) -> dict[str, Any]:
    return {"error": {
        "code": "JSON_TOO_DEEP",
        "message": f"{where} nests deeper than {limit} levels",
        "details": [{"field": where, "message": f"at most {limit} nested arrays/objects"}],
    }}


def out_of_range_body(where: str) -> dict[str, Any]:
    return {"error": {
        "code": "NUMBER_OUT_OF_RANGE",
        "message": f"{where} holds an integer outside [-2^63, 2^64-1] or a number beyond a "
                   "double, which would not be kept exactly",
        "details": [{"field": where, "message": "integers must fit in 64 bits"}],
    }}


def test_loads_refusals_name_the_place_and_the_limit() -> None:
    # orjson's own depth limit (1024), past any configurable one.
    with pytest.raises(JsonLimitError) as info:
        loads(b"[" * 2000 + b"]" * 2000, max_depth=7, where="state")
    assert info.value.to_body() == too_deep_body("state", 7)
    # Within orjson's limit, measured after decoding.
    with pytest.raises(JsonLimitError) as info:
        loads(b"[" * 8 + b"]" * 8, max_depth=7, where="state")
    assert info.value.to_body() == too_deep_body("state", 7)
    # A number beyond a double (orjson reads it as infinity).
    with pytest.raises(JsonLimitError) as info:
        loads(b"[1e400]", where="forwardedProps")
    assert info.value.to_body() == out_of_range_body("forwardedProps")
    # An integer past uint64.
    with pytest.raises(JsonLimitError) as info:
        loads(b"[18446744073709551616]", where="forwardedProps")
    assert info.value.to_body() == out_of_range_body("forwardedProps")
    with pytest.raises(JsonLimitError) as info:
        loads(b"{")
    assert info.value.to_body() == {
        "error": {"code": "INVALID_JSON", "message": "request body is not valid JSON"}}


def test_loads_defaults_to_the_request_body_and_64_levels() -> None:
    with pytest.raises(JsonLimitError) as info:
        loads(b"[" * 65 + b"]" * 65)
    assert info.value.to_body() == too_deep_body("request body", 64)
    with pytest.raises(JsonLimitError) as info:
        loads(b"[-9223372036854775809]")
    assert info.value.to_body() == out_of_range_body("request body")


def test_loads_measures_text_handed_over_as_str() -> None:
    """A ``str`` body is counted and scanned like bytes: objects nest as arrays do, and a
    long integer in it is checked too."""
    assert loads('{"a": {"b": {}}}', max_depth=3) == {"a": {"b": {}}}
    with pytest.raises(JsonLimitError) as info:
        loads('{"a": {"b": {}}}', max_depth=2)
    assert info.value.code == "JSON_TOO_DEEP"
    assert loads("[18446744073709551615]") == [MAX_INT]
    with pytest.raises(JsonLimitError) as info:
        loads("[18446744073709551616]")
    assert info.value.code == "NUMBER_OUT_OF_RANGE"
    with pytest.raises(JsonLimitError) as info:
        loads('{"n": -9223372036854775809}')
    assert info.value.code == "NUMBER_OUT_OF_RANGE"


def test_check_value_refusals_name_the_place_and_the_limit() -> None:
    with pytest.raises(JsonLimitError) as info:
        check_value(nested(4), max_depth=3, where="state")
    assert info.value.to_body() == too_deep_body("state", 3)
    with pytest.raises(JsonLimitError) as info:
        check_value({"n": [MAX_INT + 1]}, where="state")
    assert info.value.to_body() == out_of_range_body("state")
    with pytest.raises(JsonLimitError) as info:
        check_value(nested(65))
    assert info.value.to_body() == too_deep_body("request body", 64)
    with pytest.raises(JsonLimitError) as info:
        check_value(MIN_INT - 1)
    assert info.value.to_body() == out_of_range_body("request body")


def test_check_value_keeps_both_ends_of_the_range() -> None:
    check_value({"min": MIN_INT, "max": MAX_INT, "list": [MIN_INT, MAX_INT]})
    check_value(MIN_INT)
    with pytest.raises(JsonLimitError):
        check_value([MIN_INT - 1])
    with pytest.raises(JsonLimitError):
        check_value({"n": MAX_INT + 1})


def test_check_json_text_refusals_name_the_place_and_the_limit() -> None:
    # Past orjson's own decoding limit.
    with pytest.raises(JsonLimitError) as info:
        check_json_text("[" * 5000 + "]" * 5000, max_depth=9, where="tool args")
    assert info.value.to_body() == too_deep_body("tool args", 9)
    # Decoded, then measured.
    with pytest.raises(JsonLimitError) as info:
        check_json_text('{"a": {"b": {"c": {}}}}', max_depth=3, where="tool args")
    assert info.value.to_body() == too_deep_body("tool args", 3)
    with pytest.raises(JsonLimitError) as info:
        check_json_text('{"n": 123456789012345678901234}', where="tool args")
    assert info.value.to_body() == out_of_range_body("tool args")


def test_check_json_text_defaults_to_arguments() -> None:
    with pytest.raises(JsonLimitError) as info:
        check_json_text("[" * 65 + "]" * 65)
    assert info.value.to_body() == too_deep_body("arguments", 64)
    with pytest.raises(JsonLimitError) as info:
        check_json_text("[" * 5000 + "]" * 5000)
    assert info.value.to_body() == too_deep_body("arguments", 64)
    with pytest.raises(JsonLimitError) as info:
        check_json_text("[-9223372036854775809]")
    assert info.value.to_body() == out_of_range_body("arguments")


def test_check_json_text_at_exactly_the_limit_is_not_decoded_for_depth() -> None:
    """As many brackets as the limit cannot nest deeper: only the integer check reads such
    text (Python's json, which also reads ``NaN``, where orjson would give up and let the
    text pass as not JSON)."""
    check_json_text('{"a": {"b": 1}}', max_depth=2)
    with pytest.raises(JsonLimitError) as info:
        check_json_text("[NaN, 123456789012345678901234]", max_depth=1)
    assert info.value.code == "NUMBER_OUT_OF_RANGE"
    # One bracket more and orjson decodes it first: not JSON to it, so it passes.
    check_json_text("[NaN, 123456789012345678901234]", max_depth=0)


@pytest.mark.parametrize("limit", [254, 300])
def test_depth_at_or_past_orjsons_own_limit_is_walked(limit: int) -> None:
    assert not depth_exceeds(nested(limit), limit)
    assert depth_exceeds(nested(limit + 1), limit)
    assert not depth_exceeds({"a": nested(limit - 1)}, limit)
    assert depth_exceeds({"a": nested(limit)}, limit)
