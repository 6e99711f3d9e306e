"""The Backend with and without ``redis_url``, in process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from tests.cluster.replicas import a_behind_a_relay, redis_server
from tests.durable.streams import parked
from tests.durable.test_durable_backend import stepping_agent
from tests.helpers import CollectingSink

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS, Principal
from iobridge.cluster.redis import MIRROR_DELAY
from iobridge.config import Settings
from iobridge.errors import (
    ConflictError,
    EventsNotRetained,
    InputError,
    NotFoundError,
    TooManyRequests,
)
from iobridge.runtime.cluster import LocalCluster, RemoteRun
from iobridge.runtime.run import Run
from iobridge.runtime.runlog import DEFAULT_BATCH_BYTES
from iobridge.store.migrate import upgrade

ONE_NODE = """
import asyncio, sys
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings

async def main():
    async with Backend(Settings(database_url="memory://")) as backend:
        body = {"threadId": "t", "runId": "r", "messages": [
            {"id": "u", "role": "user", "content": "hello"}]}
        run = await backend.start_run(ANONYMOUS, body)
        await run.task
        assert run.log.closed
        assert await backend.readiness_problem() is None
    loaded = sorted(m for m in sys.modules if m == "redis" or m.startswith(("redis.",
                    "iobridge.cluster")))
    print(loaded)

asyncio.run(main())
"""


def test_without_redis_url_nothing_of_redis_is_imported_or_run() -> None:
    done = subprocess.run([sys.executable, "-c", ONE_NODE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_readiness_reports_redis_going_away(tmp_path: Path) -> None:
    stack = contextlib.ExitStack()
    url = stack.enter_context(redis_server(tmp_path))
    backend = Backend(Settings(database_url="memory://", redis_url=url, redis_prefix="ready"))
    try:
        async with backend:
            assert backend.cluster.distributed
            assert backend.runtime.cluster is backend.cluster
            assert await backend.readiness_problem() is None
            stack.close()  # Redis stops while the backend serves
            assert await backend.readiness_problem() == "Redis does not answer"
    finally:
        stack.close()
    assert isinstance(backend.cluster, LocalCluster)  # closed: back to one process


#: The frontend tool the "asks" agents call, and a run of them on thread t.
PICK = {"name": "pick", "description": "Pick", "parameters": {"type": "object"}}
ASKS_RUN = {"threadId": "t", "runId": "r", "tools": [PICK], "forwardedProps": {"agentId": "asks"},
            "messages": [{"id": "u", "role": "user", "content": "go"}]}


def _durable_asks() -> FunctionAgent:
    """A durable agent that asks the client to pick and says what it got; called again, once
    continued, with the call's result in its messages."""

    async def asks(ctx: Any) -> AsyncIterator[str]:
        answered = [m["content"] for m in ctx.messages if m["role"] == "tool"]
        yield f"got {answered[-1] if answered else (await ctx.call_tool('pick', {})).content}"

    return FunctionAgent(asks, id="asks", durable=True)


async def _parked_on(a: Backend) -> tuple[Run, str]:
    """``ASKS_RUN`` started on ``a`` and parked on its call; the run and the call's id."""
    run = await a.start_run(ANONYMOUS, ASKS_RUN)
    call = await _frontend_call(run)
    await parked(a, "anonymous", "r")
    return run, call


async def _frontend_call(run: Run) -> str:
    """The id of the run's frontend tool call, once its TOOL_CALL_END is in the log."""
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        while b"TOOL_CALL_END" not in b"".join(d for _, d in run.log.entries()):
            await asyncio.sleep(0.01)
    return str(next(json.loads(d)["toolCallId"] for _, d in run.log.entries()
                    if b"TOOL_CALL_END" in d))


async def _followed_on(b: Backend, run_id: str) -> list[tuple[int, bytes]]:
    """Every event another replica (``b``) reads of ``run_id``, from the start to its end."""
    remote = await b.find_run(ANONYMOUS, run_id)
    assert isinstance(remote, RemoteRun)
    sink = CollectingSink()
    await b.follow(remote, sink)
    assert sink.ending == "end"  # a remote run's end is known from its shared log only
    return sink.events


async def test_runs_are_shared_after_redis_lost_its_scripts(tmp_path: Path) -> None:
    """The scripts are loaded once; after a restart or SCRIPT FLUSH they are loaded again."""
    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="noscript")
        try:
            async with Backend(settings) as a, Backend(settings) as b:
                for n in range(2):
                    assert await redis.script_flush()
                    body = {"threadId": f"t{n}", "runId": f"r{n}", "messages": [
                        {"id": "u", "role": "user", "content": "hello there"}]}
                    run = await a.start_run(ANONYMOUS, body)
                    followed = await _followed_on(b, f"r{n}")
                    await run.task
                    assert followed == run.log.entries()
                    [log] = await redis.keys(f"noscript:log:*r{n}")
                    mirrored = await redis.xrange(log)
                    assert [(int(i.split(b"-")[0]), f[b"d"]) for i, f in mirrored] == followed
                    assert b"e" in mirrored[-1][1]
        finally:
            await redis.aclose()


