"""The bounded JSON Patch: RFC 6902 semantics, and every bound held while it applies."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iobridge.protocol.json_patch import WORK_FACTOR, PatchError, PatchTooLarge, apply_patch

BIG = 1 << 30


def apply(doc: Any, patch: Any, **bounds: int) -> Any:
    limits = {"max_bytes": BIG, "max_ops": 10_000, "max_depth": 64, **bounds}
    patched, size = apply_patch(doc, patch, size=len(orjson.dumps(doc)), **limits)
    assert size == len(orjson.dumps(patched))  # the size is tracked exactly
    return patched


# RFC 6902 appendix A (the examples that apply, and those that must fail).
@pytest.mark.parametrize(
    ("doc", "patch", "expected"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
         {"baz": "qux", "foo": "bar"}),
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
         {"foo": ["bar", "qux", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
         {"foo": ["bar", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
         {"baz": "boo", "foo": "bar"}),
        ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
         [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
         {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ({"foo": ["all", "grass", "cows", "eat"]},
         [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
         {"foo": ["all", "cows", "eat", "grass"]}),
        ({"baz": "qux", "foo": ["a", 2, "c"]},
         [{"op": "test", "path": "/baz", "value": "qux"},
          {"op": "test", "path": "/foo/1", "value": 2}],
         {"baz": "qux", "foo": ["a", 2, "c"]}),
        ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
         {"foo": "bar", "child": {"grandchild": {}}}),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
         {"foo": "bar", "baz": "qux"}),
        ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
         {"foo": ["bar", ["abc", "def"]]}),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}],
         {"/": 9, "~1": 10}),
        ({"foo": None}, [{"op": "test", "path": "/foo", "value": None}], {"foo": None}),
        ({"a": 1}, [{"op": "replace", "path": "", "value": [1]}], [1]),
        ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}],
         {"a": {"b": 1}, "c": {"b": 1}}),
        ({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}], {"a": 1}),
    ],
)
def test_rfc_6902_examples(doc: Any, patch: list[Any], expected: Any) -> None:
    before = copy.deepcopy(doc)
    assert apply(doc, patch) == expected
    assert doc == before  # the document passed in is never changed


@pytest.mark.parametrize(
    ("doc", "patch"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),
        ({"foo": 1}, [{"op": "test", "path": "/foo", "value": True}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/01", "value": 2}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/2", "value": 2}]),
        ({"foo": [1]}, [{"op": "replace", "path": "/foo/1", "value": 2}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/-"}]),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}]),
        ({"a": 1}, [{"op": "remove", "path": ""}]),
        ({"a": 1}, [{"op": "add", "path": "a", "value": 1}]),
        ({"a": 1}, [{"op": "add", "path": "/a~2", "value": 1}]),
        ({"a": 1}, [{"op": "add", "path": "/b"}]),
        ({"a": 1}, [{"op": "frobnicate", "path": "/a"}]),
        ({"a": 1}, [{"op": "copy", "path": "/b"}]),
        ({"a": 1}, [{"op": "add", "path": "/b", "value": {1, 2}}]),
        ({"a": 1}, {"op": "add", "path": "/b", "value": 1}),
        ({"a": "x"}, [{"op": "add", "path": "/a/b", "value": 1}]),
    ],
)
def test_what_does_not_apply_is_refused_and_changes_nothing(doc: Any, patch: Any) -> None:
    before = copy.deepcopy(doc)
    with pytest.raises(PatchError):
        apply(doc, patch)
    assert doc == before


def test_a_failing_operation_leaves_the_document_as_it_was() -> None:
    doc = {"a": {"b": [1, 2]}, "c": 3}
    with pytest.raises(PatchError):
        apply(doc, [{"op": "add", "path": "/a/b/-", "value": 3},
                    {"op": "remove", "path": "/c"},
                    {"op": "remove", "path": "/missing"}])
    assert doc == {"a": {"b": [1, 2]}, "c": 3}


def test_the_result_shares_nothing_with_the_patch_values() -> None:
    value = {"list": [1]}
    patched = apply({}, [{"op": "add", "path": "/v", "value": value}])
    value["list"].append(2)
    assert patched == {"v": {"list": [1]}}


def test_doubling_copies_stop_at_the_byte_bound_while_applying() -> None:
    """The reproduction: copies of the root double the state; 22 of them are 4 million
    times its size. The bound stops them at the first operation past it."""
    doc = {"a": "x" * 40}
    patch = [{"op": "copy", "from": "", "path": f"/k{i}"} for i in range(22)]
    assert len(orjson.dumps(patch)) < 1500
    with pytest.raises(PatchTooLarge) as info:
        apply(doc, patch, max_bytes=1024 * 1024)
    assert info.value.kind == "bytes"


def test_the_byte_bound_is_exact() -> None:
    doc = {"s": ""}
    fits = [{"op": "replace", "path": "/s", "value": "x" * 12}]
    assert len(orjson.dumps(apply(doc, fits, max_bytes=20))) == 20
    with pytest.raises(PatchTooLarge):
        apply(doc, [{"op": "replace", "path": "/s", "value": "x" * 13}], max_bytes=20)


def test_an_intermediate_state_over_the_bound_is_refused() -> None:
    patch = [{"op": "add", "path": "/big", "value": "x" * 100},
             {"op": "remove", "path": "/big"}]
    with pytest.raises(PatchTooLarge):
        apply({}, patch, max_bytes=50)


def test_operations_are_counted_before_any_applies() -> None:
    patch = [{"op": "test", "path": "", "value": {}}] * 11
    apply({}, patch[:10], max_ops=10)
    with pytest.raises(PatchTooLarge) as info:
        apply({}, patch, max_ops=10)
    assert info.value.kind == "operations"


def test_moving_a_value_back_and_forth_runs_out_of_work() -> None:
    doc = {"a": "x" * 1000}
    patch = [{"op": "move", "from": "/a", "path": "/b"}, {"op": "move", "from": "/b", "path": "/a"}]
    with pytest.raises(PatchTooLarge) as info:
        apply(doc, patch * 100, max_bytes=2000)
    assert info.value.kind == "work"
    assert WORK_FACTOR * 2000 < 100 * 2 * 1000  # the bound, not the op count, stopped it


@pytest.mark.parametrize(
    ("at_head", "at_tail"),
    [([{"op": "add", "path": "/l/0", "value": 0}] * 100,
      [{"op": "add", "path": "/l/-", "value": 0}] * 100),
     ([{"op": "remove", "path": "/l/0"}] * 100,
      [{"op": "remove", "path": f"/l/{9999 - i}"} for i in range(100)]),
     ([{"op": "move", "from": "/l/0", "path": "/l/-"}] * 100,
      [{"op": "move", "from": "/l/9999", "path": "/l/-"}] * 100)],
    ids=["insert", "remove", "move"],
)
def test_shifting_a_long_array_counts_as_work(
    at_head: list[dict[str, Any]], at_tail: list[dict[str, Any]]
) -> None:
    # Each operation at the head shifts 10,000 elements but changes the size by at most two
    # bytes: without counting the shifts, 1,000 of them on a 1 MB array took 0.5 s.
    doc = {"l": [0] * 10_000}
    max_bytes = 30_000
    assert WORK_FACTOR * max_bytes < 100 * 10_000
    with pytest.raises(PatchTooLarge) as info:
        apply(doc, at_head, max_bytes=max_bytes)
    assert info.value.kind == "work"
    apply(doc, at_tail, max_bytes=max_bytes)  # at the tail nothing shifts


def test_depth_is_bounded_at_the_path_where_a_value_lands() -> None:
    deep: Any = []
    for _ in range(9):
        deep = [deep]  # 10 levels
    with pytest.raises(PatchTooLarge) as info:
        apply({"a": {}}, [{"op": "add", "path": "/a/b", "value": deep}], max_depth=11)
    assert info.value.kind == "depth"
    assert apply({"a": {}}, [{"op": "add", "path": "/a/b", "value": deep}], max_depth=12)


# Differential check against the jsonpatch library on random documents and patches.
_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=2)
_docs = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner,
                                                                 max_size=3),
    max_leaves=8,
)
_paths = st.lists(st.sampled_from(["a", "b", "c", "0", "1", "2", "-"]), max_size=3).map(
    lambda tokens: "".join(f"/{t}" for t in tokens)
)
_ops = st.one_of(
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, _paths, _docs),
    st.builds(lambda p: {"op": "remove", "path": p}, _paths),
    st.builds(lambda p, v: {"op": "replace", "path": p, "value": v}, _paths, _docs),
    st.builds(lambda f, p: {"op": "move", "from": f, "path": p}, _paths, _paths),
    st.builds(lambda f, p: {"op": "copy", "from": f, "path": p}, _paths, _paths),
    st.builds(lambda p, v: {"op": "test", "path": p, "value": v}, _paths, _docs),
)


def _reference(doc: Any, patch: list[Any]) -> tuple[bool, Any]:
    try:
        return True, jsonpatch.apply_patch(copy.deepcopy(doc), patch)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError,
            KeyError, IndexError, ValueError):
        return False, None


@settings(max_examples=400, deadline=None)
@given(doc=_docs, patch=st.lists(_ops, max_size=4))
def test_it_agrees_with_the_jsonpatch_library(doc: Any, patch: list[Any]) -> None:
    ok, expected = _reference(doc, patch)
    # The library compares with Python's ==, where true equals 1; JSON does not.
    bools = any(type(x) is bool for x in _flat(doc)) or any(
        op["op"] == "test" and any(type(x) is bool for x in _flat(op["value"])) for op in patch
    )
    try:
        got: Any = apply(doc, patch)
        mine = True
    except PatchError:
        mine = False
    if bools and ok != mine and any(op["op"] == "test" for op in patch):
        return
    assert mine == ok, (doc, patch, expected)
    if ok:
        assert got == expected


def _flat(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat(v)]
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]
