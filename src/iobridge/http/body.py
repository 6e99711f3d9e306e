"""Reading request bodies with a hard size limit (checked while reading, not after)."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from iobridge.errors import InputError, PayloadTooLarge


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