async def test_a_run_nobody_follows_elsewhere_costs_redis_no_event(tmp_path: Path) -> None:
    """Without a follower on another replica a run's events stay on its replica: Redis has
    its record (so the others find it) and no log; a follower that comes after the run
    ended still replays it whole."""
    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="lazy",
                            heartbeat_seconds=10, owner_lost_seconds=20)  # no beat meanwhile
        try:
            async with Backend(settings) as a, Backend(settings) as b:
                body = {"threadId": "t", "runId": "quiet", "messages": [
                    {"id": "u", "role": "user", "content": "hello there"}]}
                await redis.config_resetstat()
                run = await a.start_run(ANONYMOUS, body)
                await run.task
                await asyncio.sleep(0.1)  # what a mirror would have sent is there by now
                assert await redis.keys("lazy:log:*") == []
                assert len(await redis.keys("lazy:run:*quiet")) == 1
                stats = await redis.info("commandstats")
                assert "cmdstat_xadd" not in stats
                assert stats["cmdstat_evalsha"]["calls"] == 2  # the claim and its release
                assert await _followed_on(b, "quiet") == run.log.entries()
        finally:
            await redis.aclose()


async def test_a_replica_that_stops_leaves_its_retained_runs_to_replay(tmp_path: Path) -> None:
    """A replica that stops cleanly shares the logs of the runs it retained (nobody followed
    them elsewhere): another replica replays them whole after it left."""
    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="left")
        async with Backend(settings) as b:
            async with Backend(settings) as a:
                body = {"threadId": "t", "runId": "done", "messages": [
                    {"id": "u", "role": "user", "content": "hello there"}]}
                run = await a.start_run(ANONYMOUS, body)
                await run.task
            assert await _followed_on(b, "done") == run.log.entries()


async def test_the_heartbeat_keeps_a_long_run_s_claims_and_its_followers(tmp_path: Path) -> None:
    """A run lasting many lost bounds keeps its thread and runId (renewed with each
    heartbeat), and a follower elsewhere never takes it for lost; once it ended, the
    thread is free on the other replica."""

    async def slow(ctx: Any) -> AsyncIterator[str]:
        await asyncio.sleep(1.0)
        yield "done"

    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="beat",
                            heartbeat_seconds=0.1, owner_lost_seconds=0.3)
        agent = FunctionAgent(slow, id="slow")
        async with Backend(settings, agents=[agent]) as a, Backend(settings,
                                                                   agents=[agent]) as b:
            def body(run_id: str) -> dict[str, Any]:
                return {"threadId": "t", "runId": run_id, "agentId": "slow", "messages": [
                    {"id": f"u-{run_id}", "role": "user", "content": "go"}]}

            run = await a.start_run(ANONYMOUS, body("long"))
            following = asyncio.create_task(_followed_on(b, "long"))
            await asyncio.sleep(0.8)  # well past the lost bound
            with pytest.raises(ConflictError) as busy:
                await b.start_run(ANONYMOUS, body("other"))
            assert busy.value.code == "THREAD_BUSY"
            with pytest.raises(ConflictError) as running:
                await b.start_run(ANONYMOUS, {**body("long"), "threadId": "t2"})
            assert running.value.code == "RUN_ALREADY_RUNNING"
            await run.task
            assert await following == run.log.entries()
            assert b"RUN_FINISHED" in run.log.entries()[-1][1]
            after = await b.start_run(ANONYMOUS, body("next"))
            await after.task
            assert b"RUN_FINISHED" in after.log.entries()[-1][1]


async def test_a_follower_whose_attach_was_lost_asks_for_the_mirror(tmp_path: Path) -> None:
    """Pub/sub may lose a message: a follower that reads nothing while the owner lives
    asks it to mirror the run again, and gets every event."""
    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="ask",
                            heartbeat_seconds=0.1, owner_lost_seconds=0.3)
        async with Backend(settings) as a, Backend(settings) as b:
            body = {"threadId": "t", "runId": "r", "messages": [
                {"id": "u", "role": "user", "content": "hello there"}]}
            run = await a.start_run(ANONYMOUS, body)
            await run.task
            remote = await b.find_run(ANONYMOUS, "r")
            assert isinstance(remote, RemoteRun)
            got: list[tuple[int, bytes]] = []
            async with contextlib.aclosing(b.cluster.follow(remote, 0, idle=None)) as batches:
                async for batch in batches:  # no attach went to A: only the follower's ask
                    got += batch
            assert got == run.log.entries()


