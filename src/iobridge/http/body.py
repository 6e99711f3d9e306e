"""Reading request bodies with a hard size limit (checked while reading, not after)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from iobridge.errors import InputError, PayloadTooLarge
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


def parse_json_object(body: bytes) -> dict[str, Any]:
    """``body`` as a JSON object.

    Raises:
        InputError: not JSON (``INVALID_JSON``), not an object, or U+0000 in any of its
            text (``INVALID_TEXT``).
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InputError("request body is not valid JSON", code="INVALID_JSON") from exc
    if not isinstance(data, dict):
        raise InputError("request body must be a JSON object")
    reject_nul(data, body)
    return data


async def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object.

    Raises:
        PayloadTooLarge: body over ``limit``.
        InputError: not JSON, or not an object.
    """
    return parse_json_object(await read_body(request, limit))
