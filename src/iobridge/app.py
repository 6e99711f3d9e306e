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
import gc
import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from typing import Any

import orjson

from iobridge.agents.base import Agent
from iobridge.agents.catalog import AgentCatalog
from iobridge.agents.catalog import build_catalog as make_catalog
from iobridge.agents.context import ToolResult
from iobridge.auth import Authenticator, Principal
from iobridge.config import Settings
from iobridge.errors import (
    ConflictError,
    GoneError,
    InputError,
    IobridgeError,
    NotFoundError,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
)
from iobridge.observability.metrics import Metrics
from iobridge.protocol.options import ToolResultMode, parse_run_options
from iobridge.protocol.run_input import OFF_LOOP_BYTES, RunInput, parse_run_input
from iobridge.runtime.cluster import Cluster, Command, LocalCluster, RemoteRun
from iobridge.runtime.engine import Runtime, RuntimeSettings
from iobridge.runtime.run import Run
from iobridge.runtime.thread_memory import StoreMemory
from iobridge.store.base import StoredMessage, Thread, ThreadStore, validate_id
from iobridge.store.migrate import open_store

__all__ = ["Backend", "FollowedRun", "build_catalog"]

#: What ``resume`` hands a transport: a run of this process, or one another replica drives.
FollowedRun = Run | RemoteRun
#: Errors a forwarded command may answer with, by HTTP status (the same classes re-raised).
_FORWARDED_ERRORS: dict[int, type[IobridgeError]] = {
    400: InputError, 404: NotFoundError, 409: ConflictError, 410: GoneError
}

logger = logging.getLogger("iobridge")

#: A resume cursor is a run-log sequence number: ASCII digits, at most this many.
MAX_CURSOR_DIGITS = 19
#: Seconds the readiness check waits for the store.
READY_TIMEOUT = 2.0
#: Most messages one page of ``list_messages`` holds (a page grows to keep tool calls whole).
MAX_MESSAGES_PAGE = 1000


async def parse_run_input_off_loop(
    body: bytes | str | dict[str, Any], max_messages: int
) -> RunInput:
    """``parse_run_input``, in a worker thread for bodies over ``OFF_LOOP_BYTES``.

    Validating a few MiB of messages takes tens to hundreds of milliseconds of CPU; in a
    thread the loop keeps serving other requests (it regains the GIL every switch interval).
    """
    if isinstance(body, dict) or len(body) <= OFF_LOOP_BYTES:
        return parse_run_input(body, max_messages=max_messages)
    return await asyncio.to_thread(parse_run_input, body, max_messages=max_messages)


_startup_frozen = False

#: Collector thresholds while serving: a young generation of 20,000 objects instead of 700.
#: A server allocates in bursts of short-lived objects (a request, a run); with the default,
#: collections ran every few requests and, with 10,000 runs open, their teardown cost 4.2 s
#: of CPU instead of 1.6 s (``bench/idle_runs.py``).
SERVING_GC_THRESHOLDS = (20_000, 20, 100)