def _words(count: int, size: int, *, pause_every: int = 0) -> FunctionAgent:
    """``count`` deltas of ``size`` octets each; with ``pause_every``, a pause longer than
    the mirror's delay after that many (so the mirror sends the log in several calls)."""

    async def words(ctx: Any) -> AsyncIterator[str]:
        for i in range(count):
            if pause_every and i % pause_every == 0:
                await asyncio.sleep(2 * MIRROR_DELAY)
            yield f"{i:08d}".ljust(size, "x")

    return FunctionAgent(words, id="words")


async def _mirrored(redis: Any, pattern: str, last_seq: int) -> list[tuple[int, bytes]]:
    """The stream of the one log matching ``pattern`` once its terminal entry is there."""
    mirrored: list[Any] = []
    for _ in range(300):
        logs = await redis.keys(pattern)
        mirrored = await redis.xrange(logs[0]) if logs else []
        if mirrored and b"e" in mirrored[-1][1]:
            break
        await asyncio.sleep(0.01)
    assert mirrored and int(mirrored[-1][0].split(b"-")[0]) == last_seq
    return [(int(i.split(b"-")[0]), f[b"d"]) for i, f in mirrored]


async def test_a_burst_beyond_one_mirror_call_is_mirrored_whole_in_order(
    tmp_path: Path,
) -> None:
    """One script call carries at most DEFAULT_BATCH_BYTES of events: a burst of 3x that
    goes in several calls, every event once, in order, the terminal marked."""
    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="burst")
        try:
            agent = _words(3 * DEFAULT_BATCH_BYTES // 4096, 4096)
            async with Backend(settings, agents=[agent]) as a, Backend(settings) as b:
                body = {"threadId": "t", "runId": "big", "agentId": "words", "messages": [
                    {"id": "u", "role": "user", "content": "go"}]}
                await redis.config_resetstat()
                run = await a.start_run(ANONYMOUS, body)
                followed = await _followed_on(b, "big")
                await run.task
                assert followed == run.log.entries()
                mirrored = await _mirrored(redis, "burst:log:*big", run.log.last_seq)
                assert mirrored == followed
                calls = (await redis.info("commandstats"))["cmdstat_evalsha"]["calls"]
                assert calls >= 2 + 3  # the claim, its release, three mirror calls at least
                [record] = await redis.keys("burst:run:*big")
                assert await redis.hmget(record, ["first", "last", "end"]) == [
                    b"1", str(run.log.last_seq).encode(), str(run.log.last_seq).encode()]
        finally:
            await redis.aclose()


@pytest.mark.parametrize("limit", [8192, 16384])
async def test_the_shared_log_keeps_at_most_max_run_log_bytes(
    tmp_path: Path, limit: int
) -> None:
    """The stream holds the newest events within max_run_log_bytes (the terminal always);
    the record's first sequence number says where it starts; a follower from before it
    is told the events are gone."""
    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="bound",
                            max_run_log_bytes=limit)
        agent = _words(3 * limit // 512, 512, pause_every=4)
        try:
            async with Backend(settings, agents=[agent]) as a, Backend(settings) as b:
                body = {"threadId": "t", "runId": "long", "agentId": "words", "messages": [
                    {"id": "u", "role": "user", "content": "go"}]}
                run = await a.start_run(ANONYMOUS, body)
                followed = await _followed_on(b, "long")  # live, as the stream is trimmed
                await run.task
                assert [seq for seq, _ in followed] == list(range(1, run.log.last_seq + 1))
                mirrored = await _mirrored(redis, "bound:log:*long", run.log.last_seq)
                first = mirrored[0][0]
                assert first > 3  # trimmed: the first kept is one of the deltas
                assert [seq for seq, _ in mirrored] == list(range(first, run.log.last_seq + 1))
                size = sum(len(data) for _, data in mirrored)
                assert limit - len(mirrored[0][1]) < size <= limit  # one more would not fit
                kept = run.log.entries(run.log.first_seq - 1)  # the owner counts overhead too
                assert mirrored[-len(kept):] == kept
                [record] = await redis.keys("bound:run:*long")
                assert await redis.hget(record, "first") == str(first).encode()
                remote = RemoteRun(run_id="long", thread_id="t", owner=run.owner,
                                   resource_id=run.resource_id,
                                   replica="elsewhere", first_seq=first,
                                   last_seq=run.log.last_seq, ended=True)
                with pytest.raises(EventsNotRetained) as trimmed:
                    async for _ in b.cluster.follow(remote, first - 2, idle=None):
                        pass
                assert trimmed.value.first_retained == first
        finally:
            await redis.aclose()


async def test_a_result_and_a_cancel_cross_replicas_typed_and_whole(tmp_path: Path) -> None:
    """A frontend tool's result posted on B reaches the run on A with its value and error
    flag; B's errors for it are A's, raised as A raised them; a cancel via B stops it."""
    seen: list[Any] = []

    async def asks(ctx: Any) -> AsyncIterator[str]:
        result = await ctx.call_tool("pick", {})
        seen.append(result)
        yield "got it"
        await asyncio.sleep(30)

    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="typed")
        agent = FunctionAgent(asks, id="asks")
        async with Backend(settings, agents=[agent]) as a, Backend(settings) as b:
            body = ASKS_RUN
            run = await a.start_run(ANONYMOUS, body)
            call = await _frontend_call(run)
            with pytest.raises(NotFoundError) as unknown:
                await b.submit_tool_result(ANONYMOUS, "r", "no-such-call", {"result": 1})
            assert unknown.value.code == "TOOL_CALL_NOT_FOUND"
            await b.submit_tool_result(ANONYMOUS, "r", call, {"result": {"k": [1]},
                                                               "isError": True})
            with pytest.raises(ConflictError) as twice:
                await b.submit_tool_result(ANONYMOUS, "r", call, {"result": 2})
            assert twice.value.code == "TOOL_RESULT_ALREADY_SUBMITTED"
            while not seen:
                await asyncio.sleep(0.01)
            assert (seen[0].value, seen[0].is_error) == ({"k": [1]}, True)
            assert await b.cancel_run(ANONYMOUS, "r") is True
            await asyncio.wait_for(asyncio.shield(run.task), 5)
            assert json.loads(run.log.entries()[-1][1])["outcome"] == {"type": "cancelled"}
            assert await b.cancel_run(ANONYMOUS, "r") is False


