"""``read_body``: a request body read under a hard limit, checked against the declared
length before reading and against the bytes as they arrive (a chunked body declares none);
a client gone mid-body is told apart from a bad body."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.http.body import read_body


def request(chunks: list[bytes], declared: str | None = None,
            disconnect: bool = False) -> tuple[Request, list[int]]:
    """A request whose body arrives in ``chunks``; also how many chunks were read."""
    headers = [] if declared is None else [(b"content-length", declared.encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    read = [0]

    async def receive() -> dict[str, Any]:
        if read[0] == len(chunks):
            if disconnect:
                return {"type": "http.disconnect"}
            raise AssertionError("read past the last chunk")
        read[0] += 1
        last = read[0] == len(chunks) and not disconnect
        return {"type": "http.request", "body": chunks[read[0] - 1], "more_body": not last}

    return Request(scope, receive), read


async def test_a_body_of_exactly_the_limit_is_read_whole() -> None:
    body, read = request([b"abc", b"de"], declared="5")
    assert await read_body(body, 5) == b"abcde"
    body, read = request([b"ab", b"cd", b"e"])  # chunked: no declared length
    assert await read_body(body, 5) == b"abcde" and read[0] == 3


async def test_a_declared_length_past_the_limit_is_refused_before_reading() -> None:
    body, read = request([b"abcdef"], declared="6")
    with pytest.raises(PayloadTooLarge, match=r"^request body exceeds 5 bytes$") as caught:
        await read_body(body, 5)
    assert caught.value.status == 413 and read[0] == 0


async def test_a_body_past_the_limit_is_refused_at_the_chunk_that_crosses_it() -> None:
    body, read = request([b"abc", b"def", b"ghi"])
    with pytest.raises(PayloadTooLarge, match=r"^request body exceeds 5 bytes$"):
        await read_body(body, 5)
    assert read[0] == 2  # the third chunk is never asked for
    # A declared length that lies low does not let more through.
    body, read = request([b"abc", b"def"], declared="3")
    with pytest.raises(PayloadTooLarge):
        await read_body(body, 5)


@pytest.mark.parametrize("declared", ["", "-1", "5x", " 9"])
async def test_a_declared_length_that_is_not_a_number_is_left_to_the_bytes(
    declared: str,
) -> None:
    body, _ = request([b"abcde"], declared=declared)
    assert await read_body(body, 5) == b"abcde"


async def test_a_client_gone_mid_body_is_client_disconnected() -> None:
    body, _ = request([b"abc"], disconnect=True)
    with pytest.raises(InputError) as caught:
        await read_body(body, 5)
    assert (caught.value.code, caught.value.message) == (
        "CLIENT_DISCONNECTED", "the client disconnected")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
