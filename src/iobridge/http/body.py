"""Reading request bodies with a hard size limit (checked while reading, not after)."""

from __future__ import annotations

from typing import Any

from starlette.requests import ClientDisconnect, Request

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH, loads
from iobridge.protocol.text import reject_nul


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes.

    Raises:
        PayloadTooLarge: the declared or actual length exceeds ``limit``.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body exceeds {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # Gone mid-body (or cut off by the server's body timeout): nobody reads the answer.
        raise InputError("the client disconnected", code="CLIENT_DISCONNECTED") from None
    return b"".join(chunks)


def parse_json_object(body: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """``body`` as a JSON object, within the JSON limits (``protocol.json_limits``).

    Raises:
        InputError: not JSON (``INVALID_JSON``), nested deeper than ``max_depth``
            (``JSON_TOO_DEEP``), an integer beyond 64 bits (``NUMBER_OUT_OF_RANGE``), not
            an object, or U+0000 in any of its text (``INVALID_TEXT``).
    """
    data = loads(body, max_depth=max_depth)
    if not isinstance(data, dict):
        raise InputError("request body must be a JSON object")
    reject_nul(data, body)
    return data


async def read_json_object(
    request: Request, limit: int, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> dict[str, Any]:
    """The body as a JSON object.

    Raises:
        PayloadTooLarge: body over ``limit``.
        InputError: not JSON within the limits, or not an object.
    """
    return parse_json_object(await read_body(request, limit), max_depth)