async def test_max_followers_per_run_counts_the_followers_of_every_replica(
    tmp_path: Path,
) -> None:
    """The owner counts a live run's followers wherever they follow from: with the limit at
    2, one follower here and one on another replica leave room for none, on either."""
    release = asyncio.Event()

    async def parked(ctx: Any) -> AsyncIterator[str]:
        yield "waiting"
        await release.wait()
        yield "done"

    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="fol",
                            max_followers_per_run=2)
        agent = FunctionAgent(parked, id="parked")
        async with Backend(settings, agents=[agent]) as a, Backend(settings,
                                                                   agents=[agent]) as b:
            body = {"threadId": "t", "runId": "r", "agentId": "parked", "messages": [
                {"id": "u", "role": "user", "content": "go"}]}
            run = await a.start_run(ANONYMOUS, body)
            here, _ = await a.resume(ANONYMOUS, "r", None)
            there, _ = await b.resume(ANONYMOUS, "r", None)
            assert isinstance(there, RemoteRun)
            sinks = [CollectingSink(), CollectingSink()]
            following = [asyncio.create_task(a.follow(here, sinks[0])),
                         asyncio.create_task(b.follow(there, sinks[1]))]
            for _ in range(500):  # the remote follower's attach reaches the owner
                if run.subscribers == 2:
                    break
                await asyncio.sleep(0.01)
            assert run.subscribers == 2
            for replica in (a, b):
                with pytest.raises(TooManyRequests) as full:
                    await replica.resume(ANONYMOUS, "r", None)
                assert full.value.code == "TOO_MANY_FOLLOWERS"
            release.set()
            await asyncio.gather(*following)
            assert sinks[0].events == run.log.entries()
            # An ended run has no followers to protect: replayed from the shared log.
            ended, _ = await b.resume(ANONYMOUS, "r", None)
            assert isinstance(ended, RemoteRun) and ended.ended


async def test_a_replica_whose_claim_expired_does_not_release_its_successor_s(
    tmp_path: Path,
) -> None:
    """The release compares before it deletes: A's thread lock expired (a pause longer than
    the lost bound), B took the thread, then A's run ends: B's lock stays, the thread stays
    busy on every replica until B's run is stored."""
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def parked(ctx: Any) -> AsyncIterator[str]:
        yield "waiting"
        await gates[ctx.run_id[0]].wait()
        yield "done"

    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="lk")
        agent = FunctionAgent(parked, id="parked")
        try:
            async with Backend(settings, agents=[agent]) as a, Backend(settings,
                                                                       agents=[agent]) as b:
                def body(run_id: str) -> dict[str, Any]:
                    return {"threadId": "t", "runId": run_id, "agentId": "parked",
                            "messages": [{"id": f"u-{run_id}", "role": "user",
                                          "content": "go"}]}

                first = await a.start_run(ANONYMOUS, body("a1"))
                (lock,) = await redis.keys("lk:thread:*")
                await redis.delete(lock)  # A's claim on the thread expired
                second = await b.start_run(ANONYMOUS, body("b1"))  # B takes the thread
                held = await redis.get(lock)
                gates["a"].set()
                await first.task  # A stores its run and releases what it still thinks it holds
                assert await redis.get(lock) == held  # B's lock, untouched
                with pytest.raises(ConflictError) as busy:
                    await a.start_run(ANONYMOUS, body("a2"))
                assert busy.value.code == "THREAD_BUSY"
                gates["b"].set()
                await second.task
                assert await redis.get(lock) is None  # B released its own
        finally:
            await redis.aclose()


