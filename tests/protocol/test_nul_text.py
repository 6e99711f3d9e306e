"""U+0000 in decoded JSON: found (requests are refused) and replaced (agent outputs)."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.errors import InputError
from iobridge.protocol.text import REPLACEMENT, find_nul, reject_nul, replace_nul


def test_replace_nul_replaces_in_every_string_and_key_and_leaves_the_input_alone() -> None:
    value: dict[str, Any] = {"a": "x\x00y", "b": [1, "\x00", {"\x00k": ["z\x00", None]}],
                             "c": True, "d": 1.5}
    replaced = replace_nul(value)
    r = REPLACEMENT
    assert replaced == {"a": f"x{r}y", "b": [1, r, {f"{r}k": [f"z{r}", None]}], "c": True,
                        "d": 1.5}
    assert find_nul(replaced) is None
    assert value["b"][2] == {"\x00k": ["z\x00", None]}  # a copy: the input is unchanged
    assert replace_nul("a\x00\x00") == f"a{r}{r}"
    assert replace_nul(7) == 7


def test_replace_nul_walks_deep_nesting_without_recursion() -> None:
    deep: Any = "\x00"
    for _ in range(5000):
        deep = [deep]
    out = replace_nul(deep)
    for _ in range(5000):
        out = out[0]
    assert out == REPLACEMENT


def test_reject_nul_names_where_the_first_one_is() -> None:
    with pytest.raises(InputError) as caught:
        reject_nul({"m": [{"content": "ok"}, {"content": "x\x00"}]})
    assert caught.value.code == "INVALID_TEXT"
    assert caught.value.details == [
        {"loc": ["m", 1, "content"], "message": "U+0000 is not accepted"}
    ]
    reject_nul({"m": "fine"})
