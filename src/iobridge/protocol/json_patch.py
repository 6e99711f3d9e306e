"""JSON Patch (RFC 6902) with bounds checked while it applies, for the run's shared state.

A patch is a list of operations from an agent (or an upstream server) and applies to a
document that may be as large as ``max_bytes``; a general-purpose library copies the whole
document, or the copied value, and looks at sizes only afterwards: 22 ``copy`` operations
from the root of a small state doubled it 22 times (21 s, 1.6 GB, measured on the library
this replaces). Here every bound holds at every operation:

- **Operations**: at most ``max_ops`` per patch.
- **Bytes**: the document's encoded size (orjson's compact form) is known exactly after
  every operation, computed from the sizes of what the operation adds and removes, and may
  never exceed ``max_bytes``, not even in between.
- **Depth**: what an operation puts at a path of *n* tokens nests at most
  ``max_depth - n`` levels, so the document never nests deeper than ``max_depth``.
- **Work**: the bytes encoded to measure and copy values are counted, and so is every array
  element an insertion or a removal shifts (each one is at least a byte of the document);
  the patch stops beyond ``WORK_FACTOR * max_bytes`` (a patch that moves one value back and
  forth, or inserts at the head of a long array, would otherwise cost ``max_ops`` times the
  document: 1,000 insertions at the head of a 1 MB array took 0.5 s).

The patch applies whole or not at all without copying the document: containers are copied
on write, each at most once per patch (the first operation that changes one copies it; the
document passed in is never changed). Values that come from the patch or are copied are
decoded afresh, so the result shares nothing with the agent's objects.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from iobridge.protocol.json_limits import depth_exceeds

__all__ = ["WORK_FACTOR", "PatchError", "PatchTooLarge", "apply_patch"]

#: Bytes of measuring and copying one patch may cost, as a multiple of ``max_bytes``.
WORK_FACTOR = 4

_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})

Container = dict[str, Any] | list[Any]


class PatchError(ValueError):
    """The patch is not a valid RFC 6902 patch, or does not apply to the document."""


class PatchTooLarge(PatchError):
    """Applying the patch would pass a bound: ``kind`` says which."""

    def __init__(
        self, message: str, kind: Literal["operations", "work", "bytes", "depth"]
    ) -> None:
        super().__init__(message)
        self.kind = kind


def _pointer(value: Any, what: str) -> list[str]:
    """The reference tokens of an RFC 6901 JSON Pointer."""
    if not isinstance(value, str):
        raise PatchError(f"'{what}' must be a JSON Pointer string")
    if not value:
        return []
    if value[0] != "/":
        raise PatchError(f"'{what}' must be empty or start with '/': {value[:100]!r}")
    tokens = value[1:].split("/")
    for index, token in enumerate(tokens):
        if "~" in token:
            if any(part[:1] not in ("0", "1") for part in token.split("~")[1:]):
                raise PatchError(f"'{what}' has an invalid '~' escape: {value[:100]!r}")
            tokens[index] = token.replace("~1", "/").replace("~0", "~")
    return tokens


def _index(container: list[Any], token: str, *, insert: bool) -> int:
    """A list index token: digits without leading zeros, or ``-`` (the end) to insert."""
    if insert and token == "-":
        return len(container)
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"not an array index: {token[:40]!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not insert):
        raise PatchError(f"array index {index} is out of range")
    return index


def _size(value: Any) -> int:
    return len(orjson.dumps(value))


class _Value:
    """A value an operation puts in the document: its encoded size, and the value itself or
    its encoding (decoded only when it is put, after the size check)."""

    __slots__ = ("_data", "_value", "size")

    def __init__(self, size: int, *, data: bytes | None = None, value: Any = None) -> None:
        self.size = size
        self._data = data
        self._value = value

    def get(self) -> Any:
        return orjson.loads(self._data) if self._data is not None else self._value


class _Patcher:
    """One patch application: the working document, its size, what it owns and has spent."""

    def __init__(self, doc: Any, size: int, max_bytes: int, max_depth: int) -> None:
        self.doc = doc
        self.size = size
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.work = 0
        self.max_work = WORK_FACTOR * max_bytes
        #: Containers made by this application (id -> the container, which keeps the id
        #: from being reused): changed in place; any other container is copied first.
        self.owned: dict[int, Container] = {}

    # -- accounting ---------------------------------------------------------------------

    def _spend(self, nbytes: int) -> None:
        self.work += nbytes
        if self.work > self.max_work:
            raise PatchTooLarge(
                f"the patch needs more than {self.max_work} bytes of copying and shifting", "work"
            )

    def _encoded(self, value: Any) -> bytes:
        try:
            data = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise PatchError(f"a value is not JSON: {exc}") from None
        self._spend(len(data))
        return data

    def _grow(self, delta: int) -> None:
        if self.size + delta > self.max_bytes:
            raise PatchTooLarge(f"the state would exceed {self.max_bytes} bytes", "bytes")
        self.size += delta

    def _fresh(self, value: Any, depth: int) -> _Value:
        """``value`` encoded, to be decoded afresh (sharing nothing) once it fits at ``depth``.
        """
        data = self._encoded(value)
        if isinstance(value, dict | list) and depth_exceeds(value, self.max_depth - depth):
            raise PatchTooLarge(
                f"the state would nest deeper than {self.max_depth} levels", "depth"
            )
        return _Value(len(data), data=data)

    # -- navigation ---------------------------------------------------------------------

    def _get(self, tokens: list[str]) -> Any:
        node = self.doc
        for token in tokens:
            node = self._child(node, token)
        return node

    @staticmethod
    def _child(node: Any, token: str) -> Any:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"no member {token[:100]!r}")
            return node[token]
        if isinstance(node, list):
            return node[_index(node, token, insert=False)]
        raise PatchError(f"{token[:100]!r} is below a value that is not an array or object")

    def _own(self, node: Container) -> Container:
        if id(node) in self.owned:
            return node
        copy: Container = dict(node) if isinstance(node, dict) else list(node)
        self.owned[id(copy)] = copy
        return copy

    def _parent(self, tokens: list[str]) -> Container:
        """The container holding the target of ``tokens`` (non-empty), made writable."""
        if not isinstance(self.doc, dict | list):
            raise PatchError("the document has no members")
        node = self.doc = self._own(self.doc)
        for token in tokens[:-1]:
            child = self._child(node, token)
            if not isinstance(child, dict | list):
                raise PatchError(
                    f"{token[:100]!r} is not an array or object, so nothing is below it"
                )
            owned = self._own(child)
            if owned is not child:
                if isinstance(node, dict):
                    node[token] = owned
                else:
                    node[_index(node, token, insert=False)] = owned
            node = owned
        return node

    # -- operations ---------------------------------------------------------------------

    def add(self, tokens: list[str], value: _Value) -> None:
        """Put ``value`` at ``tokens`` (decoded only once the document has room for it)."""
        size = value.size
        if not tokens:
            self._grow(size - self.size)
            self.doc = value.get()
            return
        parent, key = self._parent(tokens), tokens[-1]
        if isinstance(parent, dict):
            if key in parent:
                self._grow(size - self._measure(parent[key]))
            else:
                self._grow(len(self._encoded(key)) + 1 + size + (1 if parent else 0))
            parent[key] = value.get()
        else:
            index = _index(parent, key, insert=True)
            self._grow(size + (1 if parent else 0))
            self._spend(len(parent) - index)  # the elements the insertion shifts
            parent.insert(index, value.get())

    def remove(self, tokens: list[str]) -> Any:
        """Take the value at ``tokens`` out of the document and return it."""
        if not tokens:
            raise PatchError("the whole document cannot be removed")
        parent, key = self._parent(tokens), tokens[-1]
        if isinstance(parent, dict):
            if key not in parent:
                raise PatchError(f"no member {key[:100]!r}")
            value = parent.pop(key)
            self.size -= len(self._encoded(key)) + 1 + self._measure(value) + (1 if parent else 0)
        else:
            index = _index(parent, key, insert=False)
            self._spend(len(parent) - index - 1)  # the elements the removal shifts
            value = parent.pop(index)
            self.size -= self._measure(value) + (1 if parent else 0)
        return value

    def replace(self, tokens: list[str], value: _Value) -> None:
        """Put ``value`` where a value already is (``add`` would insert into an array)."""
        if not tokens:
            self.add(tokens, value)
            return
        parent, key = self._parent(tokens), tokens[-1]
        if isinstance(parent, dict):
            if key not in parent:
                raise PatchError(f"no member {key[:100]!r}")
            self._grow(value.size - self._measure(parent[key]))
            parent[key] = value.get()
        else:
            index = _index(parent, key, insert=False)
            self._grow(value.size - self._measure(parent[index]))
            parent[index] = value.get()

    def move(self, source: list[str], tokens: list[str]) -> None:
        if source == tokens:
            self._get(source)  # it must exist
            return
        if tokens[: len(source)] == source:
            raise PatchError("a value cannot be moved into itself")
        value = self.remove(source)
        size = self._measure(value)
        if isinstance(value, dict | list) and depth_exceeds(value, self.max_depth - len(tokens)):
            raise PatchTooLarge(
                f"the state would nest deeper than {self.max_depth} levels", "depth"
            )
        self.add(tokens, _Value(size, value=value))

    def _measure(self, value: Any) -> int:
        return len(self._encoded(value))


def _json_equal(left: Any, right: Any) -> bool:
    """RFC 6902 ``test`` equality: JSON types must match (``true`` is not ``1``)."""
    pairs = [(left, right)]
    while pairs:
        a, b = pairs.pop()
        if isinstance(a, dict):
            if not isinstance(b, dict) or a.keys() != b.keys():
                return False
            pairs.extend((a[k], b[k]) for k in a)
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            pairs.extend(zip(a, b, strict=True))
        elif isinstance(a, bool) or isinstance(b, bool):
            if a is not b:
                return False
        elif isinstance(a, int | float) and isinstance(b, int | float):
            if a != b:
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


def apply_patch(
    doc: Any, patch: Any, *, size: int, max_bytes: int, max_ops: int, max_depth: int
) -> tuple[Any, int]:
    """Apply ``patch`` to ``doc`` (left unchanged) within the bounds of the module docstring.

    Args:
        doc: The document (decoded JSON).
        patch: The list of operations.
        size: ``len(orjson.dumps(doc))``, which the caller already knows.
        max_bytes: Largest encoded size the document may reach, at any operation.
        max_ops: Most operations.
        max_depth: Deepest nesting the document may reach.

    Returns:
        The patched document and its encoded size.

    Raises:
        PatchTooLarge: a bound would be passed (``kind`` says which).
        PatchError: not a valid patch, or an operation that does not apply.
    """
    if not isinstance(patch, list):
        raise PatchError("a JSON Patch is a list of operations")
    if len(patch) > max_ops:
        raise PatchTooLarge(
            f"the patch has {len(patch)} operations; at most {max_ops} are allowed",
            "operations",
        )
    patcher = _Patcher(doc, size, max_bytes, max_depth)
    for number, op in enumerate(patch):
        if not isinstance(op, dict) or op.get("op") not in _OPS:
            raise PatchError(f"operation {number} is not an RFC 6902 operation")
        kind = op["op"]
        tokens = _pointer(op.get("path"), "path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {number} ({kind}) has no 'value'")
        if kind == "add":
            patcher.add(tokens, patcher._fresh(op["value"], len(tokens)))
        elif kind == "replace":
            patcher.replace(tokens, patcher._fresh(op["value"], len(tokens)))
        elif kind == "remove":
            patcher.remove(tokens)
        elif kind == "test":
            patcher._measure(op["value"])  # counted as work: the comparison costs as much
            if not _json_equal(patcher._get(tokens), op["value"]):
                raise PatchError(f"operation {number} (test) failed at {op['path'][:100]!r}")
        else:
            source = _pointer(op.get("from"), "from")
            if kind == "move":
                patcher.move(source, tokens)
            else:
                patcher.add(tokens, patcher._fresh(patcher._get(source), len(tokens)))
    return patcher.doc, patcher.size
