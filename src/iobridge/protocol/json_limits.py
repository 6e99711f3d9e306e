"""One depth limit and one integer range for every JSON value that enters the server.

Every JSON document a client or an upstream agent sends is decoded here (``loads``) or, when a
Python caller hands over decoded data, checked here (``check_value``), once, at the edge:

- **Depth.** No value may nest more than ``max_json_depth`` containers (default 64). Every
  serialiser behind the edge has a lower ceiling than its parser: orjson decodes 1024 levels
  but encodes only 254, ``json`` and ``jsonschema`` recurse in Python (about 1000 frames),
  pydantic has its own guard. A value that passed the edge therefore encodes again wherever it
  goes: wrapped in an event, a stored message, a Mastra part or an upstream request, each of
  which adds a few levels (far below the 254 - 128 of headroom the largest allowed setting
  leaves). Refused with ``400 JSON_TOO_DEEP``.
- **Numbers.** orjson decodes integers outside [-2**63, 2**64 - 1] as floats, silently losing
  digits, and cannot encode such an ``int`` at all. Such an integer is refused with
  ``400 NUMBER_OUT_OF_RANGE`` rather than changed (``docs/security.md``), as is a number
  beyond the range of a double (``1e400``, or an integer of 309 digits), which orjson refuses.

JSON text carried *inside* strings (tool-call ``arguments``) is checked with
``check_json_text``: a model's history sends it on as text, but the Mastra view and the tool
dispatch decode it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from iobridge.errors import InputError

__all__ = [
    "DEFAULT_MAX_JSON_DEPTH",
    "MAX_INT",
    "MAX_JSON_DEPTH_SETTING",
    "MIN_INT",
    "JsonLimitError",
    "check_json_text",
    "check_value",
    "depth_exceeds",
    "encodes_within",
    "loads",
]

#: Default of ``Settings.max_json_depth``.
DEFAULT_MAX_JSON_DEPTH = 64
#: Highest ``max_json_depth`` a configuration may set: what passes the edge must still encode
#: (orjson: 254 levels) after an event, a stored message or a Mastra part has wrapped it.
MAX_JSON_DEPTH_SETTING = 128
#: The integers orjson keeps exactly (and encodes): int64 and uint64.
MIN_INT = -(2**63)
MAX_INT = 2**64 - 1
#: Levels of lists orjson encodes at most (it refuses the 255th).
_ORJSON_MAX_LEVELS = 254
#: A decimal integer outside [MIN_INT, MAX_INT] has at least 19 digits: text without such a
#: run of digits (the common case) skips the exact check.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")

JSON_TOO_DEEP = "JSON_TOO_DEEP"
NUMBER_OUT_OF_RANGE = "NUMBER_OUT_OF_RANGE"
INVALID_JSON = "INVALID_JSON"


class JsonLimitError(InputError):
    """A JSON value is not valid JSON, nests too deep, or holds an integer out of range."""


def _too_deep(max_depth: int, where: str) -> JsonLimitError:
    return JsonLimitError(
        f"{where} nests deeper than {max_depth} levels", code=JSON_TOO_DEEP,
        details=[{"field": where, "message": f"at most {max_depth} nested arrays/objects"}],
    )


def _out_of_range(where: str) -> JsonLimitError:
    return JsonLimitError(
        f"{where} holds an integer outside [-2^63, 2^64-1] or a number beyond a double, "
        "which would not be kept exactly",
        code=NUMBER_OUT_OF_RANGE,
        details=[{"field": where, "message": "integers must fit in 64 bits"}],
    )


def _wrapped(value: Any, max_depth: int) -> Any:
    """``value`` inside as many one-element lists as leave ``max_depth`` levels to orjson."""
    for _ in range(_ORJSON_MAX_LEVELS - max_depth):
        value = [value]
    return value


def encodes_within(value: Any, max_depth: int) -> bool:
    """Whether ``value`` encodes as JSON and nests at most ``max_depth`` levels (``< 254``)."""
    try:
        orjson.dumps(_wrapped(value, max_depth))
    except orjson.JSONEncodeError:
        return False
    return True


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests more than ``max_depth`` arrays/objects (``{}`` is depth 1).

    ``value`` is wrapped in as many one-element lists as leave exactly ``max_depth`` levels
    to orjson's encoder, which refuses the 255th: one pass in C instead of a walk in Python
    (4 MiB of small nested arrays: 9-30 ms instead of 0.2-0.9 s, measured; the walk remains
    for values orjson refuses for another reason, such as a Python caller's non-JSON types).
    """
    if max_depth >= _ORJSON_MAX_LEVELS:
        return _walk_exceeds(value, max_depth)
    try:
        orjson.dumps(_wrapped(value, max_depth))
    except orjson.JSONEncodeError as exc:
        if "Recursion limit" in str(exc):
            return True
        return _walk_exceeds(value, max_depth)
    return False


