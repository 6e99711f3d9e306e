"""Replicas as one backend, coordinated through Redis (``redis_url``).

What lives where (``P`` is ``redis_prefix``; owner and resource ids are length-prefixed so
no two (owner, runId) pairs share a key):

* ``P:run:<owner>:<runId>`` (hash): the run record — owning replica, thread, the claim token,
  first retained / last mirrored sequence number, mirrored bytes, and ``end`` once the
  terminal event is mirrored. A replica that does not own a run finds it here; another
  principal's lookup names another key, so a foreign run answers exactly like a missing one.
* ``P:log:<owner>:<runId>`` (stream): the run's encoded events, entry id ``<seq>-0`` and
  field ``d`` (the bytes SSE and N-PAMP carry), ``e`` on the terminal entry. The owner
  mirrors a run's log only once another replica follows it (the follower's ``attach``, or
  a ``mirror`` request when its follower finds nothing), from the first event it retains,
  and the logs of all the runs it retains when it stops: a run nobody follows elsewhere
  costs Redis its claim and release, nothing per event. Each batch is one script call
  (all its events in one argument; entries already there skipped, trimmed to
  ``max_run_log_bytes``); records and logs expire ``retention_seconds`` (plus the lost
  bound) after their last write, and are deleted when the owner stops retaining the run.
* ``P:live:<owner>:<runId>`` and ``P:thread:<resource>:<threadId>``: the runId claim and the
  thread lock, ``SET NX PX owner_lost_seconds`` in one script, renewed by the owner's
  heartbeat, released by compare-and-delete once the run's messages are stored.
* ``P:hb:<replica>``: the heartbeat. A follower that sees it expire appends ``RUN_ERROR``
  ``RUN_LOST`` — atomically, only if the log has no terminal event yet — unless durable runs
  are on: then it continues the run (``Backend.follow``).
* ``P:replicas`` (set): the replicas that joined and have not left; one whose heartbeat
  expired is lost, and its durable runs are continued by the others (``Backend``'s sweep).
* ``P:cmd:<replica>`` and ``P:answer:<replica>`` (pub/sub): commands for a run's owner (tool
  result, cancel, follower attach/detach, mirror, take over) and the answers to the replica
  that asked, as :mod:`iobridge.runtime.replica_messages` encodes them.
* ``P:alias:<owner>:<hex>``: a transport's own name for a run (an N-PAMP stream id) → its
  runId, so a client may resume on any replica; expires with the run record.

Claims, mirror batches and releases of all runs ready at once go to Redis in one pipeline
(one round trip, one connection), so the cost per run stays a few script calls (their
arguments as bytes: redis-py packs those as they are). What someone
waits on never queues behind a big mirror batch: a tool result or cancel for another replica
is one script call of its own (find the run's replica and publish to it), lookups go straight
to Redis, and answers and followers' notices have a pipeline of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from itertools import count
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from iobridge.config import Settings
from iobridge.errors import ConflictError, EventsNotRetained, ServiceUnavailable
from iobridge.protocol.events import encode_event, run_error
from iobridge.protocol.options import MultitaskStrategy
from iobridge.runtime.admission import queue_full, thread_busy
from iobridge.runtime.cluster import CommandHandler, QueuedClaim, RemoteRun
from iobridge.runtime.replica_messages import (
    Answer,
    AttachFollower,
    MalformedMessage,
    MirrorLog,
    Reply,
    Request,
    RunCommand,
    StopRun,
    decode_reply,
    decode_request,
    encode,
)
from iobridge.runtime.run import Run, RunKey
from iobridge.runtime.runlog import DEFAULT_BATCH_BYTES
from iobridge.runtime.tasks import cancel_and_wait

__all__ = ["RedisCluster"]

logger = logging.getLogger("iobridge.cluster")

#: Connections to Redis at most (each follower of a remote run holds one while it waits).
MAX_CONNECTIONS = 1024
#: Seconds a forwarded command waits for its owner's answer.
FORWARD_TIMEOUT = 5.0
#: Entries one follower read returns at most.
FOLLOW_COUNT = 512
#: Seconds the readiness check and the claim release wait for Redis.
REDIS_TIMEOUT = 2.0
#: Seconds a mirror batch waits for the events the run appends right after its first.
MIRROR_DELAY = 0.005
RUN_LOST = encode_event(run_error("The replica running this run stopped.", "RUN_LOST"))

#: Drops the queue's first entries while their replica's heartbeat is gone; the first left.
_QUEUE_HEAD = """
local function head(queue, beats)
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then return nil end
    if redis.call('EXISTS', beats .. string.match(first, '^[^:]+')) == 1 then return first end
    redis.call('ZREM', queue, first)
  end