async def test_a_follower_goes_on_where_a_stopped_replica_s_durable_run_is_continued(
    tmp_path: Path,
) -> None:
    """A durable run parked on A, followed from B: A stops (the run is let go at its point,
    no terminal event), and B's follower finds the run no process holds, continues it here
    from its checkpoint and goes on, caught up from what it had; the result posted to B then
    finishes it, and the follower's stream ends with RUN_FINISHED."""

    with redis_server(tmp_path) as url:
        settings = Settings(database_url=f"sqlite:///{tmp_path}/runs.db", redis_url=url,
                            redis_prefix="handover", drain_seconds=0)
        agent = _durable_asks()
        async with Backend(settings, agents=[agent]) as b:
            a = Backend(settings, agents=[agent])
            await a.__aenter__()
            try:
                run, call = await _parked_on(a)
                remote = await b.find_run(ANONYMOUS, "r")
                assert isinstance(remote, RemoteRun)
                sink = CollectingSink()
                follower = asyncio.create_task(b.follow(remote, sink))
                async with asyncio.timeout(10):
                    while not any(b"TOOL_CALL_END" in d for _, d in sink.events):
                        await asyncio.sleep(0.01)
            finally:
                await a.__aexit__(None, None, None)  # A stops: the run is let go at its point
            assert run.log.closed and b"RUN_FINISHED" not in run.log.entries()[-1][1]
            async with asyncio.timeout(20):
                while b.runtime.find("anonymous", "r") is None:
                    await asyncio.sleep(0.02)
            continued = b.get_run(ANONYMOUS, "r")
            assert continued.ids is not None and continued.ids.epoch == 1
            # Posted once the follower follows the continued run: a result posted before
            # reaches it inside its catch-up (a MESSAGES_SNAPSHOT), not as TOOL_CALL_RESULT.
            async with asyncio.timeout(10):  # a hang guard, not a timing check
                while not continued.subscribers:
                    await asyncio.sleep(0.01)
            await b.submit_tool_result(ANONYMOUS, "r", call, {"content": "blue"})
            async with asyncio.timeout(20):
                await follower
            kinds = [json.loads(d)["type"] for _, d in sink.events]
            assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
            assert kinds.count("RUN_STARTED") == 1 and kinds.count("TOOL_CALL_END") == 1
            assert "TOOL_CALL_RESULT" in kinds
            text = "".join(json.loads(d).get("delta", "") for _, d in sink.events
                           if b"TEXT_MESSAGE_CONTENT" in d)
            assert text == "got blue"


async def test_a_follower_of_a_lost_replica_s_run_gets_run_lost(tmp_path: Path) -> None:
    """A's Redis stops answering mid-run (its heartbeats stop, as a frozen process's do): the
    run is not durable, so B's follower, once A's heartbeat is past ``owner_lost_seconds``,
    puts RUN_ERROR RUN_LOST in the shared log and its stream ends with it, after what A had
    shared (in process: ``tests/cluster/test_replicas.py`` does it with a SIGKILL)."""
    gate = asyncio.Event()

    async def waits(ctx: Any) -> AsyncIterator[str]:
        yield "started"
        await gate.wait()
        yield "never shared"

    async with a_behind_a_relay(tmp_path, "lost", FunctionAgent(waits, id="waits")) as (
            a, b, relay):
        body = {"threadId": "t", "runId": "r", "forwardedProps": {"agentId": "waits"},
                "messages": [{"id": "u", "role": "user", "content": "go"}]}
        run = await a.start_run(ANONYMOUS, body)
        remote = await b.find_run(ANONYMOUS, "r")
        assert isinstance(remote, RemoteRun)
        sink = CollectingSink()
        follower = asyncio.create_task(b.follow(remote, sink))
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while not any(b"TEXT_MESSAGE_CONTENT" in d for _, d in sink.events):
                await asyncio.sleep(0.01)
        relay.freeze()  # A is cut off from Redis: no heartbeat, nothing shared
        async with asyncio.timeout(20):
            await follower
        last = json.loads(sink.events[-1][1])
        assert (last["type"], last["code"]) == ("RUN_ERROR", "RUN_LOST")
        kinds = [json.loads(d)["type"] for _, d in sink.events]
        assert kinds.count("RUN_STARTED") == 1 and "never shared" not in str(sink.events)
        assert not run.log.closed  # A itself never knew
        gate.set()