def freeze_startup_objects() -> None:
    """Tune the cycle collector for serving, once per process.

    What the process built at startup (modules, the app, agents, models) lives as long as
    the process: it is moved out of the collector's view, or every full collection under
    load walks it again (tens of milliseconds each, seen in ``bench/load_runs.py``); and
    the thresholds become :data:`SERVING_GC_THRESHOLDS`. Only the first backend of a
    process does it (a process that opens many, like a test run, pays the collection once).
    """
    global _startup_frozen
    if not _startup_frozen:
        _startup_frozen = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(*SERVING_GC_THRESHOLDS)


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
        self.runtime = Runtime(
            settings=RuntimeSettings(
                tool_timeout=self.settings.tool_timeout,
                retention_seconds=self.settings.retention_seconds,
                max_retained_runs=self.settings.max_retained_runs,
                detach_grace_seconds=self.settings.detach_grace_seconds,
                tool_result_mode=self.settings.tool_result_mode,
                pre_1_0_outcomes=self.settings.pre_1_0_outcomes,
                max_retained_bytes=self.settings.max_retained_bytes,
                max_run_log_bytes=self.settings.max_run_log_bytes,
                max_active_runs=self.settings.max_active_runs,
                max_active_runs_per_owner=self.settings.max_active_runs_per_principal,
                max_state_bytes=self.settings.max_state_bytes,
            ),
            metrics=self.metrics,
        )
        #: Runs of other replicas and shared busy marks (``redis_url``); else one process.
        self.cluster: Cluster = LocalCluster()
        self._tracer_provider = tracer_provider
        #: False once shutdown began: new runs answer 503.
        self.admitting = True
        self._given_store = store
        self._store: ThreadStore | None = store
        self._stack: AsyncExitStack | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Backend:
        """Open the store (migrating it) and turn thread memory on."""
        stack = AsyncExitStack()
        try:
            if self._given_store is None:
                self._store = await open_store(self.settings.database_url)
                stack.push_async_callback(self._store.close)
            self.runtime.memory = StoreMemory(self.store, self.metrics)
            if self.settings.redis_url is not None:
                from iobridge.cluster.redis import RedisCluster

                self.cluster = RedisCluster(self.settings)
                stack.push_async_callback(self._close_cluster)
                await self.cluster.open(self._command)
                self.runtime.cluster = self.cluster
            if self.settings.tracing.enabled or self._tracer_provider is not None:
                from iobridge.observability.tracing import open_tracer

                self.runtime.tracer = await stack.enter_async_context(
                    open_tracer(self.settings.tracing, self._tracer_provider)
                )
            # Runs stop (and store what they produced) before the store closes.
            stack.push_async_callback(self.runtime.aclose)
            janitor = asyncio.create_task(self._expire_retained(), name="iobridge-retention")
            stack.callback(janitor.cancel)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        freeze_startup_objects()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop live runs, then close the store if this backend opened it."""
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
        await self.runtime.drain(self.settings.drain_seconds)
        await self.runtime.aclose()

    async def readiness_problem(self) -> str | None:
        """Why the backend cannot serve now (``None``: it can)."""
        if not self.admitting:
            return "shutting down"
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
            PayloadTooLarge: ``state`` over ``max_state_bytes`` (413 ``STATE_TOO_LARGE``).
            NotFoundError: an unknown agent, a foreign resource or thread (404).
            ConflictError: the runId is running, or the thread is busy (409).
            TooManyRequests: over the active-run limits (429 ``TOO_MANY_RUNS``).
            ServiceUnavailable: the server is shutting down (503).
        """
        if not self.admitting:
            raise ServiceUnavailable(
                "the server is shutting down", code="SERVER_SHUTTING_DOWN", retry_after=5.0
            )
        run_input = await parse_run_input_off_loop(body, self.settings.max_messages)
        if (
            run_input.state is not None
            and len(orjson.dumps(run_input.state)) > self.settings.max_state_bytes
        ):
            raise PayloadTooLarge(
                f"state is larger than {self.settings.max_state_bytes} bytes",
                code="STATE_TOO_LARGE",
            )
        options = parse_run_options(run_input.forwarded_props)
        resource_id = self.authenticator.resolve_resource(principal, options.resource_id)
        agent = self.catalog.get(options.agent_id)
        return await self.runtime.start(
            run_input,
            options,
            agent,
            owner=principal.id,
            resource_id=resource_id,
            tool_result_mode=tool_result_mode,
        )

    async def follow(
        self,
        run: FollowedRun,
        after: int = 0,
        *,
        idle: float | None = None,
        detach_grace: float | None = None,
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        """The run's log after ``after``, in batches, until the run ends.

        The caller counts as a follower while it iterates; when it stops (or is cancelled)
        and no follower is left, the run is cancelled after ``detach_grace`` seconds (default
        ``settings.detach_grace_seconds``). With ``idle`` set, an empty batch is yielded after
        that many quiet seconds (a keep-alive). Close it with ``contextlib.aclosing``.
        A run another replica drives is followed through the shared log; its owner counts
        the follower the same way.
        """
        # Each inner generator is closed here, not left to the loop's finalizer hook (a task
        # per run to close it, once the garbage collector finds it).
        if isinstance(run, RemoteRun):
            async with aclosing(self._follow_remote(run, after, idle, detach_grace)) as remote:
                async for batch in remote:
                    yield batch
            return
        self.runtime.attach(run)
        try:
            async with aclosing(run.log.follow(after, idle=idle)) as batches:
                async for batch in batches:
                    yield batch
        finally:
            self.runtime.detach(run, grace=detach_grace)

    @staticmethod
    def ends_run(run: FollowedRun, seq: int) -> bool:
        """Whether the batch ending at ``seq`` ends the run: a transport then closes its
        stream in the same write (the end of the chunked body, N-PAMP's END). A run another
        replica drives is not known to have ended until its shared log says so."""
        if isinstance(run, RemoteRun):
            return False
        log = run.log
        return log.closed and seq == log.last_seq

    async def _follow_remote(
        self, run: RemoteRun, after: int, idle: float | None, detach_grace: float | None
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        await self._tell(run, {"op": "attach"})
        try:
            async with aclosing(self.cluster.follow(run, after, idle=idle)) as batches:
                async for batch in batches:
                    yield batch
        finally:
            await asyncio.shield(self._tell(run, {"op": "detach", "grace": detach_grace}))

    async def _tell(self, run: RemoteRun, command: Command) -> None:
        """Fire-and-forget: a lost attach/detach only changes when an orphan is cancelled."""
        try:
            await self.cluster.forward(run, self._addressed(run, command), reply=False)
        except Exception:
            logger.warning("could not tell replica %s about a follower", run.replica)

    async def _elsewhere(
        self, principal: Principal, run_id: str, command: Command
    ) -> Command | None:
        """The answer of the replica running the caller's run (``None``: none has it)."""
        return await self.cluster.command(
            principal.id, run_id, {**command, "owner": principal.id, "run": run_id})

    @staticmethod
    def _addressed(run: RemoteRun, command: Command) -> Command:
        return {**command, "owner": run.owner, "run": run.run_id}

    def get_run(self, principal: Principal, run_id: str) -> Run:
        """A live or retained run the caller started, in this process.

        Raises:
            NotFoundError: unknown, expired, or someone else's (404, alike).
        """
        return self.runtime.get_run(principal.id, run_id)

    async def find_run(self, principal: Principal, run_id: str) -> FollowedRun:
        """The caller's run here, or on another replica (through the shared record).

        Raises:
            NotFoundError: unknown, expired, or someone else's (404, alike).
        """
        try:
            return self.runtime.get_run(principal.id, run_id)
        except NotFoundError:
            remote = await self.cluster.find(principal.id, run_id)
            if remote is None:
                raise
            return remote

    async def resume(
        self, principal: Principal, run_id: str, cursor: str | int | None
    ) -> tuple[FollowedRun, int]:
        """The run to resume and the sequence number to continue after.

        ``cursor`` is the last event id the client has (``Last-Event-ID``, ``?after=`` or an
        N-PAMP resume cursor); ``None`` replays from the start.

        Raises:
            NotFoundError: no such run for this caller.
            InputError: the cursor is not an event id of this run (``INVALID_CURSOR``).
            GoneError: events after the cursor are no longer retained (``EVENTS_NOT_RETAINED``).
            TooManyRequests: the run has as many followers as it may (``TOO_MANY_FOLLOWERS``).
        """
        run = await self.find_run(principal, run_id)
        if isinstance(cursor, str):
            if not cursor.isascii() or not cursor.isdigit() or len(cursor) > MAX_CURSOR_DIGITS:
                raise _bad_cursor()
            cursor = int(cursor)
        after = cursor or 0
        if isinstance(run, RemoteRun):
            first, last = run.first_seq, run.last_seq
            # The mirror may lag what the client saw on the owner: a live run waits for it.
            if after < 0 or (after > last and run.ended):
                raise _bad_cursor()
        else:
            first, last = run.log.first_seq, run.log.last_seq
            if not 0 <= after <= last:
                raise _bad_cursor()
            if run.subscribers >= self.settings.max_followers_per_run:
                raise TooManyRequests(
                    "this run has too many followers", code="TOO_MANY_FOLLOWERS"
                )
        if after < first - 1:
            raise GoneError(
                f"events before {first} are no longer retained", code="EVENTS_NOT_RETAINED"
            )
        return run, after

    async def cancel_run(self, principal: Principal, run_id: str) -> bool:
        """Stop the caller's run (wherever it runs); ``False`` if it had already ended.

        Raises:
            NotFoundError: no such run for this caller.
        """
        try:
            run = self.runtime.get_run(principal.id, run_id)
        except NotFoundError:
            answer = await self._elsewhere(principal, run_id, {"op": "cancel"})
            if answer is None:
                raise
            return bool(_answer(answer))
        return self.runtime.cancel(run)

    async def submit_tool_result(
        self, principal: Principal, run_id: str, tool_call_id: str, result: ToolResult
    ) -> None:
        """Deliver a frontend tool's result to the caller's live run (wherever it runs).

        Raises:
            NotFoundError: unknown run or call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        try:
            run = self.runtime.get_run(principal.id, run_id)
        except NotFoundError:
            command = {"op": "result", "call": tool_call_id, "content": result.content,
                       "value": result.value, "isError": result.is_error}
            answer = await self._elsewhere(principal, run_id, command)
            if answer is None:
                raise
            _answer(answer)
            return
        self.runtime.submit_tool_result(run, tool_call_id, result)

    async def remember_stream(self, principal: Principal, key: bytes, run: Run) -> None:
        """Share an N-PAMP stream's id with the other replicas (no-op on one process)."""
        await self.cluster.remember_stream(principal.id, key, run.run_id)

    async def recall_stream(self, principal: Principal, key: bytes) -> str | None:
        """The runId behind a stream another replica started (``None``: not shared)."""
        return await self.cluster.recall_stream(principal.id, key)

    async def _command(self, command: Command) -> Command:
        """Act for another replica on one of this process's runs; errors become answers."""
        try:
            run = self.runtime.get_run(str(command["owner"]), str(command["run"]))
            op = command["op"]
            if op == "cancel":
                return {"value": self.runtime.cancel(run)}
            if op == "result":
                result = ToolResult(content=str(command["content"]), value=command["value"],
                                    is_error=bool(command["isError"]))
                self.runtime.submit_tool_result(run, str(command["call"]), result)
            elif op == "attach":
                self.runtime.attach(run)
            elif op == "detach":
                grace = command.get("grace")
                self.runtime.detach(run, grace=None if grace is None else float(grace))
            return {"value": None}
        except IobridgeError as exc:
            return {"error": {"status": exc.status, "code": exc.code, "message": exc.message}}

    # -- agents -------------------------------------------------------------------------

    def list_agents(self) -> list[dict[str, Any]]:
        """Discovery data: available agents in registration order, then unavailable ones."""
        return self.catalog.describe_all()

    def describe_agent(self, agent_id: object) -> dict[str, Any]:
        """One agent's discovery data, by id or alias, available or not.

        Raises:
            InputError: not a valid id.
            NotFoundError: no such agent (``AGENT_NOT_FOUND``).
        """
        return self.catalog.describe(validate_id(agent_id, "agentId"))

    # -- threads ------------------------------------------------------------------------

    async def create_thread(
        self,
        principal: Principal,
        *,
        thread_id: str,
        resource: object = None,
        agent_id: str | None = None,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Create an empty thread owned by ``resource`` (default: the caller's).

        Raises:
            NotFoundError: a foreign resource or an unknown agent.
            ConflictError: the id is taken (``THREAD_EXISTS``).
        """
        resource_id = self.authenticator.resolve_resource(principal, resource)
        if agent_id is not None:
            canonical = self.catalog.canonical(agent_id)
            if canonical is None:
                raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
            agent_id = canonical
        return await self.store.create_thread(
            thread_id, resource_id=resource_id, agent_id=agent_id, title=title, metadata=metadata
        )

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
        return await self.store.list_threads(scope, agent_id=agent_id, limit=limit, cursor=cursor)

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
        thread = await self.store.get_thread(thread_id)
        if (
            thread is None
            or not self.authenticator.can_access(principal, thread.resource_id)
            or (resource is not None and thread.resource_id != resource)
        ):
            raise _thread_not_found(thread_id)
        return thread

    async def update_thread(
        self,
        principal: Principal,
        thread_id: str,
        *,
        resource: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Replace the caller's thread's title and/or metadata."""
        await self.get_thread(principal, thread_id, resource)
        return await self.store.update_thread(thread_id, title=title, metadata=metadata)

    async def delete_thread(
        self, principal: Principal, thread_id: str, resource: str | None = None
    ) -> None:
        """Delete the caller's thread and its messages."""
        await self.get_thread(principal, thread_id, resource)
        if not await self.store.delete_thread(thread_id):
            raise _thread_not_found(thread_id)

    async def list_messages(
        self,
        principal: Principal,
        thread_id: str,
        *,
        resource: str | None = None,
        limit: int | None = None,
        before: str | None = None,
    ) -> tuple[Thread, list[StoredMessage], str | None]:
        """The caller's thread, its latest ``limit`` messages before ``before`` (oldest
        first, each with its append time) and the cursor of older ones (``None``: no more).

        A page never starts with tool results whose call is on the previous page: it grows
        back to the assistant message that made the calls (up to ``MAX_MESSAGES_PAGE``).
        """
        thread = await self.get_thread(principal, thread_id, resource)
        store = self.store
        rows = await store.list_stored_messages(thread_id, limit=limit, before=before)
        if limit is None or not rows:
            return thread, rows, None
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
        more = await store.list_stored_messages(thread_id, limit=1, before=first)
        return thread, rows, first if more else None


def _answer(answer: Command) -> Any:
    """The value of a forwarded command's answer, or its error raised as it was raised."""
    error = answer.get("error")
    if error is None:
        return answer.get("value")
    cls = _FORWARDED_ERRORS.get(int(error["status"]), IobridgeError)
    raise cls(str(error["message"]), code=str(error["code"]))


def _bad_cursor() -> InputError:
    return InputError("Last-Event-ID must be an event id of this run", code="INVALID_CURSOR")


def _thread_not_found(thread_id: str) -> NotFoundError:
    return NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
