"""``RedisCluster`` on its own over a real Redis: what a replica sends, what a follower asks
and reads when the log is quiet, and how a queued run waits for its thread, with the other
side played by plain Redis commands (a replica that never answers, a record written by hand)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from tests.cluster.replicas import redis_server

from iobridge.cluster import redis as cluster_redis
from iobridge.cluster.redis import RUN_LOST, RedisCluster
from iobridge.config import Settings
from iobridge.errors import EventsNotRetained, ServiceUnavailable
from iobridge.runtime.cluster import QueuedClaim, RemoteRun
from iobridge.runtime.replica_messages import (
    Answer,
    CancelRun,
    MirrorLog,
    Request,
    RunCommand,
    StopRun,
    decode_request,
)

#: A replica that is only a name: its heartbeat and command channel are played by the test.
GHOST = "ghost"


class Seam:
    """Two opened replicas on one key prefix, each handler recording its commands, and a
    plain client on the same Redis."""

    def __init__(self, url: str) -> None:
        self.settings = Settings(database_url="memory://", redis_url=url,
                                 redis_prefix=f"s{uuid.uuid4().hex[:8]}",
                                 heartbeat_seconds=0.2, owner_lost_seconds=1.0)
        self.a, self.b = RedisCluster(self.settings), RedisCluster(self.settings)
        self.got: dict[str, list[RunCommand]] = {"a": [], "b": []}
        self.redis: Any = aioredis.from_url(url)

    def handler(self, name: str) -> Callable[[RunCommand], Answer]:
        def handle(command: RunCommand) -> Answer:
            self.got[name].append(command)
            return Answer(value=True)

        return handle

    async def ghost_beats(self) -> None:
        await self.redis.set(self.a._heartbeat_key(GHOST), "1", px=10_000)

    async def ghost_channel(self) -> Any:
        listener = self.redis.pubsub(ignore_subscribe_messages=True)
        await listener.subscribe(self.a._channel(GHOST))
        return listener

    async def record(self, run_id: str, *, replica: str = GHOST, end: int | None = None,
                     events: int = 0, epoch: int | None = None) -> RemoteRun:
        """A run record of ``replica`` with ``events`` events in its shared log."""
        fields = {"replica": replica, "thread": "t", "first": 1, "last": events,
                  "resource": "", "epoch": "" if epoch is None else epoch}
        if end is not None:
            fields["end"] = end
        await self.redis.hset(self.a._key("run", "o", run_id), mapping=fields)
        for seq in range(1, events + 1):
            await self.append(run_id, seq, epoch=epoch)
        return RemoteRun(run_id=run_id, thread_id="t", owner="o", replica=replica, first_seq=1,
                         last_seq=events, ended=end is not None, resource_id="", epoch=epoch)

    async def append(self, run_id: str, seq: int, *, final: bool = False,
                     epoch: int | None = None) -> None:
        fields = {"d": b"event %d" % seq, **({"e": "1"} if final else {})}
        await self.redis.xadd(self.a._log_key("o", run_id, epoch), fields, id=f"{seq}-0")


@pytest.fixture
async def seam(redis_url: str) -> AsyncIterator[Seam]:
    seam = Seam(redis_url)
    await seam.a.open(seam.handler("a"))
    await seam.b.open(seam.handler("b"))
    try:
        yield seam
    finally:
        await seam.a.aclose()
        await seam.b.aclose()
        await seam.redis.aclose()


async def _received(listener: Any) -> Request:
    """The next request published on ``listener``'s channel."""
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        while True:
            message = await listener.get_message(timeout=1.0)
            if message is not None:
                return decode_request(message["data"])


