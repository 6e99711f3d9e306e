"""Ids and U+0000 at their edges: the default messages, where the escape sits in the octets,
and the raw text that lets a check skip the walk (or not)."""

from __future__ import annotations

import pytest

from iobridge.errors import InputError
from iobridge.protocol.text import REPLACEMENT, has_nul_escape, reject_nul, replace_nul, validate_id


def test_an_id_refusal_names_the_id_by_default() -> None:
    with pytest.raises(InputError) as info:
        validate_id("")
    assert (info.value.code, info.value.message) == ("INVALID_ID", "id must be a non-empty string")
    with pytest.raises(InputError) as info:
        validate_id(7, "runId")
    assert info.value.message == "runId must be a non-empty string"


@pytest.mark.parametrize(("data", "found"), [
    (b'"\\u0000"', True), (b"\\u0000", True), (b'{"a": "x\\u0000"}', True),
    (b"{}", False), (b"", False), (b'"\\u000"', False), (b"\\u0001", False),
])
def test_the_escape_is_found_wherever_it_sits(data: bytes, found: bool) -> None:
    assert has_nul_escape(data) is found


def test_raw_text_with_the_escape_is_walked() -> None:
    with pytest.raises(InputError) as info:
        reject_nul({"a": "x\x00"}, '{"a": "x\\u0000"}')
    assert info.value.code == "INVALID_TEXT"
    assert info.value.message == "text must not contain U+0000"
    assert info.value.details == [{"loc": ["a"], "message": "U+0000 is not accepted"}]


def test_raw_text_without_the_escape_skips_the_walk() -> None:
    """The raw text is trusted: a value it could not have been decoded from is not looked at."""
    reject_nul({"a": "x\x00"}, '{"a": "x"}')
    reject_nul({"a": "x\x00"}, b'{"a": "x"}')
    with pytest.raises(InputError):
        reject_nul({"a": "x\x00"}, b'{"a": "x\\u0000"}')


def test_replace_nul_keeps_keys_that_are_not_text() -> None:
    assert replace_nul({1: "a\x00", "k\x00": [None, 2]}) == {1: f"a{REPLACEMENT}",
                                                             f"k{REPLACEMENT}": [None, 2]}
