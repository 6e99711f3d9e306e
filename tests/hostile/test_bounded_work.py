"""Bounded work per request: the message-count limit, and a loop that keeps answering.

Each hostile body goes to a real server (its own process) on loopback while another client
polls ``GET /healthz``; every probe must answer within ``RESPONSIVE`` seconds (the issue's
reproduction stalled the loop for 2.4 s). A shared machine adds scheduling noise to single
probes, so each measurement is the best of ``TRIALS`` attempts: a real stall shows in every
attempt, noise rarely in all. These bounds are the issue's acceptance figures, far from the
failure they guard against, not performance measurements.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
from tests.helpers import run_body

from iobridge.config import Settings

#: A stall detector, not a speed figure: the issue's reproduction held the loop for 2.4 s, a
#: healthy server answers in milliseconds, and a loaded CI machine (load 12 on 2 cores was
#: seen) adds up to ~0.2 s of scheduling noise. The bound sits between the two.
RESPONSIVE = 0.6
#: A run at the limit is accepted and stored: writing 10,000 rows holds the loop for one
#: batch insert (0.1-0.2 s on a busy 2-core machine, more under load).
RESPONSIVE_AT_LIMIT = 1.2
TRIALS = 5


def many_messages(count: int, *, run_id: str = "r1", thread_id: str = "t1") -> bytes:
    """A run body with ``count`` short user messages (100,000 fit the default 4 MiB)."""
    body = run_body("x", run_id=run_id, thread_id=thread_id)
    body["messages"] = [{"id": f"{i:x}", "role": "user", "content": ""} for i in range(count)]
    return orjson.dumps(body)


async def probe_while(client: httpx.AsyncClient, work: asyncio.Task[Any]) -> list[float]:
    """Latencies of ``GET /healthz`` issued back to back until ``work`` is done (at least 3)."""
    latencies: list[float] = []
    while not work.done() or len(latencies) < 3:
        started = time.perf_counter()
        try:
            answer = await client.get("/healthz")
        except httpx.RemoteProtocolError:
            # The server closed this idle keep-alive connection (its header deadline: this
            # loaded client was late with the next request); a GET is retried on a new one,
            # as a browser does, and the latency counts both.
            answer = await client.get("/healthz")
        latencies.append(time.perf_counter() - started)
        assert answer.status_code == 200
    return latencies


async def worst_probe(
    probe: httpx.AsyncClient, work: Callable[[int], Awaitable[Any]], trials: int = TRIALS
) -> tuple[float, list[Any]]:
    """The worst probe latency while ``work(trial)`` runs: best of ``trials``; and the
    results of every attempt."""
    best, results = float("inf"), []
    for trial in range(trials):
        task = asyncio.create_task(work(trial))
        latencies = await probe_while(probe, task)
        results.append(await task)
        best = min(best, max(latencies))
    return best, results


async def post_json(client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Response:
    return await client.post(path, content=body, headers={"content-type": "application/json"})


def test_default_limit_is_ten_thousand() -> None:
    assert Settings().max_messages == 10_000


async def test_message_limit_is_checked_at_the_limit(serve: Any) -> None:
    server = serve(max_messages=3)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        over = await post_json(client, "/io-bridge/run", many_messages(4, thread_id="over"))
        assert over.status_code == 413
        assert over.json()["error"]["code"] == "TOO_MANY_MESSAGES"
        assert "3" in over.json()["error"]["message"]
        assert (await client.get("/io-bridge/threads/over")).status_code == 404
        at = await post_json(client, "/io-bridge/run", many_messages(3, thread_id="at"))
        assert at.status_code == 200
        stored = await client.get("/io-bridge/threads/at/messages")
        assert [m["id"] for m in stored.json()["messages"]][:3] == ["0", "1", "2"]


async def test_a_100k_message_body_is_refused_quickly_and_the_loop_keeps_answering(
    server_process: Any,
) -> None:
    url = server_process()
    body = many_messages(100_000)
    assert len(body) < Settings().max_body_bytes  # the count refuses it, not the size
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as hostile,
        httpx.AsyncClient(base_url=url, timeout=30) as probe,
    ):
        await probe.get("/healthz")  # both connected before timing
        await hostile.get("/healthz")
        worst, answers = await worst_probe(
            probe, lambda _: post_json(hostile, "/io-bridge/run", body)
        )
    for refused in answers:
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "TOO_MANY_MESSAGES"
    assert worst < RESPONSIVE, worst
    print(f"100k messages: worst probe {worst * 1000:.1f} ms (best of {TRIALS})")


async def test_a_run_at_the_default_limit_keeps_the_loop_answering(
    server_process: Any,
) -> None:
    url = server_process()
    bodies = [many_messages(10_000, run_id=f"r{i}", thread_id=f"t{i}") for i in range(TRIALS)]
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as hostile,
        httpx.AsyncClient(base_url=url, timeout=30) as probe,
    ):
        await probe.get("/healthz")
        await hostile.get("/healthz")
        worst, answers = await worst_probe(
            probe, lambda trial: post_json(hostile, "/io-bridge/run", bodies[trial])
        )
    for accepted in answers:
        assert accepted.status_code == 200
        assert '"RUN_FINISHED"' in accepted.text
    assert worst < RESPONSIVE_AT_LIMIT, worst
    print(f"10k messages: worst probe {worst * 1000:.1f} ms (best of {TRIALS})")
