"""Request bodies as JSON objects: the one decoding every non-run body goes through.

A transport reads a body within its size limit and hands the octets (or JSON it already
decoded) to the Backend; the Backend parses them here, so every transport refuses the same
bodies with the same error.
"""

from __future__ import annotations

from typing import Any

from iobridge.errors import InputError
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH, check_value, loads
from iobridge.protocol.text import reject_nul

__all__ = ["Body", "parse_json_object"]

#: What a transport hands over: the body's octets or text, or the JSON it already decoded.
Body = bytes | str | dict[str, Any]


def parse_json_object(body: Body, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """``body`` as a JSON object, within the JSON limits (``protocol.json_limits``).

    Raises:
        InputError: not JSON (``INVALID_JSON``), nested deeper than ``max_depth``
            (``JSON_TOO_DEEP``), an integer beyond 64 bits (``NUMBER_OUT_OF_RANGE``), not an
            object, or U+0000 in any of its text (``INVALID_TEXT``).
    """
    if isinstance(body, dict):
        check_value(body, max_depth=max_depth)
        data: Any = body
        raw: bytes | str | None = None
    else:
        data = loads(body, max_depth=max_depth)
        raw = body
    if not isinstance(data, dict):
        raise InputError("request body must be a JSON object")
    reject_nul(data, raw)
    return data