async def test_a_follower_of_a_silent_replica_s_durable_run_goes_on_where_it_is_continued(
    tmp_path: Path,
) -> None:
    """A durable run parked on A, followed from B, when A is cut off from Redis: B's
    follower does not end the run RUN_LOST (its checkpoint outlives A); it continues the run
    here and goes on, and the result posted to B finishes it."""

    async with a_behind_a_relay(tmp_path, "follow", _durable_asks()) as (a, b, relay):
        _, call = await _parked_on(a)
        remote = await b.find_run(ANONYMOUS, "r")
        assert isinstance(remote, RemoteRun)
        sink = CollectingSink()
        follower = asyncio.create_task(b.follow(remote, sink))
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while not any(b"TOOL_CALL_END" in d for _, d in sink.events):
                await asyncio.sleep(0.01)
        relay.freeze()  # A goes silent: its heartbeat stops
        async with asyncio.timeout(20):
            while b.runtime.find("anonymous", "r") is None:
                await asyncio.sleep(0.02)
            await b.submit_tool_result(ANONYMOUS, "r", call, {"content": "blue"})
            await follower
        kinds = [json.loads(d)["type"] for _, d in sink.events]
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
        assert "RUN_ERROR" not in kinds and kinds.count("TOOL_CALL_END") == 1


async def test_a_lost_replica_s_producing_durable_run_is_taken_over_by_a_peer_s_sweep(
    tmp_path: Path,
) -> None:
    """A durable run producing on A (past its first step's point) when A is cut off from
    Redis, its store still reachable: B's sweep finds A lost and continues the run from that
    point (epoch 1), without the step done before it, to RUN_FINISHED. A's copy goes on too,
    but its end write is fenced by the epoch: it stores nothing and ends without a terminal
    event, and the thread holds both steps' replies once."""
    gate = asyncio.Event()
    async with a_behind_a_relay(tmp_path, "sweep", stepping_agent(gate)) as (a, b, relay):
        body = {"threadId": "t", "runId": "r", "forwardedProps": {"agentId": "steps"},
                "messages": [{"id": "u", "role": "user", "content": "go"}]}
        first = await a.start_run(ANONYMOUS, body)
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while (point := await b.store.load_checkpoint("anonymous", "r")) is None \
                    or point.phase != "running" or not point.point.get("messages"):
                await asyncio.sleep(0.01)
        relay.freeze()  # A goes silent: its heartbeat stops
        async with asyncio.timeout(20):
            while (taken := b.runtime.find("anonymous", "r")) is None:
                await asyncio.sleep(0.02)
        assert isinstance(taken, Run)
        gate.set()  # both copies go on
        assert taken.task is not None
        await asyncio.wait_for(asyncio.shield(taken.task), 10)
        relay.frozen = False
        await asyncio.wait_for(a.__aexit__(None, None, None), 20)
        copy = first.log.entries(first.log.first_seq - 1)
        assert first.log.closed and b"RUN_FINISHED" not in copy[-1][1]
        assert taken.ids is not None and taken.ids.epoch == 1
        kinds = [json.loads(d)["type"] for _, d in taken.log.entries(taken.log.first_seq - 1)]
        assert kinds[-1] == "RUN_FINISHED"
        stored = await b.store.list_messages("t")
        assert [m["content"] for m in stored] == ["go", "first", "second"]


