"""The run engine: one place that starts, drives, cancels and retains runs.

The application core (:mod:`iobridge.app`) calls only this: ``start`` a run (after which
transports follow ``run.log``), ``get_run``, ``submit_tool_result``, ``cancel``, ``attach``
and ``detach``. Agents, tools, pending frontend calls and persistence live behind it, so a
feature that works over SSE works over N-PAMP by construction.

Runs are keyed by ``(owner, runId)``; a thread is busy per ``(resourceId, threadId)`` from
the moment a run is admitted until what it produced is stored. Admission is bounded (runs in
total and per owner), and so is what finished runs keep for resume (count, age and bytes).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iobridge.agents.context import Interrupted, Resume, RunContext, ToolResult
from iobridge.errors import (
    AgentError,
    ConflictError,
    NotFoundError,
    ServiceUnavailable,
    TooManyRequests,
)
from iobridge.observability.logs import current_run
from iobridge.observability.metrics import EngineSample, Metrics
from iobridge.protocol import events as ev
from iobridge.protocol.guard import DEFAULT_MAX_STATE_BYTES
from iobridge.protocol.messages import model_view
from iobridge.runtime.cluster import Coordinator, LocalCluster
from iobridge.runtime.pending import PendingRegistry
from iobridge.runtime.run import Run, RunKey
from iobridge.runtime.runlog import RunLog
from iobridge.runtime.session import RunEnded, Session
from iobridge.runtime.tools import ToolDispatch
from iobridge.store.base import is_outage

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.observability.tracing import RunTracer
    from iobridge.protocol.options import RunOptions, ToolResultMode
    from iobridge.protocol.run_input import RunInput
    from iobridge.runtime.thread_memory import RunMemory, ThreadMemory

logger = logging.getLogger("iobridge.runtime")

#: Outputs an agent may produce before the engine yields to the event loop.
YIELD_EVERY = 32
#: Seconds a client is asked to wait (``Retry-After``) when the store does not answer.
STORE_RETRY_AFTER = 5.0


@dataclass(kw_only=True)
class RuntimeSettings:
    """Knobs of the run engine."""

    #: Seconds a frontend tool call waits for its result before the agent sees an error.
    tool_timeout: float = 300.0
    #: Seconds a finished run's log stays available (resume, late duplicate posts).
    retention_seconds: float = 300.0
    #: Most finished runs retained at once (oldest dropped first).
    max_retained_runs: int = 1000
    #: Seconds a run survives with no follower before it is cancelled (0: at once).
    detach_grace_seconds: float = 0.0
    #: Default frontend tool mode: ``in-run`` (the io protocol) or ``next-run`` (plain AG-UI).
    tool_result_mode: ToolResultMode = "in-run"
    #: Requests without ``protocolVersion`` get AG-UI 0.x outcome shapes (``Settings``).
    pre_1_0_outcomes: bool = False
    #: Bytes of finished runs' logs kept for resume (oldest finished dropped first).
    max_retained_bytes: int = 256 * 1024 * 1024
    #: Bytes of events one run keeps for replay (older ones answer "no longer retained").
    max_run_log_bytes: int = 32 * 1024 * 1024
    #: Runs producing events at once, in total and per owner (principal).
    max_active_runs: int = 2000
    max_active_runs_per_owner: int = 500
    #: Largest shared state (JSON bytes) a run may build.
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES

#: Why a run was stopped -> what its stored, unanswered frontend calls say.
_UNANSWERED = {
    "cancelled": "the run was cancelled before the client answered",
    "disconnected": "the client disconnected before answering",
    "shutdown": "the server shut down before the client answered",
}


class Runtime:
    """Starts and tracks runs; see the module docstring.

    Args:
        settings: The engine's knobs.
        memory: Thread persistence; ``None`` makes the engine stateless (the model sees
            exactly the request's messages).
        cluster: Claims runIds and threads across replicas and shares run logs
            (default: one process, nothing shared).
        metrics: Where runs, tool calls and live figures are counted (default: its own).
    """

    def __init__(
        self,
        *,
        settings: RuntimeSettings | None = None,
        memory: ThreadMemory | None = None,
        cluster: Coordinator | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings or RuntimeSettings()
        self.memory = memory
        self.cluster: Coordinator = cluster or LocalCluster()
        self.metrics = metrics or Metrics()
        #: Makes run and tool-call spans; set by the Backend while tracing is on.
        self.tracer: RunTracer | None = None
        self.pending = PendingRegistry()
        self._runs: dict[RunKey, Run] = {}
        self._retained: OrderedDict[RunKey, float] = OrderedDict()
        self._retained_bytes = 0
        self._busy_threads: set[tuple[str, str]] = set()
        self._detach_timers: dict[RunKey, asyncio.TimerHandle] = {}
        #: Admitted runs (starting or live) per owner, and in total.
        self._active: dict[str, int] = {}
        self._active_total = 0
        #: Runs between admission and their first event (their thread is being read).
        self._starting: set[RunKey] = set()
        #: Events of concluded runs per agent (live runs' are read from their logs).
        self._events: dict[str, int] = {}
        self.metrics.watch(self._sample)

    # -- starting ----------------------------------------------------------------------

    async def start(
        self,
        run_input: RunInput,
        options: RunOptions,
        agent: Agent,
        *,
        owner: str,
        resource_id: str,
        tool_result_mode: ToolResultMode | None = None,
    ) -> Run:
        """Start the run; its events appear in ``run.log``.

        ``tool_result_mode`` is the transport's default frontend-tool mode (N-PAMP: results
        come in the next run); ``forwardedProps.toolResultMode`` and the agent's own win.

        Raises:
            TooManyRequests: an admission limit is reached (``TOO_MANY_RUNS``).
            ServiceUnavailable: the thread store does not answer (``STORE_UNAVAILABLE``).
            NotFoundError: a thread of another resource.
            ConflictError: the runId is already running, or the thread is busy.
        """
        self._admit(owner)
        admitted = time.perf_counter()
        key: RunKey = (owner, run_input.run_id)
        mode = (
            options.tool_result_mode
            or agent.tool_result_mode
            or tool_result_mode
            or self.settings.tool_result_mode
        )
        existing = self._runs.get(key)
        if key in self._starting or (existing is not None and not existing.done):
            raise ConflictError("a run with this runId is running", code="RUN_ALREADY_RUNNING")
        thread = (resource_id, run_input.thread_id)
        if thread in self._busy_threads:
            raise ConflictError("another run is active on this thread", code="THREAD_BUSY")
        # Admitted: the run counts against the limits from here, while its thread is read.
        self._busy_threads.add(thread)
        self._starting.add(key)
        self._count(owner, +1)
        claimed = False
        try:
            await self.cluster.claim(owner, run_input.run_id, resource_id, run_input.thread_id)
            claimed = True
            memory = (
                await self.memory.begin(run_input, options, resource_id, agent)
                if self.memory is not None
                else None
            )
        except BaseException as exc:
            self._busy_threads.discard(thread)
            self._count(owner, -1)
            if claimed:
                await self.cluster.abandon(
                    owner, run_input.run_id, resource_id, run_input.thread_id
                )
            if isinstance(exc, Exception) and is_outage(exc):
                logger.error("run %s: the thread store does not answer (%s: %s)",
                             run_input.run_id, type(exc).__name__, exc)
                raise ServiceUnavailable(
                    "the thread store does not answer", code="STORE_UNAVAILABLE",
                    retry_after=STORE_RETRY_AFTER,
                ) from exc
            raise
        finally:
            self._starting.discard(key)
        history = (
            memory.history
            if memory is not None
            else [dict(m) for m in model_view(run_input.messages)]
        )
        # The client's state wins; without one the run continues from the thread's.
        state = run_input.state
        state_from_thread = state is None and memory is not None and memory.state is not None
        if state_from_thread and memory is not None:
            state = memory.state
        # Stateless: nothing to check the answers against; they are taken as sent.
        resume = memory.resume if memory is not None else run_input.resume
        answered = memory.answered if memory is not None else run_input.resume
        if existing is not None:
            self._forget(key)
        log = RunLog(max_bytes=self.settings.max_run_log_bytes)
        run = Run(
            run_id=run_input.run_id,
            thread_id=run_input.thread_id,
            owner=owner,
            resource_id=resource_id,
            agent_id=agent.id,
            options=options,
            log=log,
        )
        session = Session(
            log, run_input.thread_id, run_input.run_id, parent_run_id=run_input.parent_run_id,
            state=state, max_state_bytes=self.settings.max_state_bytes,
            pre_1_0=self.settings.pre_1_0_outcomes and "protocolVersion" not in run_input.raw,
        )
        session.usage = run.usage
        dispatch = ToolDispatch(
            session,
            agent,
            [t["name"] for t in run_input.tools],
            pending=self.pending,
            run=key,
            tool_timeout=self.settings.tool_timeout,
            defer_frontend=mode == "next-run",
            metrics=self.metrics,
            tracer=self.tracer,
        )
        ctx = RunContext(
            thread_id=run.thread_id,
            run_id=run.run_id,
            messages=history,
            frontend_tools=run_input.tools,
            context=run_input.context,
            options=options,
            state=state,
            resource_id=resource_id,
            session=dispatch,
            resume=[Resume.from_wire(e) for e in resume],
            answered=[Resume.from_wire(e) for e in answered],
            usage=session.usage,
        )
        self._runs[key] = run
        session.start()
        self.cluster.started(run)
        started = time.perf_counter()
        self.metrics.run_started(agent.id, started - admitted)
        # RUN_STARTED is in the log: the new messages are written while the agent works.
        loop = asyncio.get_running_loop()
        context = _run_context(run)
        # Begun, not awaited: queued for the store's next commit (or done at once in memory).
        saved = context.run(memory.save_start) if memory is not None else None
        run.task = loop.create_task(
            self._drive(run, agent, session, ctx, memory, saved, started, state_from_thread),
            name=f"run-{run.run_id}",
            context=context,
        )
        return run

    def _count(self, owner: str, delta: int) -> None:
        active = self._active.get(owner, 0) + delta
        if active:
            self._active[owner] = active
        else:
            self._active.pop(owner, None)
        self._active_total += delta

    def _admit(self, owner: str) -> None:
        settings = self.settings
        if self._active_total >= settings.max_active_runs:
            raise TooManyRequests(
                "the server is running as many runs as it may", code="TOO_MANY_RUNS"
            )
        if self._active.get(owner, 0) >= settings.max_active_runs_per_owner:
            raise TooManyRequests("too many runs at once for this caller", code="TOO_MANY_RUNS")

    async def _drive(
        self,
        run: Run,
        agent: Agent,
        session: Session,
        ctx: RunContext,
        memory: RunMemory | None,
        saved: asyncio.Future[None] | None,
        started: float,
        state_from_thread: bool = False,
    ) -> None:
        tracer = self.tracer
        if tracer is None:
            await self._drive_run(
                run, agent, session, ctx, memory, saved, started, state_from_thread
            )
            return
        with tracer.run(
            thread_id=run.thread_id,
            run_id=run.run_id,
            agent_id=run.agent_id,
            resource_id=run.resource_id,
        ) as finish:
            try:
                await self._drive_run(
                    run, agent, session, ctx, memory, saved, started, state_from_thread
                )
            finally:
                finish(session.outcome)

    async def _drive_run(
        self,
        run: Run,
        agent: Agent,
        session: Session,
        ctx: RunContext,
        memory: RunMemory | None,
        saved: asyncio.Future[None] | None,
        started: float,
        state_from_thread: bool,
    ) -> None:
        try:
            # ``messagesSnapshot`` (thread memory reads the thread; stateless: no thread).
            if memory is not None and memory.snapshot is not None:
                session.push(ev.messages_snapshot(memory.snapshot))
            if state_from_thread:
                # The client did not send the state the run starts from: show it first, so
                # the agent's deltas apply on the client too.
                session.push(ev.state_snapshot(ctx.state))
            if memory is not None and memory.hydrate_only:
                session.finish()
            else:
                await self._produce(run, agent, session, ctx)
        finally:
            await self._conclude(run, session, memory, saved, started)

    async def _produce(self, run: Run, agent: Agent, session: Session, ctx: RunContext) -> None:
        try:
            agen = agent.run(ctx)
            try:
                produced = 0
                async for output in agen:
                    session.emit(output)
                    produced += 1
                    if produced % YIELD_EVERY == 0:
                        # An agent that never awaits would hold the loop for the whole
                        # run: let followers send what is ready (time to first event).
                        await asyncio.sleep(0)
            finally:
                aclose = getattr(agen, "aclose", None)
                if aclose is not None:
                    await aclose()
            session.finish()
        except RunEnded:
            pass
        except Interrupted as exc:
            call_id = exc.interrupt.get("toolCallId")
            if isinstance(call_id, str):
                # The call the interrupt asks about is answered by the resumed run, not here.
                session.deferred_calls.append(call_id)
            session.finish(outcome={"type": "interrupt", "interrupts": [exc.interrupt]})
        except asyncio.CancelledError:
            # A client gone with no follower left is how AG-UI frontends stop a run (they
            # abort the request): cancelled like the cancel route, what was produced kept.
            if run.stop_reason in ("cancelled", "disconnected"):
                session.finish(outcome={"type": "cancelled"})
            elif run.stop_reason == "shutdown":
                session.fail("The server is shutting down.", "SERVER_SHUTDOWN")
            else:
                session.fail("The run was stopped.", "RUN_CANCELLED")
        except AgentError as exc:
            session.fail(exc.message, exc.code)
        except Exception:
            logger.exception("agent %s failed in run %s", agent.id, run.run_id)
            session.fail("The agent failed unexpectedly.", "AGENT_ERROR")

    async def _conclude(
        self,
        run: Run,
        session: Session,
        memory: RunMemory | None,
        saved: asyncio.Future[None] | None,
        started: float,
    ) -> None:
        """Store what the run produced, free the thread, then release the terminal event.

        The thread stays busy until the final write has committed or definitively failed,
        even if the run's task is cancelled meanwhile: otherwise the next run could start on a
        thread whose last run is not stored yet, and the history would interleave.
        """
        if not session.guard.ended:
            session.fail("The run ended without a terminal event.", "AGENT_ERROR")
        self.pending.cancel_run(run.key)
        timer = self._detach_timers.pop(run.key, None)
        if timer is not None:
            timer.cancel()
        cancelled = False
        try:
            if memory is not None:
                if saved is not None:
                    cancelled = await _settle(saved)
                    _log_failure(saved, run)
                self._close_unanswered(run, session)
                write = memory.save_end(
                    session.transcript.messages,
                    finished=session.succeeded,
                    failed=session.failed,
                    raised=session.interrupts,
                    state=session.guard.shared_state,
                )
                if write is not None:
                    cancelled = await _settle(write) or cancelled
                    _log_failure(write, run)
        finally:
            self._busy_threads.discard((run.resource_id, run.thread_id))
            self._count(run.owner, -1)
            if self.cluster.distributed:  # the shared busy mark goes before the terminal
                cancelled = await _settle(asyncio.ensure_future(self.cluster.release(run))) or (
                    cancelled
                )
            session.release_terminal()
            self._retain(run)
            self._events[run.agent_id] = self._events.get(run.agent_id, 0) + run.log.last_seq
            self.metrics.run_finished(
                run.agent_id, session.outcome, session.error_code, time.perf_counter() - started
            )
        if cancelled:
            raise asyncio.CancelledError()

    def _close_unanswered(self, run: Run, session: Session) -> None:
        """Give each frontend call the client never answered an error result, for storage."""
        transcript = session.transcript
        deferred = set(session.deferred_calls)  # next-run calls: answered by the next run
        reason = _UNANSWERED.get(run.stop_reason or "", "the run ended before the client answered")
        for call_id in transcript.unanswered_calls():
            if call_id not in deferred:
                transcript.add_error_result(session.new_id(), call_id, reason)

    # -- retention ---------------------------------------------------------------------

    def _retain(self, run: Run) -> None:
        now = time.monotonic()
        self._retained[run.key] = now
        self._retained_bytes += run.log.nbytes
        self._expire(now)

    def expire(self) -> None:
        """Drop finished runs past the retention bounds (also run on a timer)."""
        self._expire(time.monotonic())

    def _expire(self, now: float) -> None:
        settings = self.settings
        horizon = now - settings.retention_seconds
        while self._retained:
            key, finished = next(iter(self._retained.items()))
            if (
                len(self._retained) <= settings.max_retained_runs
                and finished > horizon
                and self._retained_bytes <= settings.max_retained_bytes
            ):
                break
            self._forget(key)

    def _forget(self, key: RunKey) -> None:
        if self._retained.pop(key, None) is not None:
            run = self._runs.get(key)
            if run is not None:
                self._retained_bytes -= run.log.nbytes
        run = self._runs.pop(key, None)
        self.pending.forget_run(key)
        if run is not None:
            self.cluster.forgotten(run)

    # -- lookups and actions -------------------------------------------------------------

    def get_run(self, owner: str, run_id: str) -> Run:
        """A live or retained run of ``owner``.

        Raises:
            NotFoundError: unknown, expired, or started by someone else.
        """
        self._expire(time.monotonic())
        run = self._runs.get((owner, run_id))
        if run is None:
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
        return run

    def submit_tool_result(self, run: Run, tool_call_id: str, result: ToolResult) -> None:
        """Deliver a frontend tool's result to its waiting run.

        Raises:
            NotFoundError: unknown call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        self.pending.resolve(run.key, tool_call_id, result)

    def cancel(self, run: Run, reason: str = "cancelled") -> bool:
        """Stop a running run (agent task and pending tools). False if it already ended."""
        if run.done or run.task is None:
            return False
        run.stop_reason = run.stop_reason or reason
        run.task.cancel()
        return True

    def attach(self, run: Run) -> None:
        """A transport starts following the run."""
        run.subscribers += 1
        timer = self._detach_timers.pop(run.key, None)
        if timer is not None:
            timer.cancel()

    def detach(self, run: Run, *, grace: float | None = None) -> None:
        """A follower went away; with none left, cancel after the grace period.

        ``grace`` overrides ``settings.detach_grace_seconds`` (a transport whose clients
        resume, like N-PAMP, keeps runs alive longer than one whose clients do not).
        """
        run.subscribers = max(0, run.subscribers - 1)
        if run.subscribers or run.done:
            return
        if grace is None:
            grace = self.settings.detach_grace_seconds
        if grace <= 0:
            self.cancel(run, "disconnected")
            return
        loop = asyncio.get_running_loop()
        self._detach_timers[run.key] = loop.call_later(
            grace, lambda: self.cancel(run, "disconnected") if not run.subscribers else None
        )

    async def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` for live runs to end by themselves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            tasks = self._live_tasks()
            remaining = deadline - loop.time()
            if not tasks or remaining <= 0:
                return
            await asyncio.wait(tasks, timeout=remaining)

    async def aclose(self) -> None:
        """End every live run with RUN_ERROR ``SERVER_SHUTDOWN``, stored, and wait for them."""
        tasks = self._live_tasks()
        for run in list(self._runs.values()):
            self.cancel(run, "shutdown")
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _live_tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]

    def _sample(self) -> EngineSample:
        events = dict(self._events)
        for run in self._runs.values():
            if not run.done:
                events[run.agent_id] = events.get(run.agent_id, 0) + run.log.last_seq
        return EngineSample(
            active_runs=self._active_total,
            retained_runs=len(self._retained),
            pending_tool_calls=len(self.pending),
            events=events,
        )

    @property
    def active_runs(self) -> int:
        """Admitted runs not yet concluded (starting or producing events)."""
        return self._active_total

    @property
    def retained_runs(self) -> int:
        """Finished runs kept for resume."""
        return len(self._retained)


def _run_context(run: Run) -> contextvars.Context:
    """A context for one of the run's tasks: its log records carry the run's ids."""
    context = contextvars.copy_context()
    context.run(current_run.set, (run.thread_id, run.run_id))
    return context


def _log_failure(write: asyncio.Future[None], run: Run) -> None:
    if not write.cancelled() and write.exception() is not None:
        logger.error(
            "could not store the messages of run %s", run.run_id, exc_info=write.exception()
        )


async def _settle(task: asyncio.Future[Any]) -> bool:
    """Wait until ``task`` is done, even through cancellation; True if we were cancelled."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break  # the task failed; its exception is read by the caller
    return cancelled