async def test_commands_sent_to_a_replica_reach_its_handler_whole_and_in_order(
    seam: Seam,
) -> None:
    """Commands sent without waiting for an answer; a log-sharing request for a run the
    replica does not have is not the handler's, and the commands after it still arrive."""
    stop = StopRun(owner="o", run="r", rollback=True, resources=["res"])
    cancel = CancelRun(owner="o", run="r2")
    for command in (stop, MirrorLog(owner="o", run="not here"), cancel):
        await seam.b.send(seam.a.replica_id, command)
    async with asyncio.timeout(10):
        while len(seam.got["a"]) < 2:
            await asyncio.sleep(0.01)
    assert seam.got == {"a": [stop, cancel], "b": []}


async def test_a_command_sent_to_a_replica_nobody_listens_for_is_refused(seam: Seam) -> None:
    with pytest.raises(ServiceUnavailable) as refused:
        await seam.b.send("gone", CancelRun(owner="o", run="r"))
    assert (refused.value.code, refused.value.message, refused.value.retry_after) == (
        "RUN_OWNER_UNAVAILABLE", "the replica running this run does not answer", 1.0)


async def test_a_command_for_a_run_whose_replica_never_answers_times_out(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_redis, "FORWARD_TIMEOUT", 0.3)
    listener = await seam.ghost_channel()
    await seam.record("r")
    with pytest.raises(ServiceUnavailable) as refused:
        await seam.b.ask(CancelRun(owner="o", run="r"))
    assert (refused.value.code, refused.value.message, refused.value.retry_after) == (
        "RUN_OWNER_UNAVAILABLE", "the replica running this run did not answer in time", 1.0)
    asked = await _received(listener)
    assert (asked.command, asked.sender) == (CancelRun(owner="o", run="r"), seam.b.replica_id)
    assert seam.b._waiting == {}  # nothing left waiting for an answer that never comes
    await listener.aclose()


async def test_malformed_messages_on_a_replica_s_channels_are_ignored_with_a_warning(
    seam: Seam, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="iobridge.cluster")
    await seam.redis.publish(seam.a._channel(seam.a.replica_id), b'{"command": {"op": "x"}}')
    await seam.redis.publish(seam.a._reply_channel(seam.a.replica_id), b"not json")
    stop = StopRun(owner="o", run="after")
    await seam.b.send(seam.a.replica_id, stop)  # the channel still serves
    async with asyncio.timeout(10):
        while not seam.got["a"]:
            await asyncio.sleep(0.01)
    assert seam.got["a"] == [stop]
    assert [r.getMessage() for r in caplog.records if r.name == "iobridge.cluster"] == [
        "ignored a malformed cluster command", "ignored a malformed cluster answer"]


async def test_a_follower_asks_a_live_owner_for_its_log_until_it_has_read_from_it(
    seam: Seam,
) -> None:
    """The attach may have been lost: while nothing came, each quiet read asks the owner to
    share its log; once events came, it does not ask again."""
    await seam.ghost_beats()
    listener = await seam.ghost_channel()
    run = await seam.record("r")
    follow = seam.b.follow(run, 0, idle=0.2)
    assert await anext(follow) == []  # quiet for `idle`: the owner lives
    await seam.b.send(GHOST, CancelRun(owner="o", run="mark 1"))  # after the ask, in order
    assert [(await _received(listener)).command for _ in range(2)] == [
        MirrorLog(owner="o", run="r"), CancelRun(owner="o", run="mark 1")]
    await seam.append("r", 1)
    assert await anext(follow) == [(1, b"event 1")]
    assert await anext(follow) == []
    await seam.b.send(GHOST, CancelRun(owner="o", run="mark 2"))
    assert (await _received(listener)).command == CancelRun(owner="o", run="mark 2")
    await seam.append("r", 2, final=True)
    assert await anext(follow) == [(2, b"event 2")]
    with pytest.raises(StopAsyncIteration):
        await anext(follow)
    await listener.aclose()