async def test_a_peer_s_sweep_leaves_a_lost_replica_s_parked_runs_and_forgets_the_replica(
    tmp_path: Path,
) -> None:
    """A is cut off from Redis with a durable run parked on a frontend tool, while B
    produces a durable run of its own. B's sweep continues only a lost replica's producing
    runs: the parked one waits for its result wherever that arrives, B's own run stays as it
    is, and A, with nothing left to take over, is forgotten (no longer looked at)."""
    gate = asyncio.Event()

    async def parks_or_streams(ctx: Any) -> AsyncIterator[str]:
        if ctx.messages[0]["content"] == "park":
            yield f"got {(await ctx.call_tool('pick', {})).content}"
            return
        yield "first"
        await gate.wait()
        yield "second"

    def body(run_id: str, text: str) -> dict[str, Any]:
        return {"threadId": f"t-{run_id}", "runId": run_id, "forwardedProps": {
            "agentId": "ps"}, "messages": [{"id": f"u-{run_id}", "role": "user",
                                            "content": text}],
                "tools": [{"name": "pick", "description": "Pick",
                           "parameters": {"type": "object"}}]}

    agent = FunctionAgent(parks_or_streams, id="ps", durable=True)
    async with a_behind_a_relay(tmp_path, "forget", agent) as (a, b, relay):
        await _frontend_call(await a.start_run(ANONYMOUS, body("r1", "park")))
        await parked(a, "anonymous", "r1")
        own = await b.start_run(ANONYMOUS, body("r2", "stream"))
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while b"first" not in b"".join(d for _, d in own.log.entries()):
                await asyncio.sleep(0.01)
        replica = a.cluster.replica_id
        assert replica in await b.cluster.peers()
        relay.freeze()  # A goes silent: its heartbeat stops
        async with asyncio.timeout(20):
            while replica in await b.cluster.peers() or replica in (
                    await b.cluster.lost_replicas()):
                await asyncio.sleep(0.02)
        assert b.runtime.find("anonymous", "r1") is None
        kept = await b.store.load_checkpoint("anonymous", "r1")
        assert kept is not None and (kept.phase, kept.epoch, kept.holder) == (
            "parked", 0, replica)
        assert b.runtime.find("anonymous", "r2") is own and not own.log.closed
        mine = await b.store.load_checkpoint("anonymous", "r2")
        assert mine is not None and mine.epoch == 0
        gate.set()
        assert own.task is not None
        await asyncio.wait_for(asyncio.shield(own.task), 10)


@pytest.mark.parametrize("how", ["silent", "drained", "found"])
async def test_a_result_for_a_durable_run_its_replica_no_longer_holds_is_taken_by_a_peer(
    tmp_path: Path, how: str
) -> None:
    """A durable run parked on A waits for its frontend result when A is cut off from Redis
    (its store still reachable), or drains and lets it go. The result posted to B is not
    lost with A: B finds the owner does not answer, or no longer holds the run, while the
    store holds it; B continues it here with the result (or already did, when a client
    looked for the run on B once A was lost), and the run finishes on B. A cancel of the
    run, ended there, is answered False."""

    async with a_behind_a_relay(tmp_path, "silent", _durable_asks()) as (a, b, relay):
        _, call = await _parked_on(a)
        remote = await b.find_run(ANONYMOUS, "r")
        assert isinstance(remote, RemoteRun)
        if how == "drained":
            await a.shutdown()  # A lets the run go at its point, and answers: not here
        else:
            relay.freeze()  # A goes silent: it can neither answer nor be told
        async with asyncio.timeout(20):
            if how == "found":  # a client looks for the run (to resume it) on B first
                while not await b.cluster.lost(remote):
                    await asyncio.sleep(0.02)
                assert isinstance(await b.find_run(ANONYMOUS, "r"), Run)
            await b.submit_tool_result(ANONYMOUS, "r", call, {"content": "blue"})
        continued = b.get_run(ANONYMOUS, "r")
        assert continued.ids is not None and continued.ids.epoch == 1
        assert continued.task is not None
        await asyncio.wait_for(asyncio.shield(continued.task), 10)
        stored = await b.store.list_messages("t")
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[-1]["content"] == "got blue"
        assert await b.cancel_run(ANONYMOUS, "r") is False


async def test_a_result_for_a_durable_run_of_another_replica_is_stored_before_it_is_sent(
    tmp_path: Path,
) -> None:
    """B stores a posted result of A's durable run before forwarding it (the process that
    continues the run if A is lost finds it): a second post is refused from the store, and a
    caller acting for another resource is told the run is missing, as on A."""
    gate = asyncio.Event()
    seen: list[tuple[str, bool]] = []

    async def asks(ctx: Any) -> AsyncIterator[str]:
        result = await ctx.call_tool("pick", {})
        seen.append((result.content, result.is_error))
        await gate.wait()
        yield "got it"

    alice = Principal(id="acme", resource_ids=frozenset({"alice"}), default_resource="alice")
    bob = Principal(id="acme", resource_ids=frozenset({"bob"}), default_resource="bob")
    database = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    await upgrade(database)
    with redis_server(tmp_path) as url:
        settings = Settings(database_url=database, redis_url=url, redis_prefix="stored")
        agents = [FunctionAgent(asks, id="asks", durable=True)]
        async with Backend(settings, agents=agents) as a, Backend(settings) as b:
            body = ASKS_RUN
            run = await a.start_run(alice, body)
            assert run.durable
            call = await _frontend_call(run)
            with pytest.raises(NotFoundError) as foreign:
                await b.submit_tool_result(bob, "r", call, {"content": "bob's"})
            assert foreign.value.code == "RUN_NOT_FOUND"
            await b.submit_tool_result(alice, "r", call, {"content": "blue", "isError": True})
            while not seen:
                await asyncio.sleep(0.01)
            assert seen == [("blue", True)]
            checkpoint = await b.store.load_checkpoint("acme", "r")
            assert checkpoint is not None and checkpoint.results == {call: ("blue", True)}
            with pytest.raises(ConflictError) as twice:
                await b.submit_tool_result(alice, "r", call, {"content": "red"})
            assert twice.value.code == "TOOL_RESULT_ALREADY_SUBMITTED"
            assert twice.value.message == "this tool call already has a result"
            gate.set()
            await asyncio.wait_for(asyncio.shield(run.task), 10)
            assert json.loads(run.log.entries()[-1][1])["type"] == "RUN_FINISHED"
            assert seen == [("blue", True)]


