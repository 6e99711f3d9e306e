"""The bounded JSON Patch at its edges: the message of each refusal (a run's RUN_ERROR quotes
it), sizes tracked exactly at empty containers and replaced members, work counted to the
byte, and ``test`` equality of arrays."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from iobridge.protocol.json_patch import PatchError, PatchTooLarge, apply_patch

BIG = 1 << 30
LONG = "k" * 150  # a key or token longer than the 100 characters a message quotes


def apply(doc: Any, patch: Any, **bounds: int) -> Any:
    limits = {"max_bytes": BIG, "max_ops": 10_000, "max_depth": 64, **bounds}
    patched, size = apply_patch(doc, patch, size=len(orjson.dumps(doc)), **limits)
    assert size == len(orjson.dumps(patched))  # the size is tracked exactly
    return patched


def refusal(doc: Any, patch: Any, **bounds: int) -> str:
    """The message ``patch`` is refused with; the document is left as it was."""
    before = copy.deepcopy(doc)
    with pytest.raises(PatchError) as info:
        apply(doc, patch, **bounds)
    assert doc == before
    return str(info.value)


def too_large(doc: Any, patch: Any, **bounds: int) -> tuple[str, str]:
    with pytest.raises(PatchTooLarge) as info:
        apply(doc, patch, **bounds)
    return info.value.kind, str(info.value)


# -- what a refusal says ---------------------------------------------------------------


def test_a_patch_that_is_not_a_list_of_operations() -> None:
    assert refusal({}, {"op": "add"}) == "a JSON Patch is a list of operations"
    assert refusal({}, [{"op": "test", "path": "", "value": {}}, {"op": "frobnicate"}]) == (
        "operation 1 is not an RFC 6902 operation")
    assert refusal({}, [["add"]]) == "operation 0 is not an RFC 6902 operation"


@pytest.mark.parametrize("kind", ["add", "replace", "test"])
def test_an_operation_without_its_value(kind: str) -> None:
    assert refusal({"a": 1}, [{"op": kind, "path": "/a"}]) == (
        f"operation 0 ({kind}) has no 'value'")


def test_pointers_that_are_not_json_pointers() -> None:
    assert refusal({}, [{"op": "remove"}]) == "'path' must be a JSON Pointer string"
    assert refusal({}, [{"op": "remove", "path": 3}]) == "'path' must be a JSON Pointer string"
    assert refusal({"a": 1}, [{"op": "copy", "path": "/b"}]) == (
        "'from' must be a JSON Pointer string")
    assert refusal({"a": 1}, [{"op": "move", "from": "a", "path": "/b"}]) == (
        "'from' must be empty or start with '/': 'a'")
    assert refusal({"a": 1}, [{"op": "remove", "path": LONG}]) == (
        f"'path' must be empty or start with '/': {LONG[:100]!r}")
    path = "/a~2" + LONG
    assert refusal({"a": 1}, [{"op": "remove", "path": path}]) == (
        f"'path' has an invalid '~' escape: {path[:100]!r}")
    assert refusal({"a": 1}, [{"op": "remove", "path": "/a~"}]) == (
        "'path' has an invalid '~' escape: '/a~'")


def test_escaped_tokens_name_members_with_slashes_and_tildes() -> None:
    assert apply({}, [{"op": "add", "path": "/a~1b", "value": 1}]) == {"a/b": 1}
    assert apply({}, [{"op": "add", "path": "/~1~0~01", "value": 1}]) == {"/~~1": 1}
    assert apply({"a/b": {"~": 2}}, [{"op": "copy", "from": "/a~1b/~0", "path": "/c"}]) == {
        "a/b": {"~": 2}, "c": 2}


def test_array_indexes_out_of_form_or_range() -> None:
    token = "0" + "1" * 60
    assert refusal({"l": [1]}, [{"op": "add", "path": f"/l/{token}", "value": 2}]) == (
        f"not an array index: {token[:40]!r}")
    assert refusal({"l": [1]}, [{"op": "replace", "path": "/l/x", "value": 2}]) == (
        "not an array index: 'x'")
    assert refusal({"l": [1]}, [{"op": "add", "path": "/l/2", "value": 2}]) == (
        "array index 2 is out of range")
    assert refusal({"l": [1]}, [{"op": "remove", "path": "/l/1"}]) == (
        "array index 1 is out of range")


def test_missing_members_are_named() -> None:
    doc = {"a": {"b": 1}}
    assert refusal(doc, [{"op": "remove", "path": "/a/x"}]) == "no member 'x'"
    assert refusal(doc, [{"op": "remove", "path": f"/a/{LONG}"}]) == f"no member {LONG[:100]!r}"
    assert refusal(doc, [{"op": "replace", "path": f"/a/{LONG}", "value": 1}]) == (
        f"no member {LONG[:100]!r}")
    assert refusal(doc, [{"op": "test", "path": f"/{LONG}", "value": 1}]) == (
        f"no member {LONG[:100]!r}")


def test_nothing_is_below_a_scalar() -> None:
    doc = {LONG: 1}
    assert refusal(doc, [{"op": "test", "path": f"/{LONG}/b", "value": 1}]) == (
        "'b' is below a value that is not an array or object")
    assert refusal({"a": 1}, [{"op": "copy", "from": f"/a/{LONG}", "path": "/b"}]) == (
        f"{LONG[:100]!r} is below a value that is not an array or object")
    assert refusal(doc, [{"op": "add", "path": f"/{LONG}/b", "value": 2}]) == (
        f"{LONG[:100]!r} is not an array or object, so nothing is below it")
    assert refusal("text", [{"op": "add", "path": "/a", "value": 2}]) == (
        "the document has no members")
    assert refusal(1, [{"op": "remove", "path": "/0"}]) == "the document has no members"


def test_removals_and_moves_that_cannot_be() -> None:
    assert refusal({"a": 1}, [{"op": "remove", "path": ""}]) == (
        "the whole document cannot be removed")
    assert refusal({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}]) == (
        "a value cannot be moved into itself")


def test_a_value_that_is_not_json() -> None:
    assert refusal({}, [{"op": "add", "path": "/a", "value": {1, 2}}]) == (
        "a value is not JSON: Type is not JSON serializable: set")


def test_a_failed_test_names_the_operation_and_the_path() -> None:
    doc = {"a": 1, LONG: 1}
    assert refusal(doc, [{"op": "test", "path": "/a", "value": 1},
                         {"op": "test", "path": "/a", "value": 2}]) == (
        "operation 1 (test) failed at '/a'")
    path = f"/{LONG}"
    assert refusal(doc, [{"op": "test", "path": path, "value": 2}]) == (
        f"operation 0 (test) failed at {path[:100]!r}")


def test_each_bound_says_what_it_is() -> None:
    assert too_large({}, [{"op": "test", "path": "", "value": {}}] * 4, max_ops=3) == (
        "operations", "the patch has 4 operations; at most 3 are allowed")
    assert too_large({"s": ""}, [{"op": "replace", "path": "/s", "value": "x" * 13}],
                     max_bytes=20) == ("bytes", "the state would exceed 20 bytes")
    assert too_large({"a": {}}, [{"op": "add", "path": "/a/b", "value": [[]]}],
                     max_depth=3) == ("depth", "the state would nest deeper than 3 levels")
    assert too_large({}, [{"op": "test", "path": "", "value": {}}] * 5, max_bytes=2) == (
        "work", "the patch needs more than 8 bytes of copying and shifting")


# -- moves and depth --------------------------------------------------------------------


def test_a_move_is_bounded_by_the_depth_where_the_value_lands() -> None:
    doc = {"a": [[1]], "b": {"c": {}}}  # 3 levels each
    patch = [{"op": "move", "from": "/a", "path": "/b/c/d"}]
    assert too_large(doc, patch, max_depth=4) == (
        "depth", "the state would nest deeper than 4 levels")
    assert apply(doc, patch, max_depth=5) == {"b": {"c": {"d": [[1]]}}}
    # Moved one level up it fits where it was.
    assert apply(doc, [{"op": "move", "from": "/a", "path": "/b/d"}], max_depth=4) == {
        "b": {"c": {}, "d": [[1]]}}


# -- sizes tracked exactly ----------------------------------------------------------------


def test_sizes_at_empty_and_emptied_containers() -> None:
    """A comma separates members: none is added to an empty container or left behind
    by the last one removed (``apply`` checks each size against the encoding)."""
    assert apply({"l": []}, [{"op": "add", "path": "/l/-", "value": 1}]) == {"l": [1]}
    assert apply({"l": []}, [{"op": "add", "path": "/l/0", "value": "ab"}]) == {"l": ["ab"]}
    assert apply({"l": [1]}, [{"op": "add", "path": "/l/0", "value": 2}]) == {"l": [2, 1]}
    assert apply({"a": 1}, [{"op": "remove", "path": "/a"}]) == {}
    assert apply({"a": 1, "b": 2}, [{"op": "remove", "path": "/a"}]) == {"b": 2}
    assert apply({"l": ["x"]}, [{"op": "remove", "path": "/l/0"}]) == {"l": []}
    assert apply({"l": ["x", 2]}, [{"op": "remove", "path": "/l/0"}]) == {"l": [2]}
    assert apply({}, [{"op": "add", "path": "/a", "value": 1}]) == {"a": 1}


def test_sizes_when_a_member_or_element_is_replaced() -> None:
    assert apply({"a": "xxxx"}, [{"op": "add", "path": "/a", "value": 1}]) == {"a": 1}
    assert apply({"a": 1}, [{"op": "add", "path": "/a", "value": "xxxx"}]) == {"a": "xxxx"}
    doc = {"l": [1, "long string"]}
    assert apply(doc, [{"op": "replace", "path": "/l/1", "value": "s"}]) == {"l": [1, "s"]}
    assert apply(doc, [{"op": "replace", "path": "/l/0", "value": [True]}]) == {
        "l": [[True], "long string"]}
    assert doc == {"l": [1, "long string"]}


def test_a_replaced_element_counts_against_the_byte_bound() -> None:
    doc = {"l": [1, 2]}  # 11 bytes
    assert apply(doc, [{"op": "replace", "path": "/l/1", "value": "x" * 7}], max_bytes=19) == {
        "l": [1, "x" * 7]}
    assert too_large(doc, [{"op": "replace", "path": "/l/1", "value": "x" * 8}],
                     max_bytes=19) == ("bytes", "the state would exceed 19 bytes")
    # What the replaced element took is given back.
    assert apply({"l": [1, "x" * 10]}, [{"op": "replace", "path": "/l/1", "value": "y" * 10}],
                 max_bytes=22) == {"l": [1, "y" * 10]}


def test_changes_below_an_array_element_are_copied_on_write() -> None:
    doc = {"l": [{"a": 1}, {"b": [2]}]}
    patched = apply(doc, [{"op": "add", "path": "/l/1/b/-", "value": 3},
                          {"op": "add", "path": "/l/0/c", "value": 4},
                          {"op": "remove", "path": "/l/1/b/0"}])
    assert patched == {"l": [{"a": 1, "c": 4}, {"b": [3]}]}
    assert doc == {"l": [{"a": 1}, {"b": [2]}]}


# -- work counted to the byte -------------------------------------------------------------


def test_work_is_bounded_at_exactly_four_times_the_byte_bound() -> None:
    """Each ``test`` of ``{}`` measures 2 bytes: 4 of them spend 8, all that a 2-byte bound
    allows, and a fifth is refused."""
    check = {"op": "test", "path": "", "value": {}}
    assert apply({}, [check] * 4, max_bytes=2) == {}
    assert too_large({}, [check] * 5, max_bytes=2)[0] == "work"


def test_a_test_spends_the_size_of_its_value() -> None:
    doc = {"a": "x" * 100}  # 108 bytes; each test measures the 102 of its value
    check = {"op": "test", "path": "/a", "value": "x" * 100}
    assert apply(doc, [check] * 4, max_bytes=110) == doc  # 408 of 440
    assert too_large(doc, [check] * 5, max_bytes=110)[0] == "work"  # 510


def test_a_removal_spends_one_per_element_it_shifts() -> None:
    """Removing the head of four elements shifts three and measures the one removed (1
    byte): 4, with 76 one-byte tests 80, the whole work a 20-byte bound allows."""
    doc = {"l": [0, 0, 0, 0]}
    check = {"op": "test", "path": "/l/0", "value": 0}
    patch = [{"op": "remove", "path": "/l/0"}] + [check] * 76
    assert apply(doc, patch, max_bytes=20) == {"l": [0, 0, 0]}
    assert too_large(doc, [*patch, check], max_bytes=20)[0] == "work"
    # At the tail nothing shifts: the measure alone.
    tail = [{"op": "remove", "path": "/l/3"}] + [check] * 79
    assert apply(doc, tail, max_bytes=20) == {"l": [0, 0, 0]}
    assert too_large(doc, [*tail, check], max_bytes=20)[0] == "work"


# -- test equality of arrays --------------------------------------------------------------


def test_arrays_are_equal_element_by_element() -> None:
    doc = {"l": [1, ["a", {"b": None}]], "e": [], "s": "ab", "t": ["a", "b"]}
    assert apply(doc, [{"op": "test", "path": "/l", "value": [1, ["a", {"b": None}]]},
                       {"op": "test", "path": "/e", "value": []}]) == doc
    for path, value in [("/l", [1, ["a", {"b": 0}]]), ("/l", [1]),
                        ("/l", [1, ["a", {"b": None}], 2]), ("/e", [0]), ("/e", {}),
                        ("/t", "ab"), ("/s", ["a", "b"]), ("/l", [1.5, ["a", {"b": None}]])]:
        assert refusal(doc, [{"op": "test", "path": path, "value": value}]) == (
            f"operation 0 (test) failed at {path!r}"), (path, value)