@pytest.mark.parametrize("end", [2, 3])
async def test_a_follower_past_the_recorded_end_gets_run_lost_at_its_cursor(
    seam: Seam, end: int
) -> None:
    """The owner ended the run before the events this client saw on it reached the shared
    log: the log ends at or before the cursor, and the client still gets its end."""
    await seam.ghost_beats()
    run = await seam.record("r", end=end, events=end)
    async with asyncio.timeout(10):  # a follower that missed its end would wait forever
        assert [batch async for batch in seam.b.follow(run, 3, idle=None)] == [[(4, RUN_LOST)]]


async def test_a_follower_before_the_recorded_end_waits_for_the_rest(seam: Seam) -> None:
    await seam.ghost_beats()
    run = await seam.record("r", end=4, events=2)
    follow = seam.b.follow(run, 2, idle=0.2)
    assert await anext(follow) == []  # the end is recorded, its events not shared yet
    await seam.append("r", 3)
    await seam.append("r", 4, final=True)
    async with asyncio.timeout(10):
        assert [e async for batch in follow for e in batch] == [(3, b"event 3"), (4, b"event 4")]


async def test_a_durable_follow_goes_on_while_the_owner_lives_and_ends_bare_when_it_dies(
    seam: Seam,
) -> None:
    """A lost owner's durable run is continued elsewhere: its follower ends without a
    terminal event (and RUN_LOST is never written); while the owner beats, it waits."""
    await seam.ghost_beats()
    run = await seam.record("r", events=1, epoch=2)
    follow = seam.b.follow(run, 0, idle=0.2, durable=True)
    assert await anext(follow) == [(1, b"event 1")]  # from the epoch's own log
    assert await anext(follow) == []
    assert await anext(follow) == []
    await seam.redis.delete(seam.a._heartbeat_key(GHOST))
    assert [batch async for batch in follow] == []
    assert await seam.redis.xlen(seam.a._log_key("o", "r", 2)) == 1
    assert await seam.redis.hget(seam.a._key("run", "o", "r"), "end") is None


async def test_a_follow_of_a_lost_owner_s_run_ends_with_run_lost(seam: Seam) -> None:
    """Not durable (the default): nobody continues it, so the follower writes its end."""
    run = await seam.record("r", events=1)
    async with asyncio.timeout(10):
        assert [batch async for batch in seam.b.follow(run, 1, idle=None)] == [[(2, RUN_LOST)]]
    assert await seam.redis.hget(seam.a._key("run", "o", "r"), "end") == b"2"


async def test_a_run_no_longer_in_the_thread_s_queue_is_refused_to_retry(seam: Seam) -> None:
    """Its replica was taken for lost and the queue dropped it: the run cannot wait on."""
    gone = QueuedClaim(owner="o", run_id="r", resource_id="res", thread_id="t",
                       token=seam.a.replica_id.encode() + b":99")
    with pytest.raises(ServiceUnavailable) as refused:
        await seam.a.wait_claim(gone)
    assert (refused.value.code, refused.value.message, refused.value.retry_after) == (
        "CLUSTER_UNAVAILABLE", "the run lost its place in the thread's queue", 1.0)


async def _queued_behind_another(seam: Seam, *, epoch: int | None = None) -> QueuedClaim:
    """Run ``r`` queued on ``a`` for thread t, which run ``h`` holds."""
    assert await seam.a.claim("o", "h", "res", "t") is None
    place = await seam.a.claim("o", "r", "res", "t", strategy="enqueue", epoch=epoch)
    assert place is not None
    return place


async def test_a_queued_run_takes_a_thread_whose_lock_went_without_notice(seam: Seam) -> None:
    """No replica said the thread was freed (its lock expired, or the message was lost):
    the queued run still takes it, on its next heartbeat's try."""
    place = await _queued_behind_another(seam)
    waiting = asyncio.create_task(seam.a.wait_claim(place))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    lock = seam.a._key("thread", "res", "t")
    await seam.redis.delete(lock)  # no PUBLISH on the freed channel
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        await waiting
    assert await seam.redis.get(lock) == place.token


