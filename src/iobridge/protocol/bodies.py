"""Request bodies as JSON objects: the one decoding every non-run body goes through.

A transport reads a body within its size limit and hands the octets (or JSON it already
decoded) to the Backend; the Backend parses them here, so every transport refuses the same
bodies with the same error.
"""

from __future__ import annotations

from typing import Any

import orjson

from iobridge.errors import InputError
from iobridge.protocol.text import reject_nul

__all__ = ["Body", "parse_json_object"]

#: What a transport hands over: the body's octets or text, or the JSON it already decoded.
Body = bytes | str | dict[str, Any]


def parse_json_object(body: Body) -> dict[str, Any]:
    """``body`` as a JSON object.

    Raises:
        InputError: not JSON (``INVALID_JSON``), not an object, or U+0000 in any of its
            text (``INVALID_TEXT``).
    """
    if isinstance(body, dict):
        data: Any = body
        raw: bytes | str | None = None
    else:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InputError("request body is not valid JSON", code="INVALID_JSON") from exc
        raw = body
    if not isinstance(data, dict):
        raise InputError("request body must be a JSON object")
    reject_nul(data, raw)
    return data