async def test_a_result_for_another_resource_s_run_on_another_replica_is_refused_as_missing(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def asks(ctx: Any) -> AsyncIterator[str]:
        seen.append((await ctx.call_tool("pick", {})).content)
        yield "got it"

    alice = Principal(id="acme", resource_ids=frozenset({"alice"}), default_resource="alice")
    bob = Principal(id="acme", resource_ids=frozenset({"bob"}), default_resource="bob")
    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="foreign")
        agents = [FunctionAgent(asks, id="asks")]
        async with Backend(settings, agents=agents) as a, Backend(settings) as b:
            body = ASKS_RUN
            run = await a.start_run(alice, body)
            assert not run.durable
            call = await _frontend_call(run)
            with pytest.raises(NotFoundError) as foreign:
                await b.submit_tool_result(bob, "r", call, {"content": "bob's"})
            assert foreign.value.code == "RUN_NOT_FOUND"
            with pytest.raises(NotFoundError) as foreign:
                await b.cancel_run(bob, "r")
            assert foreign.value.code == "RUN_NOT_FOUND"
            followed = await b.find_run(alice, "r")
            assert isinstance(followed, RemoteRun)
            await b.submit_tool_result(alice, "r", call, {"content": "alice's"})
            sink = CollectingSink()
            async with asyncio.timeout(10):  # a hang guard
                await b.follow(followed, sink)
            assert sink.ending == "end" and sink.events == run.log.entries()
            assert seen == ["alice's"]
            # The ended run's last event is a cursor to resume from; one beyond it is not.
            last = run.log.last_seq
            ended, cursor = await b.resume(alice, "r", str(last))
            assert isinstance(ended, RemoteRun) and ended.ended and cursor.seq == last
            with pytest.raises(InputError) as beyond:
                await b.resume(alice, "r", str(last + 1))
            assert beyond.value.code == "INVALID_CURSOR"


class _QuietSink(CollectingSink):
    """A ``CollectingSink`` whose connection breaks when it is first kept alive."""

    async def keep_alive(self) -> None:
        await super().keep_alive()
        raise ConnectionResetError("the client went away")


@pytest.mark.parametrize(("server_grace", "follower_grace"), [(0, 3600), (3600, 0)])
async def test_a_follower_on_another_replica_is_kept_alive_and_leaves_with_its_own_grace(
    tmp_path: Path, server_grace: float, follower_grace: float
) -> None:
    """B's follower of A's waiting run gets keep-alives while nothing happens; when it
    leaves (its connection broke), the run waits out the grace that follower asked for,
    not the server's: with an hour the result posted after it left still reaches the run,
    with none the run is cancelled."""
    seen: list[str] = []

    async def asks(ctx: Any) -> AsyncIterator[str]:
        seen.append((await ctx.call_tool("pick", {})).content)
        yield "got it"

    with redis_server(tmp_path) as url:
        settings = Settings(database_url="memory://", redis_url=url, redis_prefix="grace",
                            detach_grace_seconds=server_grace)
        async with Backend(settings, agents=[FunctionAgent(asks, id="asks")]) as a, \
                Backend(settings) as b:
            body = ASKS_RUN
            run = await a.start_run(ANONYMOUS, body)
            call = await _frontend_call(run)
            remote = await b.find_run(ANONYMOUS, "r")
            assert isinstance(remote, RemoteRun)
            sink = _QuietSink()
            with pytest.raises(ConnectionResetError):
                async with asyncio.timeout(10):  # a hang guard
                    await b.follow(remote, sink, idle=0.05, detach_grace=follower_grace)
            assert sink.keep_alives == 1
            assert [n for n, _ in sink.events] == [n for n, _ in run.log.entries()]
            if follower_grace:
                await b.submit_tool_result(ANONYMOUS, "r", call, {"content": "blue"})
            await asyncio.wait_for(asyncio.shield(run.task), 10)
            end = json.loads(run.log.entries()[-1][1])
            if follower_grace:
                assert seen == ["blue"] and end["type"] == "RUN_FINISHED"
            else:
                assert seen == [] and end["outcome"] == {"type": "cancelled"}