@pytest.mark.parametrize("epoch", [None, 3])
async def test_a_run_that_waited_for_its_thread_is_found_as_its_holder(
    seam: Seam, epoch: int | None
) -> None:
    """Once it holds the thread, other replicas find it (a durable run continued here with
    its takeover epoch: its events' ids), and a newer run would stop it, not the old holder."""
    place = await _queued_behind_another(seam, epoch=epoch)
    waiting = asyncio.create_task(seam.a.wait_claim(place))
    lock = seam.a._key("thread", "res", "t")
    await seam.redis.delete(lock)
    await seam.redis.publish(seam.a._freed_channel, lock)
    async with asyncio.timeout(10):
        await waiting
    found = await seam.b.find("o", "r")
    assert found is not None
    assert (found.replica, found.epoch, found.resource_id) == (seam.a.replica_id, epoch, "res")
    assert await seam.redis.get(seam.a._key("holder", "res", "t")) == b'["o","r"]'


async def test_a_queued_run_cancelled_leaves_nothing_behind_and_frees_its_place(
    seam: Seam,
) -> None:
    """Its place, its runId and its record go; the thread's other waiters are told (the
    run behind it may be first now); this replica keeps nothing of it."""
    place = await _queued_behind_another(seam)
    listener = seam.redis.pubsub(ignore_subscribe_messages=True)
    await listener.subscribe(seam.a._freed_channel)
    waiting = asyncio.create_task(seam.a.wait_claim(place))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    keys = seam.a._claim_keys("o", "r", "res", "t")
    assert await seam.redis.zcard(keys[4]) == 0
    assert await seam.redis.exists(keys[0], keys[2]) == 0
    async with asyncio.timeout(10):
        while (told := await listener.get_message(timeout=1.0)) is None:
            pass
    assert told["data"] == keys[1]
    assert seam.a._queued == {}
    assert ("o", "r") not in seam.a._claims and ("o", "h") in seam.a._claims
    await listener.aclose()


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
async def test_a_run_queued_to_interrupt_stops_the_holder_on_its_own_replica_only(
    seam: Seam, strategy: Any
) -> None:
    assert await seam.a.claim("o", "h", "res", "t") is None
    assert await seam.b.claim("o", "r", "res", "t", strategy=strategy) is not None
    async with asyncio.timeout(10):
        while not seam.got["a"]:
            await asyncio.sleep(0.01)
        await asyncio.gather(*(t for t in seam.b._tasks if t.get_name() == "stop-r"))
    assert seam.got == {"a": [StopRun(owner="o", run="h", rollback=strategy == "rollback")],
                        "b": []}


async def test_which_replicas_live_and_which_were_lost(seam: Seam) -> None:
    await seam.redis.sadd(seam.a._replicas_key, GHOST)  # joined, never left, no heartbeat
    assert (await seam.b.alive(seam.a.replica_id), await seam.b.alive(GHOST)) == (True, False)
    assert await seam.b.peers() == [seam.a.replica_id]
    assert await seam.b.lost_replicas() == [GHOST]


async def test_a_record_of_an_older_replica_has_no_resource(seam: Seam) -> None:
    """Found with the empty resource (seen by unrestricted callers only), its thread and
    sequence numbers as recorded."""
    await seam.redis.hset(seam.a._key("run", "o", "r"), mapping={
        "replica": GHOST, "thread": "t", "first": 3, "last": 7})
    assert await seam.b.find("o", "r") == RemoteRun(
        run_id="r", thread_id="t", owner="o", replica=GHOST, first_seq=3, last_seq=7,
        ended=False, resource_id="", epoch=None)


