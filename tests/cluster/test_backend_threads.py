"""Two Backends over one real Redis, in process: a busy thread's queue and interrupts across
replicas, a run refused after its claim, a forgotten run, transports' aliases, and Redis
going away under a claim. (The replica subprocesses of ``test_replicas.py`` run unmutated
code; these judge ``cluster/redis.py`` itself.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from tests.cluster.replicas import redis_server

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS, Principal
from iobridge.config import Settings
from iobridge.errors import NotFoundError, ServiceUnavailable


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as url:
        yield url


def _gated() -> tuple[FunctionAgent, dict[str, asyncio.Event]]:
    gates: dict[str, asyncio.Event] = {}

    async def parked(ctx: Any) -> AsyncIterator[str]:
        yield f"started {ctx.run_id}"
        await gates.setdefault(ctx.run_id, asyncio.Event()).wait()
        yield "done"

    return FunctionAgent(parked, id="parked"), gates


def _body(run_id: str, thread: str = "t", **props: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "forwardedProps": {"agentId": "parked", **props},
            "messages": [{"id": f"u-{run_id}", "role": "user", "content": f"go {run_id}"}]}


def _outcome(run: Any) -> Any:
    """RUN_FINISHED's outcome (``success`` when it has none), or RUN_ERROR's code."""
    last = json.loads(run.log.entries()[-1][1])
    if last["type"] == "RUN_FINISHED":
        return last.get("outcome", {"type": "success"})
    return last["code"]


async def _queued(redis: Any, key: bytes) -> int:
    kind = (await redis.type(key)).decode()
    return int(await {"zset": redis.zcard, "list": redis.llen}[kind](key))


async def _until(check: Any, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


async def test_a_run_queued_on_b_takes_the_thread_as_soon_as_a_frees_it(redis_url: str) -> None:
    """Woken by A's release, not by its heartbeat poll (10 s here); a queued run cancelled
    meanwhile leaves the shared queue and stores nothing; every replica sees the thread busy
    while a run holds it or waits for it."""
    agent, gates = _gated()
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="q",
                        heartbeat_seconds=10, owner_lost_seconds=30)
    redis = aioredis.from_url(redis_url)
    try:
        async with Backend(settings, agents=[agent]) as a, Backend(settings, agents=[agent]) as b:
            first = await a.start_run(ANONYMOUS, _body("a1"))
            await _until(lambda: b"started a1" in b"".join(d for _, d in first.log.entries()))
            assert await b.cluster.thread_busy("default", "t") is True  # the lock alone
            assert await b.cluster.thread_busy("default", "other") is False
            queued = await b.start_run(ANONYMOUS, _body("b1", multitaskStrategy="enqueue"))
            dropped = await b.start_run(ANONYMOUS, _body("b2", multitaskStrategy="enqueue"))
            assert queued.queued and dropped.queued
            (queue,) = await redis.keys("q:queue:*")
            assert await _queued(redis, queue) == 2
            assert await a.cluster.thread_busy("default", "t") is True
            # The lock expiring while runs wait: the thread is still busy (its queue).
            (lock,) = await redis.keys("q:thread:*")
            held, ttl = await redis.get(lock), await redis.pttl(lock)
            await redis.delete(lock)
            assert await a.cluster.thread_busy("default", "t") is True
            await redis.set(lock, held, px=ttl)
            assert len(await redis.keys("q:live:*b2")) == len(await redis.keys("q:run:*b2")) == 1
            assert await b.cancel_run(ANONYMOUS, "b2") is True
            await asyncio.wait_for(asyncio.shield(dropped.task), 5)
            assert _outcome(dropped) == "RUN_CANCELLED"
            assert await _queued(redis, queue) == 1
            # The run left whole: its claim on the runId and its record, not only its place.
            assert await redis.keys("q:live:*b2") == await redis.keys("q:run:*b2") == []
            gates.setdefault("a1", asyncio.Event()).set()
            await first.task
            await _until(lambda: b"started b1" in b"".join(d for _, d in queued.log.entries()))
            # The thread's holder is b1 now: a run on A that interrupts stops b1 on B.
            third = await a.start_run(ANONYMOUS, _body("a3", multitaskStrategy="interrupt"))
            await asyncio.wait_for(asyncio.shield(queued.task), 5)
            assert _outcome(queued) != {"type": "success"}
            await _until(lambda: b"started a3" in b"".join(d for _, d in third.log.entries()))
            gates.setdefault("a3", asyncio.Event()).set()
            await asyncio.wait_for(asyncio.shield(third.task), 5)
            assert _outcome(third) == {"type": "success"}
            # memory:// is each replica's own store: A holds a1's turn, B b1's and not b2's.
            assert "go a1" in json.dumps((await a.list_messages(ANONYMOUS, "t")).messages)
            on_b = json.dumps((await b.list_messages(ANONYMOUS, "t")).messages)
            assert "go b1" in on_b and "go b2" not in on_b
            assert await redis.keys("q:queue:*") == [] and await redis.keys("q:thread:*") == []
            assert await a.cluster.thread_busy("default", "t") is False
    finally:
        await redis.aclose()


async def test_a_queued_run_that_lost_its_place_ends_cluster_unavailable(redis_url: str) -> None:
    """Its entry gone from the shared queue (expired), the run ends at its next turn with
    RUN_ERROR CLUSTER_UNAVAILABLE, before it started; the running one is untouched."""
    agent, gates = _gated()
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="lp",
                        heartbeat_seconds=10, owner_lost_seconds=30)
    redis = aioredis.from_url(redis_url)
    try:
        async with Backend(settings, agents=[agent]) as a, Backend(settings, agents=[agent]) as b:
            first = await a.start_run(ANONYMOUS, _body("a1"))
            queued = await b.start_run(ANONYMOUS, _body("b1", multitaskStrategy="enqueue"))
            (queue,) = await redis.keys("lp:queue:*")
            (lock,) = await redis.keys("lp:thread:*")
            await redis.delete(queue)
            await redis.publish("lp:freed", lock)  # a turn: as when any run frees the thread
            await asyncio.wait_for(asyncio.shield(queued.task), 5)
            last = json.loads(queued.log.entries()[-1][1])
            assert (last["type"], last["code"]) == ("RUN_ERROR", "CLUSTER_UNAVAILABLE")
            assert last["message"] == "the run lost its place in the thread's queue"
            assert not first.task.done()
            gates.setdefault("a1", asyncio.Event()).set()
            await first.task
            assert _outcome(first) == {"type": "success"}
    finally:
        await redis.aclose()


@pytest.mark.parametrize("where", ["other replica", "same replica"])
@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
async def test_a_run_started_with_interrupt_stops_the_holder(
    redis_url: str, strategy: str, where: str
) -> None:
    agent, gates = _gated()
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix=strategy)
    async with Backend(settings, agents=[agent]) as a, Backend(settings, agents=[agent]) as b:
        if where == "same replica":
            b = a
        first = await a.start_run(ANONYMOUS, _body("a1"))
        await _until(lambda: b"started a1" in b"".join(d for _, d in first.log.entries()))
        second = await b.start_run(ANONYMOUS, _body("b1", multitaskStrategy=strategy))
        await asyncio.wait_for(asyncio.shield(first.task), 5)
        assert _outcome(first) != {"type": "success"}
        await _until(lambda: b"started b1" in b"".join(d for _, d in second.log.entries()))
        gates.setdefault("b1", asyncio.Event()).set()
        await asyncio.wait_for(asyncio.shield(second.task), 5)
        assert "go b1" in json.dumps((await b.list_messages(ANONYMOUS, "t")).messages)
        # Each replica's own memory:// store: an interrupted run keeps its turn, a rolled
        # back one stores nothing.
        try:
            kept = json.dumps((await a.list_messages(ANONYMOUS, "t")).messages)
        except NotFoundError:
            kept = ""
        assert ("go a1" in kept) is (strategy == "interrupt")


async def test_a_run_refused_after_its_claim_leaves_no_lock(redis_url: str) -> None:
    """The thread belongs to another resource: the run is refused as if the thread did not
    exist, and the claim it took is released, not left to expire."""
    agent, gates = _gated()
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="ab")
    redis = aioredis.from_url(redis_url)
    try:
        async with Backend(settings, agents=[agent]) as a:
            gates.setdefault("r1", asyncio.Event()).set()
            done = await a.start_run(ANONYMOUS, _body("r1", resourceId="alice"))
            await done.task
            with pytest.raises(NotFoundError):
                await a.start_run(ANONYMOUS, _body("r2", resourceId="bob"))
            assert await redis.keys("ab:thread:*") == []
            assert await redis.keys("ab:live:*") == []
            assert await a.cluster.thread_busy("bob", "t") is False
    finally:
        await redis.aclose()


async def test_a_run_its_replica_forgets_is_gone_from_redis_too(redis_url: str) -> None:
    agent, gates = _gated()
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="fg",
                        max_retained_runs=1)
    redis = aioredis.from_url(redis_url)
    try:
        async with Backend(settings, agents=[agent]) as a, Backend(settings, agents=[agent]) as b:
            for n in (1, 2):
                gates.setdefault(f"r{n}", asyncio.Event()).set()
                run = await a.start_run(ANONYMOUS, _body(f"r{n}", thread=f"t{n}"))
                await run.task
            assert await b.find_run(ANONYMOUS, "r2") is not None
            await _until(lambda: True)
            for _ in range(500):
                if not await redis.keys("fg:run:*r1"):
                    break
                await asyncio.sleep(0.01)
            assert await redis.keys("fg:run:*r1") == []
            assert len(await redis.keys("fg:run:*r2")) == 1
            with pytest.raises(NotFoundError):
                await b.find_run(ANONYMOUS, "r1")
    finally:
        await redis.aclose()


async def test_transport_aliases_are_shared_per_principal_scope(redis_url: str) -> None:
    """An alias is found on every replica by the principal that made it, for the same
    resources: a member of a shared principal for other resources neither finds it nor
    replaces it."""
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="al")
    redis = aioredis.from_url(redis_url)
    try:
        async with Backend(settings) as a, Backend(settings) as b:
            await a.aliases.remember(ANONYMOUS, b"\x00corr-1", "run-1")
            assert await b.aliases.recall(ANONYMOUS, b"\x00corr-1") == "run-1"
            assert await b.aliases.recall(ANONYMOUS, b"\x00corr-2") is None
            (key,) = await redis.keys("al:alias:*")
            assert key.endswith(b"\x00corr-1".hex().encode())
            # Kept for as long as finished runs are (retention plus the lost bound).
            ttl = await redis.pttl(key)
            expected = (settings.retention_seconds + settings.owner_lost_seconds) * 1000
            assert expected - 5000 < ttl <= expected
            alice, bob = (Principal(id="acme", resource_ids=frozenset({name}),
                                    default_resource=name) for name in ("alice", "bob"))
            both = Principal(id="acme", resource_ids=frozenset({"bob", "alice"}),
                             default_resource="alice")
            await a.aliases.remember(alice, b"\x00corr-1", "run-a")
            await a.aliases.remember(bob, b"\x00corr-1", "run-b")
            assert await b.aliases.recall(alice, b"\x00corr-1") == "run-a"
            assert await b.aliases.recall(bob, b"\x00corr-1") == "run-b"
            assert await b.aliases.recall(both, b"\x00corr-1") is None
            await a.aliases.remember(both, b"\x00corr-1", "run-ab")
            # The same resources in another order (and another default) are the same scope.
            same = Principal(id="acme", resource_ids=frozenset({"alice", "bob"}),
                             default_resource="bob")
            assert await b.aliases.recall(same, b"\x00corr-1") == "run-ab"
            assert await b.aliases.recall(ANONYMOUS, b"\x00corr-1") == "run-1"
    finally:
        await redis.aclose()


async def test_without_redis_a_claim_is_503_cluster_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stack = contextlib.ExitStack()
    url = stack.enter_context(redis_server(tmp_path))
    settings = Settings(database_url="memory://", redis_url=url, redis_prefix="gone")
    agent, _ = _gated()
    try:
        async with Backend(settings, agents=[agent]) as a:
            stack.close()
            with pytest.raises(ServiceUnavailable) as claim:
                await a.start_run(ANONYMOUS, _body("r1"))
            assert (claim.value.code, claim.value.retry_after) == ("CLUSTER_UNAVAILABLE", 1.0)
            assert str(claim.value) == "the shared run state (Redis) does not answer"
            with caplog.at_level(logging.WARNING, logger="iobridge"):
                assert await a.readiness_problem() == "Redis does not answer"
            (said,) = [r for r in caplog.records if r.name == "iobridge.cluster"
                       and "readiness" in r.getMessage()]
            assert said.getMessage() == "readiness: Redis does not answer"
            assert said.exc_info is not None  # why, for the operator
            with pytest.raises(ServiceUnavailable) as busy:
                await a.cluster.thread_busy("default", "t")
            assert busy.value.code == "CLUSTER_UNAVAILABLE"
    finally:
        stack.close()


async def test_closing_ends_a_heartbeat_that_lost_its_cancellation(redis_url: str) -> None:
    """On Python 3.11 ``asyncio.wait_for`` (under redis-py's commands) drops a cancellation
    that arrives as its command completes; the heartbeat then sleeps and beats on. Closing
    the Backend cancels it again instead of waiting for it forever (the hang of a SIGTERMed
    replica in ``tests/durable/test_replicas.py``)."""
    settings = Settings(database_url="memory://", redis_url=redis_url, redis_prefix="hb",
                        heartbeat_seconds=0.05, owner_lost_seconds=1)
    backend = Backend(settings, agents=[_gated()[0]])
    await backend.__aenter__()
    beating, lost = asyncio.Event(), []

    async def beat() -> None:
        beating.set()
        try:
            await asyncio.sleep(3600)  # a command that completes as the cancel arrives
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(True)  # what wait_for does with it on 3.11: the command's result

    backend.cluster._beat = beat  # type: ignore[attr-defined]
    await asyncio.wait_for(beating.wait(), 5)
    await asyncio.wait_for(backend.__aexit__(None, None, None), 10)
    assert lost == [True]
