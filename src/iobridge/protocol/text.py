"""Strict ids and storable text, shared by the wire parsers and the stores.

Ids (threadId, runId, message ids, resourceIds, ...) end up in log lines, URLs and indexed
columns: they must be short, printable strings. U+0000 is refused in any text a request
carries: PostgreSQL ``text`` and ``jsonb`` cannot hold it, and refusing it everywhere (rather
than only where a store would fail) makes every store answer the same.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from iobridge.errors import InputError

__all__ = [
    "MAX_ID_LENGTH",
    "NUL_ESCAPE",
    "REPLACEMENT",
    "find_nul",
    "has_nul_escape",
    "is_id",
    "reject_nul",
    "replace_nul",
    "validate_id",
]

MAX_ID_LENGTH = 256
#: The only way JSON text can spell U+0000 (a raw NUL byte is not valid JSON).
NUL_ESCAPE = b"\\u0000"
#: What U+0000 in an agent's output becomes (U+FFFD REPLACEMENT CHARACTER).
REPLACEMENT = "\ufffd"


def is_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` passes :func:`validate_id` (for ids an agent makes up: the guard
    drops what no store could keep, rather than stream a message the thread then refuses)."""
    return (
        isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()
    )


def validate_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is a usable id: a non-empty printable string of ≤ 256 chars.

    "Printable" is ``str.isprintable``: no control characters (NUL, newline, ESC, ...), no
    format or separator characters other than the ASCII space, no lone surrogates.

    Raises:
        InputError: otherwise (code ``INVALID_ID``).
    """
    if not isinstance(value, str) or not value:
        raise InputError(f"{what} must be a non-empty string", code="INVALID_ID")
    if len(value) > MAX_ID_LENGTH:
        raise InputError(f"{what} is longer than {MAX_ID_LENGTH} characters", code="INVALID_ID")
    if not value.isprintable():
        raise InputError(f"{what} contains non-printable characters", code="INVALID_ID")
    return value


def find_nul(value: Any) -> list[str | int] | None:
    """The location of the first string (value or object key) holding U+0000, or ``None``.

    Iterative, so a deeply nested body cannot exhaust the interpreter's recursion limit.
    """
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return loc
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    return [*loc, key]
                stack.append((child, [*loc, key]))
        elif isinstance(item, list):
            stack.extend((child, [*loc, index]) for index, child in enumerate(item))
    return None


def has_nul_escape(data: bytes) -> bool:
    """Whether JSON octets hold the escape of U+0000.

    ``bytes.find``, not ``in``: a bytes ``in`` first tries its operand as an integer, so
    every miss raises and clears a ``TypeError`` inside CPython (one per event, measured).
    """
    return data.find(NUL_ESCAPE) != -1


def reject_nul(value: Any, raw: bytes | str | None = None, *, code: str = "INVALID_TEXT") -> None:
    """Refuse ``value`` (decoded JSON) if any of its text holds U+0000.

    ``raw``, the JSON text ``value`` was decoded from, lets the common case skip the walk:
    without the escape in it, no string can hold U+0000.

    Raises:
        InputError: ``code`` (default ``INVALID_TEXT``), with the location in ``details``.
    """
    if isinstance(raw, bytes) and not has_nul_escape(raw):
        return
    if isinstance(raw, str) and NUL_ESCAPE.decode() not in raw:
        return
    loc = find_nul(value)
    if loc is not None:
        raise InputError(
            "text must not contain U+0000",
            code=code,
            details=[{"loc": loc, "message": "U+0000 is not accepted"}],
        )


def replace_nul(value: Any) -> Any:
    """``value`` (decoded JSON) with U+0000 in every string and object key replaced by
    ``REPLACEMENT``; a copy where anything changed. For what an agent produces, which no
    request check saw: the thread must store what the wire showed, and no store can hold
    U+0000 on every database.

    Iterative, like ``find_nul``: a deeply nested value cannot exhaust the recursion limit.
    """
    if isinstance(value, str):
        return value.replace("\x00", REPLACEMENT)
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = item.replace("\x00", REPLACEMENT)
        elif isinstance(item, dict):
            copy = {k.replace("\x00", REPLACEMENT) if isinstance(k, str) else k: v
                    for k, v in item.items()}
            parent[key] = copy
            stack.extend((copy, k) for k in copy)
        elif isinstance(item, list):
            copy_list = list(item)
            parent[key] = copy_list
            stack.extend((copy_list, i) for i in range(len(copy_list)))
    return root[0]
