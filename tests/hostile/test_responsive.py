"""The loop keeps answering while hostile requests are refused (server in its own process).

Each case sends one kind of hostile traffic while a second client probes ``GET /agents``;
every probe must answer within ``RESPONSIVE`` seconds (best of ``TRIALS`` attempts, see
``test_bounded_work``), and the hostile request must get its clear refusal every time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from tests.helpers import run_body

from .test_bounded_work import RESPONSIVE, TRIALS, worst_probe

Hostile = Callable[[str, httpx.AsyncClient], Awaitable[int]]


async def _raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    return await asyncio.open_connection(parts.hostname, parts.port)


async def _status(reader: asyncio.StreamReader) -> int:
    line = await asyncio.wait_for(reader.readline(), 10)
    return int(line.split()[1]) if line else 0


async def huge_header(url: str, client: httpx.AsyncClient) -> int:
    """Stream a 32 MiB header; the server answers 431 long before the end.

    The answer is read while sending: the server then closes with our bytes unread, and the
    reset that follows would hide an answer read only afterwards.
    """
    reader, writer = await _raw(url)
    answer = asyncio.create_task(_status(reader))
    writer.write(b"GET /io-bridge/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    sent = 0
    with contextlib.suppress(ConnectionError):
        while sent < 32 * 1024 * 1024 and not answer.done():
            writer.write(b"a" * 65536)
            await writer.drain()
            sent += 65536
            # drain() does not yield while the socket takes everything (the server keeps
            # reading to linger): let the reader see an answer that has arrived.
            await asyncio.sleep(0.001)
    status = await answer
    writer.close()
    assert sent < 32 * 1024 * 1024
    return status


async def slowloris(url: str, client: httpx.AsyncClient) -> int:
    """Fifty connections dribbling a head byte by byte; all are closed at the deadline."""

    async def one() -> bool:
        reader, writer = await _raw(url)
        writer.write(b"GET /io-bridge/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(0.05)
                if reader.at_eof():
                    break
        try:
            closed = await asyncio.wait_for(reader.read(), 10) == b""
        except ConnectionResetError:  # closed with our bytes unread: a reset is a close
            closed = True
        writer.close()
        return closed

    results = await asyncio.gather(*(one() for _ in range(50)))
    return 0 if all(results) else 1


def _nul_history() -> bytes:
    body = run_body("x")
    body["messages"] = [{"id": f"{i:x}", "role": "user", "content": "a\x00"}
                        for i in range(9000)]
    body["messages"][-1]["content"] = "b" * 3_000_000 + "\x00"
    return orjson.dumps(body)


#: Built once, outside the timed window (the probe shares this test's loop).
NUL_HISTORY = _nul_history()
DEEP = b'{"threadId":"t","runId":"r","messages":[],"state":' + b"[" * 5000 + b"]" * 5000 + b"}"


async def nul_everywhere(url: str, client: httpx.AsyncClient) -> int:
    """A 3.5 MiB history whose every message holds U+0000."""
    response = await client.post("/io-bridge/run", content=NUL_HISTORY,
                                 headers={"content-type": "application/json"})
    assert response.json()["error"]["code"] == "INVALID_TEXT"
    return response.status_code


async def deep_nesting(url: str, client: httpx.AsyncClient) -> int:
    """A body nested past the JSON decoder's depth limit."""
    response = await client.post("/io-bridge/run", content=DEEP,
                                 headers={"content-type": "application/json"})
    assert response.json()["error"]["code"] == "INVALID_JSON"
    return response.status_code


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [(huge_header, 431), (slowloris, 0), (nul_everywhere, 400), (deep_nesting, 400)],
    ids=["32-mib-header", "slowloris", "nul-history", "deep-nesting"],
)
async def test_the_loop_answers_during_hostile_traffic(
    server_process: Any, hostile: Hostile, expected: int
) -> None:
    url = server_process(header_timeout=1)
    # Both clients exist (and are connected) before timing: the probe shares this loop.
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as probe,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await probe.get("/io-bridge/agents")
        await client.get("/io-bridge/agents")
        worst, answers = await worst_probe(probe, lambda _: hostile(url, client))
    assert answers == [expected] * TRIALS
    assert worst < RESPONSIVE, worst
    print(f"{hostile.__name__}: worst probe {worst * 1000:.1f} ms (best of {TRIALS})")