def _walk_exceeds(value: Any, max_depth: int) -> bool:
    """``depth_exceeds`` level by level, without recursion."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        children: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, dict | list):
                    children.append(child)
        level = children
    return False


def _check_int(text: str) -> int:
    number = int(text)
    if not MIN_INT <= number <= MAX_INT:
        raise OverflowError
    return number


def _ints_in_range(data: bytes | str) -> bool:
    """Whether every integer literal of JSON text ``data`` fits orjson's range.

    Only text with a run of 19 digits (in a string or a number) is decoded again, by the
    standard library, which hands each integer literal to a check; ``data`` is already known
    to be valid JSON within the depth limit, so that decode cannot recurse too far.
    """
    if isinstance(data, bytes):
        if _LONG_DIGITS.search(data) is None:
            return True
    elif _LONG_DIGITS_TEXT.search(data) is None:
        return True
    try:
        json.loads(data, parse_int=_check_int)
    except OverflowError:
        return False
    return True


def _has_big_int(value: Any) -> bool:
    """Whether decoded ``value`` holds an ``int`` outside [MIN_INT, MAX_INT] (Python callers)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if not MIN_INT <= item <= MAX_INT:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads(data: bytes | str, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
          where: str = "request body") -> Any:
    """Decode JSON text within the limits (see the module docstring).

    Raises:
        JsonLimitError: not JSON (``INVALID_JSON``), nested deeper than ``max_depth``
            (``JSON_TOO_DEEP``), or an integer out of range (``NUMBER_OUT_OF_RANGE``).
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise _too_deep(max_depth, where) from None
        if "infinity" in str(exc):
            raise _out_of_range(where) from None
        raise JsonLimitError(f"{where} is not valid JSON", code=INVALID_JSON) from None
    if (
        isinstance(value, dict | list)
        and _brackets(data) > max_depth
        and depth_exceeds(value, max_depth)
    ):
        raise _too_deep(max_depth, where)
    if not _ints_in_range(data):
        raise _out_of_range(where)
    return value


def _brackets(data: bytes | str) -> int:
    """How many arrays/objects open in ``data`` at most (strings included): text with no
    more of them than the limit cannot nest deeper, which most events and small bodies show
    by a count in C."""
    if isinstance(data, bytes):
        return data.count(b"[") + data.count(b"{")
    return data.count("[") + data.count("{")


def check_value(value: Any, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
                where: str = "request body") -> None:
    """The checks of ``loads`` for a value already decoded (or built by a Python caller).

    Raises:
        JsonLimitError: ``JSON_TOO_DEEP`` or ``NUMBER_OUT_OF_RANGE``.
    """
    if depth_exceeds(value, max_depth):
        raise _too_deep(max_depth, where)
    if _has_big_int(value):
        raise _out_of_range(where)


def check_json_text(text: str, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
                    where: str = "arguments") -> None:
    """Refuse JSON text nested deeper than ``max_depth`` or with an integer out of range.

    Text that is not JSON at all passes (whoever reads it treats that on its own); text with
    no more than ``max_depth`` brackets cannot nest too deep and is not decoded.

    Raises:
        JsonLimitError: ``JSON_TOO_DEEP`` or ``NUMBER_OUT_OF_RANGE``.
    """
    if _brackets(text) > max_depth:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if "depth limit" in str(exc):
                raise _too_deep(max_depth, where) from None
            return
        if depth_exceeds(value, max_depth):
            raise _too_deep(max_depth, where)
    if _LONG_DIGITS_TEXT.search(text) is not None:
        try:
            json.loads(text, parse_int=_check_int)
        except OverflowError:
            raise _out_of_range(where) from None
        except (ValueError, RecursionError):
            return
