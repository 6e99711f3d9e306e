"""The application core: ``Backend``, what every transport serves.

``Backend`` is the composition root. It owns the settings, the agent catalog, the
authenticator, the thread store, thread memory and the run engine, as one async context
manager (``async with Backend(settings) as backend``), and exposes the operations a transport
needs, each taking the caller's :class:`~iobridge.auth.Principal`:

* runs: ``start_run`` (raw body in, a started run out), ``follow`` (the run's log as batches
  of ``(seq, event bytes)``, attached while iterated), ``resume`` (a run and a checked
  cursor), ``cancel_run``, ``submit_tool_result``;
* agents: ``list_agents``, ``describe_agent``;
* threads: ``create_thread``, ``list_threads``, ``get_thread``, ``update_thread``,
  ``delete_thread``, ``list_messages``.

Ownership, cursors, attach/detach and ``forwardedProps`` are decided here once; the HTTP
routes (:mod:`iobridge.http`) and the N-PAMP server (:mod:`iobridge.npamp_server`) only parse,
call and encode. This module imports neither transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

import orjson

from iobridge.agents.base import Agent
from iobridge.agents.capabilities import accepted_media
from iobridge.agents.catalog import AgentCatalog
from iobridge.agents.catalog import build_catalog as make_catalog
from iobridge.auth import Authenticator, Principal
from iobridge.config import Settings
from iobridge.errors import (
    ConflictError,
    EventsNotRetained,
    InputError,
    IobridgeError,
    NotFoundError,
    PayloadTooLarge,
    ServiceUnavailable,
)
from iobridge.observability.metrics import Metrics
from iobridge.protocol import events as ev
from iobridge.protocol.bodies import Body
from iobridge.protocol.event_ids import Cursor, OpenState, parse_cursor
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH
from iobridge.protocol.media import MediaLimits, check_media, check_result_media
from iobridge.protocol.message_formats import to_mastra
from iobridge.protocol.options import RunOptions, ToolResultMode, parse_run_options
from iobridge.protocol.run_input import OFF_LOOP_BYTES, RunInput, parse_run_input
from iobridge.protocol.thread_bodies import parse_thread_create, parse_thread_update
from iobridge.protocol.tool_results import ToolResult, parse_tool_result
from iobridge.runtime.admission import thread_busy
from iobridge.runtime.cluster import Cluster, LocalCluster, RemoteRun
from iobridge.runtime.engine import Runtime
from iobridge.runtime.following import Continuation, RemoteTags, catch_up, numbered, skip_results
from iobridge.runtime.replica_messages import (
    Answer,
    AttachFollower,
    CancelRun,
    DetachFollower,
    MirrorLog,
    RoomForFollower,
    RunCommand,
    SubmitToolResult,
)
from iobridge.runtime.revival import UnknownFormat
from iobridge.runtime.run import Run
from iobridge.runtime.thread_memory import StoreMemory
from iobridge.store.base import (
    MAIN_BRANCH,
    Branch,
    Checkpoint,
    StoredMessage,
    Thread,
    ThreadStore,
    format_timestamp,
    is_outage,
    outage_refusal,
    validate_id,
)
from iobridge.store.migrate import open_store

__all__ = [
    "MAX_MESSAGES_PAGE",
    "Backend",
    "EventSink",
    "FollowedRun",
    "MessagePage",
    "RunAliases",
    "build_catalog",
]

#: What ``resume`` hands a transport: a run of this process, or one another replica drives.
FollowedRun = Run | RemoteRun
_SomeRun = TypeVar("_SomeRun", Run, RemoteRun)

logger = logging.getLogger("iobridge")

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _store_route(method: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """A thread route whose store does not answer (down, or past ``store_timeout_seconds``)
    answers 503 ``STORE_UNAVAILABLE`` as a new run does, not a bug's 500."""
    @functools.wraps(method)
    async def route(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            if not is_outage(exc):
                raise
            logger.error("the thread store does not answer (%s: %s)", type(exc).__name__, exc)
            raise outage_refusal() from exc
    return route


#: Seconds the readiness check waits for the store.
READY_TIMEOUT = 2.0
#: Most messages one page of ``list_messages`` holds (a page grows to keep tool calls whole).
MAX_MESSAGES_PAGE = 1000
#: The shapes ``list_messages`` gives: Mastra v2 (what io.Assist renders) or AG-UI as stored.
MESSAGE_FORMATS = ("mastra", "agui")


async def parse_run_input_off_loop(
    body: bytes | str | dict[str, Any], max_messages: int, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> RunInput:
    """``parse_run_input``, in a worker thread for bodies over ``OFF_LOOP_BYTES``.

    Validating a few MiB of messages takes tens to hundreds of milliseconds of CPU; in a
    thread the loop keeps serving other requests (it regains the GIL every switch interval).
    """
    if isinstance(body, dict) or len(body) <= OFF_LOOP_BYTES:
        return parse_run_input(body, max_messages=max_messages, max_depth=max_depth)
    return await asyncio.to_thread(
        parse_run_input, body, max_messages=max_messages, max_depth=max_depth
    )


async def parse_run_options_off_loop(props: dict[str, Any], settings: Settings) -> RunOptions:
    """``parse_run_options``, in a worker thread when there is a ``structuredOutput`` schema
    to check against its metaschema (up to a few hundred ms of CPU at its bounds)."""
    parse = functools.partial(
        parse_run_options, props, max_schema_bytes=settings.max_output_schema_bytes,
        max_schema_objects=settings.max_output_schema_objects,
    )
    return await asyncio.to_thread(parse) if "structuredOutput" in props else parse()


def build_catalog(settings: Settings, agents: Sequence[Agent] = ()) -> AgentCatalog:
    """The demo agent, the configured agents, then ``agents`` (see ``agents.catalog``)."""
    return make_catalog(settings.agents, default_agent=settings.default_agent, agents=agents)


class Backend:
    """The io.Intelligence backend, independent of any transport.

    Args:
        settings: Everything configurable (default: ``Settings.load()``).
        agents: Agents given in Python, added after the configured ones.
        catalog: A ready catalog instead of one built from ``settings`` and ``agents``.
        store: An open thread store (the caller closes it); default: opened from
            ``settings.database_url`` on entry and closed on exit.
        authenticator: A ready authenticator instead of one built from ``settings.auth``.
        tracer_provider: An OpenTelemetry ``TracerProvider`` to trace runs with (turns
            tracing on; default: ``settings.tracing``, see ``docs/observability.md``).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agents: Sequence[Agent] = (),
        catalog: AgentCatalog | None = None,
        store: ThreadStore | None = None,
        authenticator: Authenticator | None = None,
        tracer_provider: Any = None,
    ) -> None:
        self.settings = settings or Settings.load()
        #: This backend's Prometheus metrics (``metrics.registry`` is what ``/metrics`` serves).
        self.metrics = Metrics()
        self.catalog = catalog or build_catalog(self.settings, agents)
        self.authenticator = authenticator or Authenticator(self.settings.auth)
        self.runtime = Runtime(settings=self.settings, metrics=self.metrics)
        self.runtime.find_agent = self.catalog.get
        #: Runs of other replicas and shared busy marks (``redis_url``); else one process.
        self.cluster: Cluster = LocalCluster()
        self._tracer_provider = tracer_provider
        #: False once shutdown began (or the backend is left): new runs answer 503.
        self.admitting = True
        self._given_store = store
        self._store: ThreadStore | None = store
        self._stack: AsyncExitStack | None = None
        #: Transports' own names for runs, shared across replicas (N-PAMP stream ids).
        self.aliases = RunAliases(self)

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Backend:
        """Open the store (migrating it) and turn thread memory on."""
        self.admitting = True  # again, for a backend entered once more after it was left
        stack = AsyncExitStack()
        try:
            if self._given_store is None:
                self._store = await open_store(
                    self.settings.database_url, timeout=self.settings.store_timeout_seconds
                )
                stack.push_async_callback(self._store.close)
            self.runtime.memory = StoreMemory(
                self.store, self.metrics, max_interrupt_bytes=self.settings.max_interrupt_bytes,
                max_branches=self.settings.max_branches_per_thread,
                diverging=self.settings.diverging_history,
                timeout=self.settings.store_timeout_seconds,
            )
            if self.settings.durable_runs and self.store.keeps_checkpoints:
                self.runtime.checkpoints = self.store
            if self.settings.redis_url is not None:
                from iobridge.cluster.redis import RedisCluster

                self.cluster = RedisCluster(self.settings)
                stack.push_async_callback(self._close_cluster)
                await self.cluster.open(self.runtime.act)
                self.runtime.cluster = self.cluster
                self.runtime.holder = self.cluster.replica_id
            if self.settings.tracing.enabled or self._tracer_provider is not None:
                from iobridge.observability.tracing import open_tracer

                self.runtime.tracer = await stack.enter_async_context(
                    open_tracer(self.settings.tracing, self._tracer_provider)
                )
            # Runs stop (and store what they produced) before the store closes.
            stack.push_async_callback(self.runtime.aclose)
            janitor = asyncio.create_task(self._expire_retained(), name="iobridge-retention")
            stack.callback(janitor.cancel)
            if self.runtime.checkpoints is not None and not self.cluster.distributed:
                # One process: the runs the last one left are this one's to continue.
                await self._continue_stored_runs()
            elif self.runtime.checkpoints is not None:
                sweep = asyncio.create_task(self._sweep_lost_replicas(), name="iobridge-sweep")
                stack.callback(sweep.cancel)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def _continue_stored_runs(self) -> None:
        """Continue every checkpointed run (parked ones wait for their results again,
        streaming ones re-execute from their last durable point)."""
        store = self.runtime.checkpoints
        assert store is not None
        try:
            stored = await store.list_checkpoints()
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The server still starts (not ready); each run is continued when it is asked for.
            logger.error("stored runs not continued: the store does not answer (%s: %s)",
                         type(exc).__name__, exc)
            return
        for owner, run_id, _ in stored:
            try:
                checkpoint = await store.load_checkpoint(owner, run_id)
                if checkpoint is not None:
                    await self._continue(checkpoint)
            except Exception as exc:
                if not isinstance(exc, IobridgeError) and not is_outage(exc):
                    raise
                logger.warning("run %s could not be continued (%s: %s)",
                               run_id, type(exc).__name__, exc)

    async def _sweep_lost_replicas(self) -> None:
        """With replicas: continue the durable runs a lost replica (killed, crashed) was
        producing. Every replica looks; the store's epoch claim lets exactly one win each run.
        (Runs it had parked wait for their results, wherever those arrive.)"""
        settings = self.settings
        while True:
            await asyncio.sleep(max(settings.owner_lost_seconds, settings.heartbeat_seconds))
            try:
                await self._sweep_once()
            except Exception as exc:
                logger.warning("sweep of lost replicas failed (%s: %s)", type(exc).__name__, exc)

    async def _sweep_once(self) -> None:
        store = self.runtime.checkpoints
        assert store is not None
        for replica in await self.cluster.lost_replicas():
            producing = await store.list_checkpoints(holder=replica, phase="running")
            for owner, run_id, _ in producing:
                await self.runtime.take_over(owner, run_id)
            if not producing:
                await self.cluster.forget_replica(replica)

    async def _stored_run(self, principal: Principal, run_id: str) -> Checkpoint:
        """The checkpoint of the caller's run that no process holds.

        Raises:
            NotFoundError: no checkpoint of it, or one for a resource the caller may not act
                for (a member of a shared principal): answered exactly like a missing run.
        """
        store = self.runtime.checkpoints
        checkpoint = None if store is None else await store.load_checkpoint(principal.id, run_id)
        if checkpoint is None or not self.authenticator.can_access(
            principal, checkpoint.resource_id
        ):
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
        return checkpoint

    @_store_route
    async def _revive(self, principal: Principal, run_id: str) -> Run:
        """Continue the caller's checkpointed run here (it has no live process).

        Raises:
            NotFoundError: no such run for this caller, or its agent is gone.
            ConflictError: another process continues it.
        """
        return await self._continue(await self._stored_run(principal, run_id))

    async def _continue(self, checkpoint: Checkpoint) -> Run:
        """Continue ``checkpoint``'s run here, counted against the admission limits as it
        was when it started."""
        self._check_admitting()
        agent = self.catalog.get(checkpoint.agent_id)
        try:
            return await self.runtime.revive(
                checkpoint, agent,
                caller=self._caller(checkpoint.owner, checkpoint.resource_id),
            )
        except UnknownFormat:
            logger.error("run %s: its checkpoint is of another iobridge version; not continued",
                         checkpoint.run_id)
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND") from None

    def _caller(self, principal_id: str, resource_id: str) -> str:
        """Whom a run counts against in ``max_active_runs_per_principal``: in auth mode none
        every caller is one principal, a deployment's own auth in front tells its users
        apart by resourceId, so the limit counts those."""
        return resource_id if self.authenticator.mode == "none" else principal_id

    def _check_admitting(self) -> None:
        if not self.admitting:
            raise ServiceUnavailable(
                "the server is shutting down", code="SERVER_SHUTTING_DOWN", retry_after=5.0
            )

    @property
    def is_open(self) -> bool:
        """True between entering and leaving ``async with backend``."""
        return self._stack is not None

    async def __aexit__(self, *exc: object) -> None:
        """Stop live runs, then close the store if this backend opened it. Nothing is
        admitted from here on: no new run, and none continued here (its followers' streams
        end where its runs are let go)."""
        self.admitting = False
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        self.runtime.memory = None
        self.runtime.tracer = None
        self._store = self._given_store

    async def _close_cluster(self) -> None:
        cluster, self.cluster = self.cluster, LocalCluster()
        self.runtime.cluster = self.cluster
        await cluster.aclose()

    async def shutdown(self) -> None:
        """Stop admitting runs, let live ones finish for ``drain_seconds``, then end the rest
        with RUN_ERROR ``SERVER_SHUTDOWN`` (each stores what it produced)."""
        self.admitting = False
        self.runtime.suspend_durable()
        await self.runtime.drain(self.settings.drain_seconds)
        await self.runtime.aclose()

    async def readiness_problem(self) -> str | None:
        """Why the backend cannot serve now (``None``: it can)."""
        if not self.admitting:
            return "shutting down"
        if self.runtime.writes_failing():
            return "the store refuses writes"
        begun = time.perf_counter()
        try:
            await asyncio.wait_for(self.store.get_thread("readyz"), READY_TIMEOUT)
        except Exception as exc:
            logger.warning("readiness: the store does not answer (%s)", type(exc).__name__)
            return "the store does not answer"
        self.metrics.store_operation("readiness", time.perf_counter() - begun)
        return await self.cluster.problem()

    async def _expire_retained(self) -> None:
        """Drop expired retained runs on a timer, not only when another run ends."""
        period = min(5.0, max(0.05, self.settings.retention_seconds / 4))
        while True:
            await asyncio.sleep(period)
            self.runtime.expire()

    @property
    def store(self) -> ThreadStore:
        """The thread store (available once the backend is entered, or when given)."""
        if self._store is None:
            raise RuntimeError("the backend is not open: use 'async with Backend(...)'")
        return self._store

    # -- runs ---------------------------------------------------------------------------

    async def start_run(
        self,
        principal: Principal,
        body: bytes | str | dict[str, Any],
        *,
        tool_result_mode: ToolResultMode | None = None,
    ) -> Run:
        """Parse a RunAgentInput and start its run (events follow in ``run.log``).

        ``tool_result_mode`` is the transport's default for frontend tools.

        Raises:
            InputError: a bad body or ``forwardedProps``, or a ``resume`` that does not
                answer the thread's open interrupts (400, ``INTERRUPT_*``).
            PayloadTooLarge: ``state`` over ``max_state_bytes`` (413 ``STATE_TOO_LARGE``),
                media over ``max_media_part_bytes``/``max_media_message_bytes`` (413
                ``MEDIA_TOO_LARGE``); an InputError ``UNSUPPORTED_MEDIA`` (400) for media the
                agent declares it does not accept.
            NotFoundError: an unknown agent, a foreign resource or thread (404).
            ConflictError: the runId is running, or the thread is busy (409).
            TooManyRequests: over the active-run limits (429 ``TOO_MANY_RUNS``).
            ServiceUnavailable: the server is shutting down (503).
        """
        self._check_admitting()
        run_input = await parse_run_input_off_loop(
            body, self.settings.max_messages, self.settings.max_json_depth
        )
        if (
            run_input.state is not None
            and len(orjson.dumps(run_input.state)) > self.settings.max_state_bytes
        ):
            raise PayloadTooLarge(
                f"state is larger than {self.settings.max_state_bytes} bytes",
                code="STATE_TOO_LARGE",
            )
        options = await parse_run_options_off_loop(run_input.forwarded_props, self.settings)
        resource_id = self.authenticator.resolve_resource(principal, options.resource_id)
        agent = self.catalog.get(options.agent_id)
        check_media(
            run_input.messages,
            self._media_limits(),
            lambda: accepted_media(agent.capabilities()),
            agent_id=agent.id,
        )
        return await self.runtime.start(
            run_input,
            options,
            agent,
            owner=principal.id,
            resource_id=resource_id,
            tool_result_mode=tool_result_mode,
            caller=self._caller(principal.id, resource_id),
        )

    async def follow(
        self,
        run: FollowedRun,
        sink: EventSink,
        *,
        after: int | Cursor = 0,
        idle: float | None = None,
        detach_grace: float | None = None,
    ) -> None:
        """Carry the run's log after ``after`` to ``sink`` until the run ends or the sink
        stops taking it: the one follow loop every transport's stream goes through.

        The caller counts as a follower meanwhile; when it stops (or is cancelled) and no
        follower is left, the run is cancelled after ``detach_grace`` seconds (default
        ``settings.detach_grace_seconds``). With ``idle`` set, ``sink.keep_alive`` is
        called after that many quiet seconds. A run another replica drives is followed
        through the shared log; its owner counts the follower the same way. What the sink
        raises (a broken connection) propagates once the follower is detached. While the
        run waits for its thread (``queued``), ``sink.queued`` is called at once and instead
        of ``keep_alive``.

        A durable run's log may end without its terminal event here (its replica stopped or
        let it go): the follower goes on with the process that continues it, caught up from
        what it has (``runtime.following``).
        """
        leg = _Leg(run, after if isinstance(after, Cursor) else Cursor(after))
        try:
            if isinstance(run, Run) and run.queued:
                await sink.queued()
            while (outcome := await self._follow_leg(leg, sink, idle, detach_grace)) == "cut":
                if not await self._hand_over(leg):
                    break
        except EventsNotRetained as exc:
            await sink.cut_off(exc)
            return
        if outcome != "over":
            await sink.end()

    async def _follow_leg(
        self, leg: _Leg, sink: EventSink, idle: float | None, detach_grace: float | None
    ) -> str:
        """Follow ``leg.run`` from ``leg.cursor``: ``over`` once the sink's stream is done
        (the terminal event sent in the write that ends it, or the sink stopped), ``ended``
        when the log ended after its terminal event, ``cut`` when it ended without one."""
        run = leg.run
        plan = await self._continuation(leg)
        if plan.prologue:
            if not await sink.send(plan.prologue, last=False, tags=plan.tags):
                return "over"
            leg.sent(plan.prologue[-1][0], plan.tags[-1])
        tagger = self._tagger(leg)
        skip = plan.skip
        if isinstance(run, RemoteRun):
            batches = self._follow_remote(run, plan.after, idle, detach_grace)
        else:
            self.runtime.attach(run)
            batches = run.log.follow(plan.after, idle=idle)
        try:
            # Closed here, not left to the loop's finalizer hook (a task per run to close it,
            # once the garbage collector finds it).
            async with aclosing(batches):
                async for events in batches:
                    if not events:
                        await (sink.queued() if isinstance(run, Run) and run.queued
                               else sink.keep_alive())
                        continue
                    last = _ends(run, events[-1][0])
                    if skip:
                        events, seen = skip_results(events, skip)
                        skip = frozenset() if seen else skip
                    if events and await self._send(leg, sink, events, last, tagger):
                        return "over"
        finally:
            if isinstance(run, Run):
                self.runtime.detach(run, grace=detach_grace)
        return "ended" if leg.ended else "cut"

    async def _send(
        self, leg: _Leg, sink: EventSink, events: list[tuple[int, bytes]], last: bool,
        tagger: Callable[[list[tuple[int, bytes]]], list[bytes]] | None,
    ) -> bool:
        """One batch to the sink; True once the follow is over."""
        leg.ended = events[-1][1].startswith(_TERMINAL_PREFIXES)
        if tagger is None:
            return not await sink.send(events, last=last) or last
        tags = tagger(events)
        events = numbered(events, leg.epoch)
        leg.sent(events[-1][0], tags[-1])
        return not await sink.send(events, last=last, tags=tags) or last

    def _tagger(self, leg: _Leg) -> Callable[[list[tuple[int, bytes]]], list[bytes]] | None:
        """What gives a batch its open states (``None``: plain ids, not a durable run)."""
        run = leg.run
        if isinstance(run, Run):
            return run.ids.tags if run.ids is not None else None
        if run.epoch is None:
            return None  # not durable
        # A durable run of another replica: its log comes without what clients have open.
        return RemoteTags(leg.cursor.state if leg.epoch == leg.cursor.epoch else None).tags

    async def _continuation(self, leg: _Leg) -> Continuation:
        """How ``leg`` goes on from its cursor: the log after it (same epoch), or a catch-up
        (a cursor the run's previous holder gave).

        Raises:
            InputError: a cursor of a later epoch than the run's (``INVALID_CURSOR``).
            EventsNotRetained: a cursor of an earlier epoch whose open state is unknown (an
                N-PAMP ``event_id``: the number alone).
        """
        run, cursor = leg.run, leg.cursor
        epoch = leg.epoch = _epoch(run)
        if cursor.epoch == epoch:
            return Continuation(after=cursor.seq)
        state = cursor.state if cursor.state is not None or cursor.number else OpenState()
        if cursor.epoch > epoch or state is None:
            raise _bad_cursor() if cursor.epoch > epoch else EventsNotRetained(
                run.log.first_seq if isinstance(run, Run) else run.first_seq
            )
        # The thread before the point: a run whose end write (its messages stored, its
        # checkpoint dropped, at once) lands in between is then seen as concluded, and its
        # thread read again. The other way round, the snapshot could hold the messages of
        # the run that the log after its point gives once more.
        stored = await self.store.list_messages(run.thread_id)
        point_seq, point = await self._last_point(run)
        if not point:  # concluded: everything but its terminal event is in its thread
            stored = await self.store.list_messages(run.thread_id)
        known = {m.get("id") for m in stored}
        started = ev.run_started(run.thread_id, run.run_id, point.get("parentRunId"))
        return catch_up(
            cursor, state, started=started, branches=point.get("branches", []),
            point_seq=point_seq, point=point,
            messages=[*stored, *(m for m in point.get("messages", ())
                                 if m.get("id") not in known)],
        )

    async def _last_point(self, run: FollowedRun) -> tuple[int, dict[str, Any]]:
        """The sequence number and values of the run's last durable point; for a run that
        concluded, the event before its terminal one (everything else is in its thread).

        Raises:
            EventsNotRetained: neither is known (a run of another replica between its end
                write and its terminal event, for longer than a moment).
        """
        if isinstance(run, Run):
            if run.log.closed:
                return run.log.last_seq - 1, {}
            assert run.ids is not None
            return run.ids.point_seq, {**run.ids.point, "branches": run.ids.branches}
        store = self.runtime.checkpoints
        for attempt in range(_CONCLUDING_POLLS):
            checkpoint = None if store is None else await store.load_checkpoint(
                run.owner, run.run_id)
            if checkpoint is not None:
                return checkpoint.last_seq, checkpoint.point
            if not attempt:  # concluded: its owner shares the log (up to its terminal event)
                await self._tell(run, MirrorLog(owner=run.owner, run=run.run_id))
            found = await self.cluster.find(run.owner, run.run_id)
            if found is not None and found.ended:
                return found.last_seq - 1, {}
            await asyncio.sleep(_CONCLUDING_POLL_SECONDS)
        raise EventsNotRetained(run.first_seq)

    async def _hand_over(self, leg: _Leg) -> bool:
        """The log ``leg`` followed ended without its terminal event: find the process that
        continues the run (this one may take it over) and go on there from what the follower
        has. False: nothing continues it (the follow ends)."""
        if self.runtime.checkpoints is None or not self.admitting:
            return False
        settings = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.owner_lost_seconds + 2 * settings.heartbeat_seconds + 5
        while loop.time() < deadline:
            try:
                found = await self._locate(leg.run)
            except (ConflictError, ServiceUnavailable):  # another process is taking it over
                await asyncio.sleep(settings.heartbeat_seconds / 2)
                continue
            except NotFoundError:
                # No checkpoint: it concluded (its thread has it), or it is not durable (then
                # its follow ended because its record went: nothing is left to follow).
                return False
            if found is not None:
                leg.follow(found)
                return True
            await asyncio.sleep(settings.heartbeat_seconds / 2)
        return False

    async def _locate(self, run: FollowedRun) -> FollowedRun | None:
        """Where the run goes on now: live here, on a replica that holds it, or continued
        here from its checkpoint; ``None``: not decided yet (its replica's record is still
        there and that replica alive).

        Raises:
            NotFoundError: it has no checkpoint (it is not durable, or it concluded).
            ConflictError: another process is taking it over.
        """
        local = self.runtime.find(run.owner, run.run_id)
        if local is not None and local is not run:
            return local
        remote = await self.cluster.find(run.owner, run.run_id)
        if remote is not None and (remote.ended or not await self.cluster.lost(remote)):
            if isinstance(run, RemoteRun) and remote.replica == run.replica and not remote.ended:
                return None  # the same holder, alive: its record is about to go
            return remote
        store = self.runtime.checkpoints
        checkpoint = None if store is None else await store.load_checkpoint(run.owner, run.run_id)
        if checkpoint is None:
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
        return await self._continue(checkpoint)

    async def _follow_remote(
        self, run: RemoteRun, after: int, idle: float | None, detach_grace: float | None
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        await self._tell(run, AttachFollower(owner=run.owner, run=run.run_id))
        durable = self.runtime.checkpoints is not None and run.epoch is not None
        try:
            async with aclosing(
                self.cluster.follow(run, after, idle=idle, durable=durable)
            ) as batches:
                async for batch in batches:
                    yield batch
        finally:
            detach = DetachFollower(owner=run.owner, run=run.run_id, grace=detach_grace)
            await asyncio.shield(self._tell(run, detach))

    async def _tell(self, run: RemoteRun, command: RunCommand) -> None:
        """Fire-and-forget: a lost attach/detach only changes when an orphan is cancelled."""
        try:
            await self.cluster.tell(run, command)
        except Exception:
            logger.warning("could not tell replica %s about a follower", run.replica)

    def get_run(self, principal: Principal, run_id: str) -> Run:
        """A live or retained run the caller started, in this process, for a resource the
        caller may act for (a member of a shared principal sees only her resources' runs).

        Raises:
            NotFoundError: unknown, expired, or someone else's (404, alike).
        """
        return self._visible(principal, self.runtime.get_run(principal.id, run_id))

    def _visible(self, principal: Principal, run: _SomeRun) -> _SomeRun:
        """``run`` if ``principal`` may act for its resource; else missing, exactly alike."""
        if not self.authenticator.can_access(principal, run.resource_id):
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
        return run

    async def find_run(self, principal: Principal, run_id: str) -> FollowedRun:
        """The caller's run here, or on another replica (through the shared record).

        Raises:
            NotFoundError: unknown, expired, or someone else's (404, alike).
        """
        try:
            run = self.runtime.get_run(principal.id, run_id)
        except NotFoundError:
            remote = await self.cluster.find(principal.id, run_id)
            if remote is None:
                return await self._revive(principal, run_id)
            if self.runtime.checkpoints is not None and not remote.ended and (
                await self.cluster.lost(remote)
            ):
                # Its replica stopped: a durable run goes on here (others stay lost).
                with contextlib.suppress(NotFoundError):
                    return await self._revive(principal, run_id)
            return self._visible(principal, remote)
        return self._visible(principal, run)

    async def resume(
        self, principal: Principal, run_id: str, cursor: str | int | None
    ) -> tuple[FollowedRun, Cursor]:
        """The run to resume and where to continue from.

        ``cursor`` is the last event id the client has (``Last-Event-ID``, ``?after=`` or an
        N-PAMP resume cursor); ``None`` replays from the start. A durable run's SSE ids
        carry what the client has open (``protocol.event_ids``); an id of an earlier epoch
        than the run's (its previous holder's) is caught up when followed.

        Raises:
            NotFoundError: no such run for this caller.
            InputError: the cursor is not an event id of this run (``INVALID_CURSOR``).
            GoneError: events after the cursor are no longer retained (``EVENTS_NOT_RETAINED``).
            TooManyRequests: the run has as many followers as it may (``TOO_MANY_FOLLOWERS``).
        """
        run = await self.find_run(principal, run_id)
        if isinstance(cursor, str):
            try:
                parsed = parse_cursor(cursor)
            except ValueError:
                raise _bad_cursor() from None
        else:
            parsed = Cursor(cursor or 0, OpenState() if not cursor else None)
        epoch = _epoch(run)
        if parsed.epoch > epoch:
            raise _bad_cursor()
        if isinstance(run, RemoteRun):
            if not run.ended:
                await self._room_elsewhere(run)
        else:
            self.runtime.room_for_follower(run)
        if parsed.epoch == epoch:
            _check_position(run, parsed.seq)
        return run, parsed

    async def _room_elsewhere(self, run: RemoteRun) -> None:
        """The owner counts a live run's followers on every replica (``TOO_MANY_FOLLOWERS``);
        an owner that does not answer has no followers to protect (the run ends lost)."""
        try:
            answer = await self.cluster.ask(RoomForFollower(owner=run.owner, run=run.run_id))
        except ServiceUnavailable:
            return
        if answer is not None:
            answer.unwrap()

    async def cancel_run(self, principal: Principal, run_id: str) -> bool:
        """Stop the caller's run (wherever it runs); ``False`` if it had already ended.

        Raises:
            NotFoundError: no such run for this caller.
        """
        try:
            run = self.get_run(principal, run_id)
        except NotFoundError:
            answer = await self._ask_owner(
                CancelRun(owner=principal.id, run=run_id, resources=_resources(principal))
            )
            if answer is None:
                run = await self._revive(principal, run_id)
                return self.runtime.cancel(run)
            return bool(answer.unwrap())
        return self.runtime.cancel(run)

    async def _ask_owner(self, command: RunCommand) -> Answer | None:
        """``cluster.ask``, and ``None`` (continue it here) also when the run's replica
        stopped or let the run go while the store holds a checkpoint of it.

        Raises:
            ServiceUnavailable: the owner does not answer (and there is no checkpoint).
        """
        try:
            answer = await self.cluster.ask(command)
        except ServiceUnavailable as exc:
            if exc.code == "RUN_OWNER_UNAVAILABLE" and await self._stored(command):
                return None
            raise
        if answer is not None:
            try:
                answer.unwrap()
            except NotFoundError as exc:
                if exc.code == "RUN_NOT_FOUND" and await self._stored(command):
                    return None  # suspended there: the store's now
        return answer

    async def _stored(self, command: RunCommand) -> bool:
        store = self.runtime.checkpoints
        return store is not None and (
            await store.load_checkpoint(command.owner, command.run) is not None
        )

    async def submit_tool_result(
        self, principal: Principal, run_id: str, tool_call_id: str, body: Body
    ) -> None:
        """Deliver a frontend tool's result (the result route's body) to the caller's live
        run, wherever it runs.

        Raises:
            InputError: not a result body (``protocol.tool_results.parse_tool_result``).
            NotFoundError: unknown run or call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        result = parse_tool_result(body, self.settings.max_json_depth)
        if result.parts is not None:
            check_result_media(result.parts, self._media_limits())
        try:
            run = self.get_run(principal, run_id)
        except NotFoundError:
            command = SubmitToolResult(
                owner=principal.id, run=run_id, call=tool_call_id, result=result,
                resources=_resources(principal),
            )
            recorded = await self._record_forwarded(principal, run_id, tool_call_id, result)
            answer = await self._ask_owner(command)
            if answer is None:
                await self._submit_to_stored_run(principal, run_id, tool_call_id, result,
                                                 recorded=recorded)
                return
            answer.unwrap()
            return
        if run.durable and not run.done:
            await self.runtime.submit_durable_result(run, tool_call_id, result)
            return
        self.runtime.submit_tool_result(run, tool_call_id, result)

    async def _record_forwarded(
        self, principal: Principal, run_id: str, tool_call_id: str, result: ToolResult
    ) -> bool:
        """A result for a durable run another replica holds is stored here before it is
        forwarded: if that replica is lost before the run's next point, the process that
        continues the run finds it (a posted result is never asked for again). False: not
        a durable run of another replica.

        Raises:
            ConflictError: the call already has a result.
        """
        store = self.runtime.checkpoints
        if store is None:
            return False
        remote = await self.cluster.find(principal.id, run_id)
        if remote is None or remote.epoch is None or remote.ended:
            return False
        self._visible(principal, remote)
        if not await store.record_tool_result(
            principal.id, run_id, tool_call_id, result.content, result.is_error
        ):
            raise ConflictError(
                "this tool call already has a result", code="TOOL_RESULT_ALREADY_SUBMITTED"
            )
        return True

    @_store_route
    async def _submit_to_stored_run(
        self, principal: Principal, run_id: str, tool_call_id: str, result: ToolResult,
        *, recorded: bool = False,
    ) -> None:
        """A result for a run no process holds: the run is continued here (admitted like
        any run), then the result is stored once (a second post is refused) and delivered.

        Raises:
            NotFoundError: no such run for this caller, or no such call waiting in it.
            ConflictError: the call already has a result.
            TooManyRequests: over the active-run limits (nothing stored: the post may be
                sent again).
        """
        checkpoint = await self._stored_run(principal, run_id)
        if tool_call_id in checkpoint.results and not recorded:
            raise ConflictError(
                "this tool call already has a result", code="TOOL_RESULT_ALREADY_SUBMITTED"
            )
        if tool_call_id not in {c["id"] for c in checkpoint.point.get("pending", [])}:
            raise NotFoundError("unknown tool call for this run", code="TOOL_CALL_NOT_FOUND")
        run = await self._continue(checkpoint)
        if not recorded:  # else the continued run found it stored
            await self.runtime.submit_durable_result(run, tool_call_id, result)

    def _media_limits(self) -> MediaLimits:
        return MediaLimits(max_part_bytes=self.settings.max_media_part_bytes,
                           max_message_bytes=self.settings.max_media_message_bytes)

    # -- agents -------------------------------------------------------------------------

    def list_agents(self) -> list[dict[str, Any]]:
        """Discovery data: available agents in registration order, then unavailable ones."""
        return [self._as_served(data) for data in self.catalog.describe_all()]

    def describe_agent(self, agent_id: object) -> dict[str, Any]:
        """One agent's discovery data, by id or alias, available or not.

        Raises:
            InputError: not a valid id.
            NotFoundError: no such agent (``AGENT_NOT_FOUND``).
        """
        return self._as_served(self.catalog.describe(validate_id(agent_id, "agentId")))

    def _as_served(self, data: dict[str, Any]) -> dict[str, Any]:
        """An agent's discovery data as this deployment runs it: without checkpoints (the
        memory store, ``durable_runs = false``) no run survives its process."""
        capabilities = data.get("capabilities") or {}
        custom = capabilities.get("custom")
        if self.runtime.checkpoints is not None or not isinstance(custom, dict) or not custom.get(
            "durableExecution"
        ):
            return data
        custom = {**custom, "durableExecution": False}
        return {**data, "capabilities": {**capabilities, "custom": custom}}

    # -- threads ------------------------------------------------------------------------

    @_store_route
    async def create_thread(
        self, principal: Principal, body: Body, *, resource: str | None = None
    ) -> Thread:
        """Create an empty thread from ``POST /threads``'s body, owned by its ``resourceId``
        (else ``resource``, else the caller's); its id is generated when the body has none.

        Raises:
            InputError: a bad body (``protocol.thread_bodies.parse_thread_create``).
            NotFoundError: a foreign resource or an unknown agent.
            ConflictError: the id is taken (``THREAD_EXISTS``).
        """
        request = parse_thread_create(body, self.settings.max_json_depth)
        resource_id = self.authenticator.resolve_resource(
            principal, request.resourceId or resource
        )
        agent_id = request.agentId
        if agent_id is not None:
            canonical = self.catalog.canonical(agent_id)
            if canonical is None:
                raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
            agent_id = canonical
        return await self.store.create_thread(
            request.id if request.id is not None else str(uuid.uuid4()),
            resource_id=resource_id,
            agent_id=agent_id,
            title=request.title or "",
            metadata=request.metadata or {},
        )

    @_store_route
    async def list_threads(
        self,
        principal: Principal,
        *,
        resource: str | None = None,
        agent_id: str | None = None,
        limit: int,
        cursor: str | None = None,
    ) -> tuple[list[Thread], str | None]:
        """A page of the caller's threads (of ``resource`` when given) and the next cursor.

        ``agent_id`` may be an alias (threads store the canonical id); an unknown id still
        filters (it may be a removed agent's).
        """
        scope = self.authenticator.list_scope(principal, resource)
        if agent_id is not None:
            agent_id = self.catalog.canonical(agent_id) or agent_id
        await _settled(self.runtime.start_writes_of(scope), self.settings.store_timeout_seconds)
        return await self.store.list_threads(scope, agent_id=agent_id, limit=limit, cursor=cursor)

    @_store_route
    async def get_thread(
        self, principal: Principal, thread_id: str, resource: str | None = None
    ) -> Thread:
        """The thread, if the caller may see it (and it belongs to ``resource`` when given).

        Raises:
            NotFoundError: missing, or another resource's (``THREAD_NOT_FOUND``, alike).
        """
        validate_id(thread_id, "threadId")
        if resource is not None:
            validate_id(resource, "resourceId")
        await self._start_written(principal, thread_id, resource)
        thread = await self.store.get_thread(thread_id)
        if (
            thread is None
            or not self.authenticator.can_access(principal, thread.resource_id)
            or (resource is not None and thread.resource_id != resource)
        ):
            raise _thread_not_found(thread_id)
        return thread

    async def _start_written(
        self, principal: Principal, thread_id: str, resource: str | None
    ) -> None:
        """Wait for the start writes of this process's live runs on ``thread_id`` that the
        caller may see (of ``resource`` when given).

        A run's start write (a new thread, the run's input messages) is begun before
        RUN_STARTED and not awaited: a client that saw RUN_STARTED and reads the thread at
        once finds it and its messages (and ``list_threads`` lists it). Another resource's
        run is not waited for.
        """
        writes = [
            write for owner, write in self.runtime.start_writes(thread_id).items()
            if self.authenticator.can_access(principal, owner)
            and (resource is None or owner == resource)
        ]
        await _settled(writes, self.settings.store_timeout_seconds)

    @_store_route
    async def update_thread(
        self, principal: Principal, thread_id: str, body: Body, *, resource: str | None = None
    ) -> Thread:
        """Replace the caller's thread's title and/or metadata, and/or switch its current
        branch (``PATCH``'s body).

        Raises:
            InputError: a bad body (``protocol.thread_bodies.parse_thread_update``).
            NotFoundError: missing, or another resource's thread; an unknown branch.
            ConflictError: a branch switch while a run holds the thread (``THREAD_BUSY``).
        """
        patch = parse_thread_update(body, self.settings.max_json_depth)
        thread = await self.get_thread(principal, thread_id, resource)
        if patch.currentBranch is not None:
            await self._switch_branch(thread, patch.currentBranch)
        if patch.title is None and patch.metadata is None:
            return await self.get_thread(principal, thread_id, resource)
        return await self.store.update_thread(
            thread_id, title=patch.title, metadata=patch.metadata
        )

    async def _switch_branch(self, thread: Thread, branch_id: str) -> None:
        """Make ``branch_id`` the thread's current branch, unless a run holds the thread
        (here or on another replica): its messages would land on the wrong branch."""
        if await self.cluster.thread_busy(thread.resource_id, thread.id) or (
            self.runtime.admission.holder((thread.resource_id, thread.id)) is not None
        ):
            raise thread_busy()
        if not await self.store.switch_branch(thread.id, branch_id):
            raise _branch_not_found(branch_id)

    @_store_route
    async def list_branches(
        self, principal: Principal, thread_id: str, resource: str | None = None
    ) -> list[Branch]:
        """The caller's thread's branches, oldest first.

        Raises:
            NotFoundError: missing, or another resource's thread.
        """
        await self.get_thread(principal, thread_id, resource)
        return await self.store.list_branches(thread_id)

    @_store_route
    async def delete_thread(
        self, principal: Principal, thread_id: str, resource: str | None = None
    ) -> None:
        """Delete the caller's thread and its messages."""
        await self.get_thread(principal, thread_id, resource)
        if not await self.store.delete_thread(thread_id):
            raise _thread_not_found(thread_id)

    @_store_route
    async def list_messages(
        self,
        principal: Principal,
        thread_id: str,
        *,
        resource: str | None = None,
        limit: int | None = None,
        before: str | None = None,
        format: str | None = None,
        branch: str | None = None,
    ) -> MessagePage:
        """The caller's thread's latest ``limit`` messages before ``before``, oldest first,
        in ``format`` (``mastra`` or ``agui``; default ``settings.messages_format``), and the
        cursor of older ones (``None``: no more).

        A page never starts with tool results whose call is on the previous page: it grows
        back to the assistant message that made the calls (up to ``MAX_MESSAGES_PAGE``).
        ``branch``: one of the thread's branches (default: the current one).

        Raises:
            InputError: an unknown format.
            NotFoundError: missing, or another resource's thread; an unknown branch
                (``BRANCH_NOT_FOUND``).
        """
        chosen = format or self.settings.messages_format
        if chosen not in MESSAGE_FORMATS:
            raise InputError("format must be 'mastra' or 'agui'", code="INVALID_REQUEST")
        thread = await self.get_thread(principal, thread_id, resource)
        if branch is not None and branch != (thread.current_branch or MAIN_BRANCH):
            rows, next_cursor = await self._branch_page(thread_id, branch, limit, before)
        else:
            rows, next_cursor = await self._page(thread_id, limit, before)
        if chosen == "agui":
            return MessagePage([row.message for row in rows], next_cursor)
        timed = [(row.message, format_timestamp(row.created_at)) for row in rows]
        messages = to_mastra(timed, thread_id=thread.id, resource_id=thread.resource_id)
        return MessagePage(messages, next_cursor)

    async def _branch_page(
        self, thread_id: str, branch: str, limit: int | None, before: str | None
    ) -> tuple[list[StoredMessage], str | None]:
        """A page of an earlier branch (kept whole in its record), cut as ``_page`` cuts."""
        validate_id(branch, "branch")
        rows = await self.store.branch_messages(thread_id, branch)
        if rows is None:
            raise _branch_not_found(branch)
        end = len(rows)
        if before is not None:
            end = next((i for i, r in enumerate(rows) if r.message["id"] == before), -1)
            if end < 0:
                raise InputError(f"no message {before!r} in this branch", code="INVALID_CURSOR")
        if limit is None:
            return rows[:end], None
        start = max(0, end - limit)
        while start > 0 and end - start < MAX_MESSAGES_PAGE and (
            rows[start].message.get("role") == "tool"
        ):
            start -= 1
        return rows[start:end], rows[start].message["id"] if start > 0 else None

    async def _page(
        self, thread_id: str, limit: int | None, before: str | None
    ) -> tuple[list[StoredMessage], str | None]:
        """A page of the thread's messages (its current branch); see ``list_messages``."""
        store = self.store
        rows = await store.list_stored_messages(thread_id, limit=limit, before=before)
        next_cursor = None
        if limit is not None and rows:
            while rows[0].message.get("role") == "tool" and len(rows) < MAX_MESSAGES_PAGE:
                older = await store.list_stored_messages(
                    thread_id, limit=min(limit, MAX_MESSAGES_PAGE - len(rows)),
                    before=rows[0].message["id"],
                )
                if not older:
                    break
                start = len(older) - 1
                while start > 0 and older[start].message.get("role") == "tool":
                    start -= 1
                rows = older[start:] + rows
            first = rows[0].message["id"]
            if await store.list_stored_messages(thread_id, limit=1, before=first):
                next_cursor = first
        return rows, next_cursor


@dataclass(frozen=True, slots=True)
class MessagePage:
    """One page of a thread's messages, in the format asked for."""

    messages: list[dict[str, Any]]
    #: The cursor of the page before (older messages); ``None`` on the first page.
    next_cursor: str | None


class EventSink(Protocol):
    """A transport's end of :meth:`Backend.follow`: it encodes and writes what it is given
    (SSE frames, N-PAMP BRIDGE_STREAM_DATA, the chunks of an opaque reply), nothing more."""

    async def send(
        self, events: list[tuple[int, bytes]], *, last: bool, tags: list[bytes] | None = None
    ) -> bool:
        """Write ready events, ``(event id, event bytes)`` in order; ``last``: they end with
        the run's terminal event, so the stream ends in the same write; ``tags``: a durable
        run's open state after each event, for the SSE ``id`` (``protocol.event_ids``; other
        transports carry the number alone). False: the consumer no longer takes the stream
        (following stops; nothing more is written)."""
        ...

    async def keep_alive(self) -> None:
        """Nothing new for ``idle`` seconds (called only when following with ``idle``)."""
        ...

    async def queued(self) -> None:
        """The run waits for the runs ahead of it on its thread: called when following
        starts and, with ``idle``, after each quiet period until it starts (default: as
        ``keep_alive``)."""
        await self.keep_alive()

    async def end(self) -> None:
        """The run ended after a batch not known to hold its terminal event (a run another
        replica drives, whose shared log ended): end the stream."""
        ...

    async def cut_off(self, error: EventsNotRetained) -> None:
        """The consumer fell behind the run's replay window: end the stream without its
        terminal event (a resume from where it stopped answers 410)."""
        ...


class RunAliases:
    """A transport's own names for runs (N-PAMP correlation ids), per principal and
    resources, shared with the other replicas so a client may come back on any of them. On
    one process nothing is shared: the transport's own map is all there is."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @staticmethod
    def scope(principal: Principal) -> str:
        """Whose names these are: the principal *and* its resources, so a member of a shared
        principal neither finds another resource's alias nor replaces it."""
        allowed = principal.resource_ids
        return orjson.dumps([principal.id, None if allowed is None else sorted(allowed)]).decode()

    async def remember(self, principal: Principal, alias: bytes, run_id: str) -> None:
        """Share ``alias`` → ``run_id`` (for as long as finished runs are retained)."""
        await self._backend.cluster.remember_alias(self.scope(principal), alias, run_id)

    async def recall(self, principal: Principal, alias: bytes) -> str | None:
        """The runId another replica shared under ``alias`` (``None``: none)."""
        return await self._backend.cluster.recall_alias(self.scope(principal), alias)


class _Leg:
    """One follower's way through a run that may change hands: the run followed now,
    the cursor it goes on from, and the last id (and open state) sent."""

    def __init__(self, run: FollowedRun, cursor: Cursor) -> None:
        self.run = run
        self.cursor = cursor
        self.epoch = _epoch(run)
        self.number = cursor.number
        self.tag = b"" if cursor.state is None else _tag(cursor.state)
        self.ended = False

    def sent(self, number: int, tag: bytes) -> None:
        self.number, self.tag = number, tag

    def follow(self, run: FollowedRun, *, keep_cursor: bool = False) -> None:
        """Go on with ``run`` (another holder) from what was sent."""
        self.run = run
        if not keep_cursor:
            state = OpenState.decode(self.tag[1:].decode("ascii")) if self.tag else OpenState()
            self.cursor = Cursor(self.number, state)


def _tag(state: OpenState) -> bytes:
    encoded = state.encode()
    return b"~" + encoded if encoded else b""


def _epoch(run: FollowedRun) -> int:
    """The run's takeover epoch (its events' ids: ``protocol.event_ids``)."""
    if isinstance(run, RemoteRun):
        return run.epoch or 0
    return run.ids.epoch if run.ids is not None else 0


def _check_position(run: FollowedRun, after: int) -> None:
    """A cursor of the run's own epoch must be an event it has (the mirror may lag what a
    client saw on the owner: a live run waits for it).

    Raises:
        InputError: beyond the run's events (``INVALID_CURSOR``).
        EventsNotRetained: before the retained ones.
    """
    if isinstance(run, RemoteRun):
        first, last = run.first_seq, run.last_seq
        if after < 0 or (after > last and run.ended):
            raise _bad_cursor()
    else:
        first, last = run.log.first_seq, run.log.last_seq
        if not 0 <= after <= last:
            raise _bad_cursor()
    if after < first - 1:
        raise EventsNotRetained(first)


#: Looks for a run of another replica that is concluding (its checkpoint dropped with its end
#: write, its terminal event not yet in the shared log), and the pause between them.
_CONCLUDING_POLLS = 20
_CONCLUDING_POLL_SECONDS = 0.1
#: How a terminal event's bytes begin (``encode_event`` writes ``type`` first).
_TERMINAL_PREFIXES = (b'{"type":"RUN_FINISHED"', b'{"type":"RUN_ERROR"')


def _ends(run: FollowedRun, seq: int) -> bool:
    """Whether the batch ending at ``seq`` ends the run: a transport then closes its stream
    in the same write (the end of the chunked body, N-PAMP's END). A run another replica
    drives is not known to have ended until its shared log says so."""
    if isinstance(run, RemoteRun):
        return False
    log = run.log
    return log.closed and seq == log.last_seq


async def _settled(writes: list[asyncio.Future[None]], timeout: float) -> None:
    """Wait for runs' start writes, never cancelling them (their runs settle them), at most
    ``timeout`` seconds like every store call; a thread read then sees what they stored."""
    if writes:
        await asyncio.wait(writes, timeout=timeout)


def _resources(principal: Principal) -> list[str] | None:
    """What a command for another replica's run says the caller may act for."""
    allowed = principal.resource_ids
    return None if allowed is None else sorted(allowed)


def _bad_cursor() -> InputError:
    return InputError("Last-Event-ID must be an event id of this run", code="INVALID_CURSOR")


def _branch_not_found(branch_id: str) -> NotFoundError:
    return NotFoundError(f"branch {branch_id!r} not found", code="BRANCH_NOT_FOUND")


def _thread_not_found(thread_id: str) -> NotFoundError:
    return NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