async def test_an_idle_follower_is_told_of_every_idle_stretch_of_quiet(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``idle`` twice the heartbeat, every second quiet read (one heartbeat each) ends
    an idle stretch, counted afresh after each tick and after each batch."""
    await seam.ghost_beats()
    run = await seam.record("r")
    reads = 0
    quiet = seam.b._quiet

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await quiet(*args, **kwargs)

    monkeypatch.setattr(seam.b, "_quiet", counted)
    follow = seam.b.follow(run, 0, idle=0.4)
    ticks = []
    async with asyncio.timeout(10):  # a follower that never ticks would wait forever
        for _ in range(2):
            assert await anext(follow) == []
            ticks.append(reads)
        await seam.append("r", 1)
        assert await anext(follow) == [(1, b"event 1")]
        assert await anext(follow) == []
        ticks.append(reads)
    assert ticks == [2, 4, 6]


async def test_a_follower_reads_a_long_log_a_bounded_batch_at_a_time(seam: Seam) -> None:
    events = cluster_redis.FOLLOW_COUNT + 10
    run = await seam.record("r", events=events - 1)
    await seam.append("r", events, final=True)
    async with asyncio.timeout(10):
        sizes = [len(batch) async for batch in seam.b.follow(run, 0, idle=None)]
    assert sizes == [cluster_redis.FOLLOW_COUNT, 10]


async def test_a_follower_behind_the_retained_log_is_told_where_it_starts(seam: Seam) -> None:
    """Events 1 to 3 were trimmed: a cursor at 2 misses event 3 and cannot go on."""
    run = await seam.record("r")
    await seam.append("r", 4)
    with pytest.raises(EventsNotRetained) as gone:
        await anext(seam.b.follow(run, 2, idle=None))
    assert gone.value.first_retained == 4
    assert await anext(seam.b.follow(run, 3, idle=None)) == [(4, b"event 4")]


@pytest.mark.parametrize("holder", [None, "another"])
async def test_a_follow_ends_bare_once_the_run_was_dropped_or_moved(
    seam: Seam, holder: str | None
) -> None:
    """Dropped (or expired), or another replica holds the run now: the follower ends
    without an end event (its client looks the run up again)."""
    run = await seam.record("r", events=1)
    if holder is None:
        await seam.redis.delete(seam.a._key("run", "o", "r"))
    else:
        await seam.redis.hset(seam.a._key("run", "o", "r"), "replica", holder)
    async with asyncio.timeout(10):
        assert [batch async for batch in seam.b.follow(run, 1, idle=None)] == []
    assert await seam.redis.xlen(seam.a._log_key("o", "r", None)) == 1


async def test_with_redis_gone_a_queued_run_waits_on_and_leaves_and_releases_are_let_expire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stops while a run holds a thread and another waits for it: the waiting run
    keeps trying (each try logged), and when it is cancelled and the holder let go, neither
    raises: what they would have removed expires by itself (said once each)."""
    caplog.set_level(logging.WARNING, logger="iobridge.cluster")
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server(tmp_path))
        cluster = RedisCluster(Settings(database_url="memory://", redis_url=url,
                                        redis_prefix="gone", heartbeat_seconds=0.2,
                                        owner_lost_seconds=1.0))
        await cluster.open(lambda command: Answer(value=True))
        try:
            assert await cluster.claim("o", "h", "res", "t") is None
            place = await cluster.claim("o", "r", "res", "t", strategy="enqueue")
            assert place is not None
            waiting = asyncio.create_task(cluster.wait_claim(place))
            await asyncio.sleep(0.05)
            stack.close()  # Redis stops
            async with asyncio.timeout(10):
                while sum("queued run r" in r.getMessage() for r in caplog.records) < 2:
                    await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await cluster.abandon("o", "h", "res", "t")
        finally:
            await cluster.aclose()
    said = [r.getMessage() for r in caplog.records if r.name == "iobridge.cluster"]
    assert said.count("queued run r: Redis does not answer") >= 2
    assert said.count("a queued run could not leave its queue; it expires by itself") == 1
    assert said.count("could not release a run's locks; they expire by themselves") == 1
