"""The JSON limits: depth measured exactly, integers kept exactly or refused."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.errors import InputError
from iobridge.protocol.json_limits import (
    MAX_JSON_DEPTH_SETTING,
    _walk_exceeds,
    check_json_text,
    check_value,
    depth_exceeds,
    encodes_within,
    loads,
)


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_orjson_encodes_254_levels_and_refuses_the_255th() -> None:
    """What ``depth_exceeds`` relies on: if orjson changes it, this fails first."""
    orjson.dumps(nested(254))
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        orjson.dumps(nested(255))


@pytest.mark.parametrize("limit", [1, 8, 64, MAX_JSON_DEPTH_SETTING, 253])
def test_depth_is_exact_at_every_limit(limit: int) -> None:
    assert not depth_exceeds(nested(limit), limit)
    assert depth_exceeds(nested(limit + 1), limit)
    if limit > 3:
        assert not depth_exceeds({"a": [{"b": nested(limit - 3)}]}, limit)
        assert depth_exceeds({"a": [{"b": nested(limit - 2)}]}, limit)


_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                max_size=3),
    max_leaves=30,
)


@given(value=_values, limit=st.integers(0, 12))
def test_the_encoder_trick_agrees_with_a_walk(value: Any, limit: int) -> None:
    assert depth_exceeds(value, limit) == _walk_exceeds(value, limit)


def test_values_orjson_refuses_for_other_reasons_are_walked() -> None:
    assert not depth_exceeds({1: [{2, 3}]}, 2)  # non-str key, a set: the walk decides
    assert depth_exceeds({1: [[[0]]]}, 2)


@pytest.mark.parametrize(
    ("text", "code"),
    [(b"[" * 65 + b"]" * 65, "JSON_TOO_DEEP"), (b"[" * 2000 + b"]" * 2000, "JSON_TOO_DEEP"),
     (b"18446744073709551616", "NUMBER_OUT_OF_RANGE"),
     (b'{"a": [-9223372036854775809]}', "NUMBER_OUT_OF_RANGE"),
     (b"[1e400]", "NUMBER_OUT_OF_RANGE"), (b"{", "INVALID_JSON"), (b"NaN", "INVALID_JSON")],
)
def test_loads_refuses_with_a_clear_code(text: bytes, code: str) -> None:
    with pytest.raises(InputError) as info:
        loads(text)
    assert info.value.code == code and info.value.status == 400


def test_loads_keeps_what_fits_exactly() -> None:
    text = (b'{"max": 18446744073709551615, "min": -9223372036854775808, '
            b'"id": "12345678901234567890123", "f": 123456789012345678901.5}')
    assert loads(text) == {"max": 2**64 - 1, "min": -(2**63),
                           "id": "12345678901234567890123", "f": 123456789012345678901.5}
    assert loads("[" * 64 + "]" * 64) == nested(63, [])


def test_check_value_applies_the_same_limits_to_decoded_data() -> None:
    check_value({"n": 2**64 - 1, "deep": nested(60)})
    with pytest.raises(InputError, match="integer"):
        check_value({"n": 2**64})
    with pytest.raises(InputError) as info:
        check_value(nested(65))
    assert info.value.code == "JSON_TOO_DEEP"


def test_json_text_in_strings() -> None:
    check_json_text("not json at all {{{{")
    check_json_text(orjson.dumps(nested(64)).decode())
    check_json_text('"[[[[[[ 123456789012345678901234"')  # brackets and digits in a string
    with pytest.raises(InputError) as info:
        check_json_text(orjson.dumps(nested(65)).decode())
    assert info.value.code == "JSON_TOO_DEEP"
    with pytest.raises(InputError) as info:
        check_json_text("[" * 5000 + "]" * 5000)
    assert info.value.code == "JSON_TOO_DEEP"
    with pytest.raises(InputError) as info:
        check_json_text('{"n": 123456789012345678901234}')
    assert info.value.code == "NUMBER_OUT_OF_RANGE"


def test_encodes_within() -> None:
    assert encodes_within({"a": nested(10)}, 11)
    assert not encodes_within({"a": nested(10)}, 10)
    assert not encodes_within({"a": 2**64}, 10)
    assert not encodes_within({"a": "\ud800"}, 10)