end
"""
#: Takes the thread lock (KEYS[2]) and starts the run record (KEYS[3], KEYS[4]); the holder
#: key (KEYS[6]) names the run for a newer one that stops it.
_TAKE_LOCK = """
local function take()
  if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[6], ARGV[6], 'PX', ARGV[5])
  redis.call('DEL', KEYS[3], KEYS[4])
  redis.call('HSET', KEYS[3], 'replica', ARGV[3], 'thread', ARGV[4], 'token', ARGV[1],
             'first', 1, 'last', 0, 'bytes', 0, 'resource', ARGV[10], 'epoch', ARGV[11] or '')
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  return true
end
"""
#: KEYS live, thread, rec, log, queue, holder, queue counter; ARGV token, lock px, replica,
#: threadId, ttl, holder, mode (reject | enqueue | front), queue bound, heartbeat prefix,
#: resourceId (kept in the record: whose run it is, for callers on other replicas), the
#: takeover epoch of a continued run (its events' ids).
#: {0}: claimed; {1}: runId live; {2}: busy; {3}: queue full; {4, holder}: queued.
_CLAIM = _QUEUE_HEAD + _TAKE_LOCK + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
if head(KEYS[5], ARGV[9]) == nil and take() then return {0} end
if ARGV[7] == 'reject' then return {2} end
if redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[8]) then return {3} end
local order = redis.call('INCR', KEYS[7])
if ARGV[7] == 'front' then order = order - 1000000000000 end
redis.call('ZADD', KEYS[5], order, ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
-- The record tells other replicas where the queued run is (to cancel it there).
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('HSET', KEYS[3], 'replica', ARGV[3], 'thread', ARGV[4], 'token', ARGV[1],
           'first', 1, 'last', 0, 'bytes', 0, 'resource', ARGV[10])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return {4, redis.call('GET', KEYS[6])}
"""
#: The same keys and arguments: a queued run takes the thread once it is first and free.
#: 0: claimed; 1: not yet; 2: no longer queued (its replica was taken for lost).
_TURN = _QUEUE_HEAD + _TAKE_LOCK + """
if not redis.call('ZSCORE', KEYS[5], ARGV[1]) then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if head(KEYS[5], ARGV[9]) ~= ARGV[1] or not take() then return 1 end
redis.call('ZREM', KEYS[5], ARGV[1])
return 0
"""
#: KEYS live, queue, rec; ARGV token, the freed channel, the thread lock's name. A queued
#: run leaves (its record with it): the next one may be first now.
_LEAVE = """
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('HGET', KEYS[3], 'token') == ARGV[1] then redis.call('DEL', KEYS[3]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 0
"""
#: KEYS live, thread[, rec, log]; ARGV token, the freed channel. Frees the claim (telling
#: runs queued for the thread); with the record, drops the run.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('PUBLISH', ARGV[2], KEYS[2])
end
if #KEYS == 4 and redis.call('HGET', KEYS[3], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[3], KEYS[4])
end
return 0
"""
_FORGET = """
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
"""
#: KEYS rec, log; ARGV token, ttl, max bytes, final, the batch's first sequence number,
#: its events' lengths (space-separated) and their octets joined: one argument for all the
#: events, so the client packs seven arguments a batch, not two an event.
_APPEND = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return -1 end
if redis.call('HEXISTS', KEYS[1], 'end') == 1 then return -1 end
local last = tonumber(redis.call('HGET', KEYS[1], 'last'))
local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes'))
local first = tonumber(redis.call('HGET', KEYS[1], 'first'))
local seq = tonumber(ARGV[5]) - 1
if last == 0 and seq >= first then first = seq + 1 end  -- mirrored from a trimmed log on
local sizes = {}
for size in string.gmatch(ARGV[6], '%d+') do sizes[#sizes + 1] = tonumber(size) end
local data, at = ARGV[7], 1
for i = 1, #sizes do
  seq = seq + 1
  local event = string.sub(data, at, at + sizes[i] - 1)
  at = at + sizes[i]
  if seq > last then
    if ARGV[4] == '1' and i == #sizes then
      redis.call('XADD', KEYS[2], seq .. '-0', 'd', event, 'e', '1')
      redis.call('HSET', KEYS[1], 'end', seq)
    else
      redis.call('XADD', KEYS[2], seq .. '-0', 'd', event)
    end
    last = seq
    bytes = bytes + sizes[i]
  end
end
local limit = tonumber(ARGV[3])
while bytes > limit and first < last do
  local old = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
  bytes = bytes - #old[1][2][2]
  redis.call('XDEL', KEYS[2], old[1][1])
  first = first + 1
end
redis.call('HSET', KEYS[1], 'last', last, 'bytes', bytes, 'first', first)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return last
"""
#: What :data:`_SEND` answers when no other replica has the run.
NOT_ELSEWHERE = -1
#: KEYS rec; ARGV this replica, the command channel prefix, the message. Publishes the
#: message to the run's replica: how many got it, or -1 (unknown, or ours).
_SEND = """
local replica = redis.call('HGET', KEYS[1], 'replica')
if not replica or replica == ARGV[1] then return -1 end
return redis.call('PUBLISH', ARGV[2] .. replica, ARGV[3])
"""
#: KEYS rec, log, the owner's heartbeat; ARGV the RUN_LOST event.
_LOST = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'end') == 1 then return 0 end
local seq = tonumber(redis.call('HGET', KEYS[1], 'last')) + 1
redis.call('XADD', KEYS[2], seq .. '-0', 'd', ARGV[1], 'e', '1')
redis.call('HSET', KEYS[1], 'last', seq, 'end', seq)
return seq
"""
#: KEYS the heartbeat, then groups of (live, thread, rec, log); ARGV lock px, record ttl,
#: then one token a group. The heartbeat and the renewals in one round trip.
_BEAT = """
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
for g = 0, (#KEYS - 1) / 4 - 1 do
  local token = ARGV[g + 3]
  for i = 1, 2 do
    local key = KEYS[1 + g * 4 + i]
    if redis.call('GET', key) == token then redis.call('PEXPIRE', key, ARGV[1]) end
  end
  redis.call('PEXPIRE', KEYS[1 + g * 4 + 3], ARGV[2])
  redis.call('PEXPIRE', KEYS[1 + g * 4 + 4], ARGV[2])
end
return 0
"""


class _Outbox:
    """Calls waiting for the next pipeline on one connection: each adds itself to the
    pipeline and gets its own result; one pipeline is in flight at a time, so what every run
    asks for at once costs one round trip, not one each.

    Scripts go in by sha (``EVALSHA``), loaded once: redis-py's own script objects would
    check them with ``SCRIPT EXISTS`` before every pipeline, a second round trip each time.
    If Redis lost them (a restart, ``SCRIPT FLUSH``), ``reload`` loads them again and the
    calls that found none go in the next pipeline."""

    def __init__(self, redis: Any, reload: Callable[[], Awaitable[None]]) -> None:
        self._redis = redis
        self._reload = reload
        self._items: list[tuple[Callable[[Any], Any], asyncio.Future[Any]]] = []
        self._ready = asyncio.Event()

    def send(self, add: Callable[[Any], Any]) -> asyncio.Future[Any]:
        done = asyncio.get_running_loop().create_future()
        self._items.append((add, done))
        self._ready.set()
        return done

    async def flushes(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            items, self._items = self._items, []
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for add, _ in items:
                        add(pipe)
                    results = await pipe.execute(raise_on_error=False)
            except (RedisError, OSError) as exc:
                results = [exc] * len(items)
            if any(isinstance(result, NoScriptError) for result in results):
                try:
                    await self._reload()
                except (RedisError, OSError) as exc:
                    results = [exc if isinstance(r, NoScriptError) else r for r in results]
            again = []
            for item, result in zip(items, results, strict=True):
                done = item[1]
                if done.done():
                    continue
                if isinstance(result, NoScriptError):
                    again.append(item)
                elif isinstance(result, BaseException):
                    done.set_exception(result)
                else:
                    done.set_result(result)
            if again:
                self._items[:0] = again
                self._ready.set()


def _log_failure(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.warning("could not answer a cluster command")


def _part(value: str) -> str:
    return f"{len(value)}.{value}"


class _Shared:
    """A run this replica retains: what its mirror needs, and the mirror once started."""

    __slots__ = ("log", "mirror", "record", "run", "token")

    def __init__(self, run: Run, token: bytes, record: bytes, log: bytes) -> None:
        self.run, self.token, self.record, self.log = run, token, record, log
        self.mirror: asyncio.Task[None] | None = None


class _NotElsewhere(Exception):
    """No other replica has the run (unknown, or this replica's and no longer retained)."""


def _unavailable() -> ServiceUnavailable:
    return ServiceUnavailable(
        "the shared run state (Redis) does not answer", code="CLUSTER_UNAVAILABLE",
        retry_after=1.0,
    )


class RedisCluster:
    """:class:`~iobridge.runtime.cluster.Cluster` over one Redis; see the module docstring."""

    distributed = True

    def __init__(self, settings: Settings) -> None:
        assert settings.redis_url is not None
        self.settings = settings
        #: This process's id in the cluster (fresh per start: a restart owns nothing).
        self.replica_id = uuid.uuid4().hex
        self._prefix = settings.redis_prefix
        self._lock_ms = int(settings.owner_lost_seconds * 1000)
        self._ttl_ms = int((settings.retention_seconds + settings.owner_lost_seconds) * 1000)
        # Script arguments that never change, as the bytes redis-py sends.
        self._lock_arg = b"%d" % self._lock_ms
        self._ttl_arg = b"%d" % self._ttl_ms
        self._log_bytes_arg = b"%d" % settings.max_run_log_bytes
        self._replica_arg = self.replica_id.encode()
        self._channel_arg = f"{self._prefix}:cmd:".encode()
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=MAX_CONNECTIONS, timeout=FORWARD_TIMEOUT
        )
        # Any: redis-py types each call as "result or awaitable" (one API for sync and async).
        self._redis: Any = aioredis.Redis(connection_pool=pool)
        self._claim = self._redis.register_script(_CLAIM)
        self._release = self._redis.register_script(_RELEASE)
        self._forget = self._redis.register_script(_FORGET)
        self._append = self._redis.register_script(_APPEND)
        self._lost = self._redis.register_script(_LOST)
        self._beat_script = self._redis.register_script(_BEAT)
        self._send = self._redis.register_script(_SEND)
        self._turn = self._redis.register_script(_TURN)
        self._leave = self._redis.register_script(_LEAVE)
        self._freed_channel = f"{self._prefix}:freed".encode()
        self._queue_bound_arg = b"%d" % settings.max_queued_runs_per_thread
        self._beats_arg = f"{self._prefix}:hb:".encode()
        #: Runs of this replica queued for a thread, by the thread lock's name: woken when
        #: a replica frees it.
        self._queued: dict[bytes, set[asyncio.Event]] = {}
        self._tokens = count()
        self._requests = count()
        #: Claims from admission to release: key -> (token, live, thread, rec, log keys).
        self._claims: dict[RunKey, tuple[bytes, bytes, bytes, bytes, bytes]] = {}
        #: Each run this replica retains, its claim token and (once another replica follows
        #: it) its mirror, until it is forgotten: as many as the runtime retains.
        self._shared: dict[RunKey, _Shared] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handler: CommandHandler | None = None
        self._pubsub: Any = None
        #: Claims, mirror batches, releases: the bulk of the traffic.
        self._bulk = _Outbox(self._redis, self._load_scripts)
        #: Answers to other replicas and followers' notices: small, never behind the bulk.
        self._control = _Outbox(self._redis, self._load_scripts)
        #: Forwarded commands waiting for their answer, by request id.
        self._waiting: dict[str, asyncio.Future[Answer]] = {}

    # -- keys ---------------------------------------------------------------------------

    def _key(self, kind: str, *parts: str) -> bytes:
        return ":".join((self._prefix, kind, *map(_part, parts))).encode()

    @property
    def _replicas_key(self) -> str:
        """The set of replicas that joined and have not left."""
        return f"{self._prefix}:replicas"

    def _log_key(self, owner: str, run_id: str, epoch: int | None) -> bytes:
        """The run's shared log; a durable run's has its takeover epoch in its name, so a
        follower of a lost holder's log never reads its successor's events as its own."""
        key = self._key("log", owner, run_id)
        return key if epoch is None else b"%b:%d" % (key, epoch)

    def _heartbeat_key(self, replica: str) -> str:
        return f"{self._prefix}:hb:{replica}"

    def _channel(self, replica: str) -> str:
        return f"{self._prefix}:cmd:{replica}"

    def _reply_channel(self, replica: str) -> str:
        return f"{self._prefix}:answer:{replica}"

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self, handler: CommandHandler) -> None:
        """Check Redis, announce this replica, subscribe to its commands."""
        self._handler = handler
        await self._load_scripts()
        await self._beat()
        await self._redis.sadd(self._replicas_key, self.replica_id)
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(
            self._channel(self.replica_id), self._reply_channel(self.replica_id),
            self._freed_channel,
        )
        self._spawn(self._heartbeats(), "iobridge-heartbeat")
        self._spawn(self._commands(), "iobridge-commands")
        self._spawn(self._bulk.flushes(), "iobridge-flush")
        self._spawn(self._control.flushes(), "iobridge-flush-control")

    async def _load_scripts(self) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for script in (self._claim, self._release, self._forget, self._append, self._turn,
                           self._leave):
                pipe.script_load(script.script)
            await pipe.execute()

    async def aclose(self) -> None:
        """Share the logs of the runs retained here (so other replicas can replay them
        after this one left), let the mirrors flush, then stop and leave the cluster."""
        for shared in list(self._shared.values()):
            self._share(shared.run.owner, shared.run.run_id)
        mirrors = [t for t in self._tasks if t.get_name().startswith("mirror-")]  # not the flusher
        if mirrors:
            await asyncio.wait(mirrors, timeout=REDIS_TIMEOUT)
        # Cancelled until they end: a heartbeat cancelled while its command completes may
        # lose the cancellation (``runtime.tasks``) and beat on, and this would wait forever.
        await cancel_and_wait(list(self._tasks))
        try:
            if self._pubsub is not None:
                await self._pubsub.aclose()
            await asyncio.wait_for(
                self._redis.delete(self._heartbeat_key(self.replica_id)), REDIS_TIMEOUT
            )
            await asyncio.wait_for(
                self._redis.srem(self._replicas_key, self.replica_id), REDIS_TIMEOUT
            )
        except (RedisError, OSError, TimeoutError):
            logger.warning("could not leave the cluster cleanly")
        finally:
            await self._redis.aclose()

    async def problem(self) -> str | None:
        try:
            await asyncio.wait_for(self._redis.ping(), REDIS_TIMEOUT)
        except (RedisError, OSError, TimeoutError):
            logger.warning("readiness: Redis does not answer", exc_info=True)
            return "Redis does not answer"
        return None

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _beat(self) -> None:
        claims = list(self._claims.values())
        keys = [self._heartbeat_key(self.replica_id).encode(), *(k for c in claims for k in c[1:])]
        await self._beat_script(keys=keys, args=[self._lock_arg, self._ttl_arg,
                                                 *(claim[0] for claim in claims)])

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                await self._beat()
            except (RedisError, OSError):
                logger.warning("heartbeat: Redis does not answer")

    # -- the coordinator: claims and mirrors ----------------------------------------------

    async def claim(
        self, owner: str, run_id: str, resource_id: str, thread_id: str,
        *, strategy: MultitaskStrategy = "reject", epoch: int | None = None,
    ) -> QueuedClaim | None:
        token = b"%s:%d" % (self._replica_arg, next(self._tokens))
        keys = self._claim_keys(owner, run_id, resource_id, thread_id, epoch)
        mode = {"reject": b"reject", "enqueue": b"enqueue"}.get(strategy, b"front")
        try:
            status = await self._batched(
                self._claim, keys, (*self._claim_args(token, owner, run_id, thread_id), mode,
                                    self._queue_bound_arg, self._beats_arg,
                                    resource_id.encode(),
                                    b"" if epoch is None else b"%d" % epoch),
            )
        except (RedisError, OSError):
            logger.warning("claim: Redis does not answer", exc_info=True)
            raise _unavailable() from None
        code = int(status[0])
        if code == 1:
            raise ConflictError("a run with this runId is running", code="RUN_ALREADY_RUNNING")
        if code == 2:
            raise thread_busy()
        if code == 3:
            raise queue_full(self.settings.max_queued_runs_per_thread)
        self._claims[(owner, run_id)] = (token, keys[0], keys[1], keys[2], keys[3])
        if code == 0:
            return None
        holder = status[1] if len(status) > 1 else None
        if strategy in ("interrupt", "rollback") and holder:
            self._spawn(self._stop(bytes(holder), strategy == "rollback"), f"stop-{run_id}")
        return QueuedClaim(owner=owner, run_id=run_id, resource_id=resource_id,
                           thread_id=thread_id, token=token, epoch=epoch)

    def _claim_keys(
        self, owner: str, run_id: str, resource_id: str, thread_id: str,
        epoch: int | None = None,
    ) -> tuple[bytes, ...]:
        """live, thread, rec, log, queue, holder, the queue counter (``_CLAIM``, ``_TURN``)."""
        return (
            self._key("live", owner, run_id),
            self._key("thread", resource_id, thread_id),
            self._key("run", owner, run_id),
            self._log_key(owner, run_id, epoch),
            self._key("queue", resource_id, thread_id),
            self._key("holder", resource_id, thread_id),
            f"{self._prefix}:queued".encode(),
        )

    def _claim_args(
        self, token: bytes, owner: str, run_id: str, thread_id: str
    ) -> tuple[bytes, ...]:
        holder = orjson.dumps([owner, run_id])
        return (token, self._lock_arg, self._replica_arg, thread_id.encode(), self._ttl_arg,
                holder)

    async def _stop(self, holder: bytes, rollback: bool) -> None:
        """Tell the run that holds a thread to stop (a newer run interrupts it)."""
        try:
            owner, run_id = orjson.loads(holder)
            command = StopRun(owner=owner, run=run_id, rollback=rollback)
            if await self.ask(command) is None and self._handler is not None:
                self._handler(command)  # the holder is one of ours
        except (ServiceUnavailable, ValueError, TypeError):
            logger.warning("could not stop the run that holds a thread")

    async def wait_claim(self, place: QueuedClaim) -> None:
        """Try to take the thread whenever a replica frees one of its name (and at least
        every heartbeat, for a lock that expired or a message that was lost)."""
        keys = self._claim_keys(place.owner, place.run_id, place.resource_id, place.thread_id,
                                place.epoch)
        args = (*self._claim_args(place.token, place.owner, place.run_id, place.thread_id),
                b"", b"", self._beats_arg, place.resource_id.encode(),
                b"" if place.epoch is None else b"%d" % place.epoch)
        freed = asyncio.Event()
        waiting = self._queued.setdefault(keys[1], set())
        waiting.add(freed)
        try:
            while True:
                freed.clear()
                try:
                    status = int(await self._batched(self._turn, keys, args))
                except (RedisError, OSError):
                    logger.warning("queued run %s: Redis does not answer", place.run_id)
                    status = 1
                if status == 0:
                    return
                if status == 2:
                    raise ServiceUnavailable(
                        "the run lost its place in the thread's queue",
                        code="CLUSTER_UNAVAILABLE", retry_after=1.0,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(freed.wait(), self.settings.heartbeat_seconds)
        except BaseException:
            self._claims.pop((place.owner, place.run_id), None)
            await asyncio.shield(self._left(keys[0], keys[4], keys[2], place.token, keys[1]))
            raise
        finally:
            waiting.discard(freed)
            if not waiting:
                self._queued.pop(keys[1], None)

    async def _left(
        self, live: bytes, queue: bytes, record: bytes, token: bytes, lock: bytes
    ) -> None:
        try:
            await asyncio.wait_for(self._batched(
                self._leave, (live, queue, record), (token, self._freed_channel, lock)),
                REDIS_TIMEOUT)
        except (RedisError, OSError, TimeoutError):
            logger.warning("a queued run could not leave its queue; it expires by itself")

    def _wake(self, lock: bytes) -> None:
        for freed in self._queued.get(lock, ()):
            freed.set()

    async def abandon(self, owner: str, run_id: str, resource_id: str, thread_id: str) -> None:
        claim = self._claims.pop((owner, run_id), None)
        if claim is not None:
            await self._settle_release(claim[1:], claim[0])

    def started(self, run: Run) -> None:
        claim = self._claims.get(run.key)
        if claim is not None:
            self._shared[run.key] = _Shared(run, claim[0], claim[3], claim[4])

    def _share(self, owner: str, run_id: str) -> None:
        """Mirror the run's log from its first retained event on (once): another replica
        follows it. Until then its events cost Redis nothing."""
        shared = self._shared.get((owner, run_id))
        if shared is not None and shared.mirror is None:
            shared.mirror = self._spawn(self._mirror(shared), f"mirror-{run_id}")

    async def release(self, run: Run) -> None:
        claim = self._claims.pop(run.key, None)
        if claim is not None:
            await self._settle_release(claim[1:3], claim[0])

    async def _settle_release(self, keys: tuple[bytes, ...], token: bytes) -> None:
        """Release within a bound; if Redis is away, the locks expire by themselves."""
        try:
            await asyncio.wait_for(
                self._batched(self._release, keys, (token, self._freed_channel)), REDIS_TIMEOUT
            )
        except (RedisError, OSError, TimeoutError):
            logger.warning("could not release a run's locks; they expire by themselves")

    def forgotten(self, run: Run) -> None:
        shared = self._shared.get(run.key)
        if shared is not None and shared.run is run:
            del self._shared[run.key]
            self._spawn(self._forget_shared((shared.record, shared.log), shared.token),
                        f"forget-{run.run_id}")

    async def _forget_shared(self, keys: tuple[bytes, ...], token: bytes) -> None:
        try:
            await self._batched(self._forget, keys, (token,))
        except (RedisError, OSError):
            logger.warning("could not drop a shared run log; it expires by itself")

    async def _mirror(self, shared: _Shared) -> None:
        """Append the run's log to its stream: each batch is one script call, and the
        batches of all runs ready at once go to Redis in one pipeline (one batch in flight
        per run, so a slow Redis holds the mirror back, never the run).

        A batch waits ``MIRROR_DELAY`` before it goes (unless the log is complete), so that
        what the run appends right after (a tool call's three events, a reply and the
        terminal) joins it: a run costs a few script calls, not one per burst of events."""
        run, token, record, log = shared.run, shared.token, shared.record, shared.log
        position = 0
        while True:
            try:
                async for ready in run.log.follow(position):
                    if ready[-1][0] <= position:
                        continue  # already sent with the batch before
                    if not run.log.closed:
                        await asyncio.sleep(MIRROR_DELAY)
                    batch = run.log.entries(position, max_bytes=DEFAULT_BATCH_BYTES)
                    await self._batched(self._append, (record, log), self._append_args(
                        token, batch, run.log.closed and batch[-1][0] == run.log.last_seq))
                    position = batch[-1][0]
                return
            except EventsNotRetained as exc:  # Redis was slower than the run: skip what is gone
                position = exc.first_retained - 1
            except (RedisError, OSError):
                logger.warning("mirror of run %s: Redis does not answer", run.run_id)
                await asyncio.sleep(self.settings.heartbeat_seconds)

    def _append_args(self, token: bytes, batch: list[tuple[int, bytes]],
                     final: bool) -> tuple[bytes, ...]:
        """The :data:`_APPEND` arguments of ``batch``, as bytes (redis-py passes bytes on
        as they are; an int or str costs it a conversion each)."""
        return (token, self._ttl_arg, self._log_bytes_arg, b"1" if final else b"0",
                b"%d" % batch[0][0], b" ".join([b"%d" % len(data) for _, data in batch]),
                b"".join([data for _, data in batch]))

    async def _batched(self, script: Any, keys: tuple[bytes, ...],
                       args: tuple[bytes, ...]) -> Any:
        """Run ``script`` (one the outboxes load) in the next bulk pipeline."""
        return await self._bulk.send(
            lambda pipe: pipe.evalsha(script.sha, len(keys), *keys, *args))

    def _controlled(self, *command: Any) -> asyncio.Future[Any]:
        """Send ``command`` in the next control pipeline."""
        return self._control.send(lambda pipe: pipe.execute_command(*command))

    # -- runs of other replicas ---------------------------------------------------------

    async def find(self, owner: str, run_id: str) -> RemoteRun | None:
        try:
            fields = await self._redis.hmget(
                self._key("run", owner, run_id),
                ["replica", "thread", "first", "last", "end", "resource", "epoch"],
            )
        except (RedisError, OSError):
            raise _unavailable() from None
        replica, thread, first, last, end, resource, epoch = fields
        if replica is None or replica.decode() == self.replica_id:
            return None  # unknown, or ours and no longer retained
        return RemoteRun(
            run_id=run_id, thread_id=thread.decode(), owner=owner, replica=replica.decode(),
            first_seq=int(first), last_seq=int(last), ended=end is not None,
            # A record without one (an older replica's) is seen by unrestricted callers only.
            resource_id=resource.decode() if resource is not None else "",
            epoch=int(epoch) if epoch else None,
        )

    async def follow(
        self, run: RemoteRun, after: int, *, idle: float | None, durable: bool = False
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        """Read the stream after ``after`` (blocking reads of at most one heartbeat); when
        quiet, check the owner's heartbeat and declare the run lost once it expired."""
        log, record = self._log_key(run.owner, run.run_id, run.epoch), self._key(
            "run", run.owner, run.run_id
        )
        block = self.settings.heartbeat_seconds if idle is None else min(
            idle, self.settings.heartbeat_seconds
        )
        position, quiet, mirrored = after, 0.0, False
        while True:
            reply = await self._redis.xread(
                {log: f"{position}-0"}, count=FOLLOW_COUNT, block=max(1, int(block * 1000))
            )
            if reply:
                batch: list[tuple[int, bytes]] = []
                ended = False
                for entry_id, fields in reply[0][1]:
                    seq = int(entry_id.split(b"-", 1)[0])
                    if not batch and seq > position + 1:
                        raise EventsNotRetained(seq)
                    batch.append((seq, fields[b"d"]))
                    ended = ended or b"e" in fields
                position, quiet, mirrored = batch[-1][0], 0.0, True
                yield batch
                if ended:
                    return
                continue
            ending = await self._quiet(run, record, log, position, mirrored=mirrored,
                                       durable=durable)
            if ending is not None:
                if ending:
                    yield ending
                return
            quiet += block
            if idle is not None and quiet >= idle:
                quiet = 0.0
                yield []

    async def _quiet(
        self, run: RemoteRun, record: bytes, log: bytes, position: int, *, mirrored: bool,
        durable: bool,
    ) -> list[tuple[int, bytes]] | None:
        """A follower read nothing: whether its following ends here (``None``: it goes on;
        else the last batch to yield, maybe empty). A lost owner's durable run ends its
        shared log without a terminal event (the caller continues it); another's is
        declared lost."""
        state = await self._redis.hmget(record, ["replica", "end"])
        if state[0] is None or state[0].decode() != run.replica:
            return []  # dropped or expired, or another replica holds the run now
        if state[1] is not None:
            # The owner died before the events this client saw on it reached the shared
            # log (so the log ends before the cursor): the client still gets its end.
            return [(position + 1, RUN_LOST)] if int(state[1]) <= position else None
        beat = self._heartbeat_key(state[0].decode())
        if durable:
            if not await self._redis.exists(beat):
                return []
        elif await self._lost(keys=[record, log, beat], args=[RUN_LOST]):
            return None  # RUN_LOST is in the log now: read next
        if not mirrored:  # the owner lives: ask again (in case the attach was lost)
            mirror = Request(command=MirrorLog(owner=run.owner, run=run.run_id))
            self._controlled("PUBLISH", self._channel(state[0].decode()), encode(mirror),
                             ).add_done_callback(_log_failure)
        return None

    async def lost(self, run: RemoteRun) -> bool:
        try:
            return not await self._redis.exists(self._heartbeat_key(run.replica))
        except (RedisError, OSError):
            raise _unavailable() from None

    async def peers(self) -> list[str]:
        return [r for r, alive in await self._replicas() if alive and r != self.replica_id]

    async def alive(self, replica: str) -> bool:
        try:
            return bool(await self._redis.exists(self._heartbeat_key(replica)))
        except (RedisError, OSError):
            raise _unavailable() from None

    async def lost_replicas(self) -> list[str]:
        return [r for r, alive in await self._replicas() if not alive]

    async def _replicas(self) -> list[tuple[str, bool]]:
        """Every replica that joined and has not left, and whether it is alive."""
        try:
            members = sorted(m.decode() for m in await self._redis.smembers(self._replicas_key))
            async with self._redis.pipeline(transaction=False) as pipe:
                for member in members:
                    pipe.exists(self._heartbeat_key(member))
                beats = await pipe.execute()
        except (RedisError, OSError):
            raise _unavailable() from None
        return list(zip(members, (bool(b) for b in beats), strict=True))

    async def forget_replica(self, replica: str) -> None:
        try:
            await self._redis.srem(self._replicas_key, replica)
        except (RedisError, OSError):
            raise _unavailable() from None

    async def send(self, replica: str, command: RunCommand) -> None:
        await self._published(self._controlled(
            "PUBLISH", self._channel(replica), encode(Request(command=command))))

    async def tell(self, run: RemoteRun, command: RunCommand) -> None:
        await self._published(self._controlled(
            "PUBLISH", self._channel(run.replica), encode(Request(command=command))))

    async def ask(self, command: RunCommand) -> Answer | None:
        """Find the run's replica and publish ``command`` to it in one script call (one
        round trip, no pipeline to wait for: someone waits on this), then wait for its
        answer on this replica's own channel."""
        keys = [self._key("run", command.owner, command.run)]
        request = f"{next(self._requests)}"
        answered = self._waiting[request] = asyncio.get_running_loop().create_future()
        message = encode(Request(command=command, sender=self.replica_id, id=request))
        try:
            await self._published(self._send(
                keys=keys, args=[self._replica_arg, self._channel_arg, message]))
            return await asyncio.wait_for(answered, FORWARD_TIMEOUT)
        except _NotElsewhere:
            return None
        except TimeoutError:
            raise ServiceUnavailable(
                "the replica running this run did not answer in time",
                code="RUN_OWNER_UNAVAILABLE", retry_after=1.0,
            ) from None
        finally:
            self._waiting.pop(request, None)

    @staticmethod
    async def _published(sent: Any) -> None:
        """Wait for a PUBLISH (or the command script): check someone got it."""
        try:
            receivers = await sent
        except (RedisError, OSError):
            raise _unavailable() from None
        if receivers == NOT_ELSEWHERE:
            raise _NotElsewhere
        if not receivers:
            raise ServiceUnavailable(
                "the replica running this run does not answer",
                code="RUN_OWNER_UNAVAILABLE", retry_after=1.0,
            )

    async def _commands(self) -> None:
        """Serve commands for this replica's runs, and take the answers to its own.

        Each command is handled right here, not in a task of its own (the handler does not
        wait: it hands a result to a run or cancels it), so a busy loop does not delay it."""
        replies = self._reply_channel(self.replica_id).encode()
        while True:
            try:
                async for message in self._pubsub.listen():
                    if message["channel"] == replies:
                        self._answered(message["data"])
                    elif message["channel"] == self._freed_channel:
                        self._wake(message["data"])
                    else:
                        self._answer(message["data"])
            except (RedisError, OSError):
                logger.warning("commands: Redis does not answer; resubscribing")
                await asyncio.sleep(self.settings.heartbeat_seconds)

    def _answered(self, data: bytes) -> None:
        try:
            reply: Reply = decode_reply(data)
        except MalformedMessage:
            logger.warning("ignored a malformed cluster answer")
            return
        waiting = self._waiting.get(reply.id)
        if waiting is not None and not waiting.done():
            waiting.set_result(reply.answer)

    def _answer(self, data: bytes) -> None:
        assert self._handler is not None
        try:
            request = decode_request(data)
        except MalformedMessage:
            logger.warning("ignored a malformed cluster command")
            return
        command = request.command
        if isinstance(command, AttachFollower | MirrorLog):
            # Another replica follows the run: share its log.
            self._share(command.owner, command.run)
            if isinstance(command, MirrorLog):
                return
        answer = self._handler(command)
        if request.sender is not None and request.id is not None:
            # Not awaited: the next command need not wait for this answer's round trip.
            reply = Reply(id=request.id, answer=answer)
            self._controlled(
                "PUBLISH", self._reply_channel(request.sender), encode(reply),
            ).add_done_callback(_log_failure)

    async def thread_busy(self, resource_id: str, thread_id: str) -> bool:
        try:
            held = await self._redis.exists(self._key("thread", resource_id, thread_id),
                                            self._key("queue", resource_id, thread_id))
        except (RedisError, OSError):
            raise _unavailable() from None
        return bool(held)

    # -- transports' names for runs -------------------------------------------------------

    async def remember_alias(self, owner: str, alias: bytes, run_id: str) -> None:
        await self._redis.set(self._key("alias", owner, alias.hex()), run_id, px=self._ttl_ms)

    async def recall_alias(self, owner: str, alias: bytes) -> str | None:
        value = await self._redis.get(self._key("alias", owner, alias.hex()))
        return None if value is None else bytes(value).decode()
