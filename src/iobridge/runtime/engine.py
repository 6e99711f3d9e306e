"""The run engine: one place that starts, tracks, cancels and retains runs.

The application core (:mod:`iobridge.app`) calls only this: ``start`` a run (after which
transports follow ``run.log``), ``get_run``, ``submit_tool_result``, ``cancel``, ``attach``,
``detach`` and ``act`` (a command another replica sent about one of this process's runs).
Agents, tools, pending frontend calls and persistence live behind it, so a feature that works
over SSE works over N-PAMP by construction. Each run's life from admission to release is one
:class:`~iobridge.runtime.execution.Execution`; the engine holds what runs share.

Runs are keyed by ``(owner, runId)``; a thread is busy per ``(resourceId, threadId)`` from
the moment a run is admitted until what it produced is stored (``runtime.admission``).
Admission is bounded (runs in total and per owner), and so is what finished runs keep for
resume (count, age and bytes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from iobridge.config import Settings
from iobridge.errors import ConflictError, IobridgeError, NotFoundError, TooManyRequests
from iobridge.observability.metrics import EngineSample, Metrics
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.admission import Admission, StopRequest, Ticket
from iobridge.runtime.cluster import Coordinator, LocalCluster
from iobridge.runtime.execution import Execution
from iobridge.runtime.pending import PendingRegistry
from iobridge.runtime.replica_messages import (
    Answer,
    AttachFollower,
    CancelRun,
    DetachFollower,
    RoomForFollower,
    RunCommand,
    StopRun,
    SubmitToolResult,
    TakeOver,
)
from iobridge.runtime.revival import Revival, UnknownFormat
from iobridge.runtime.run import Run, RunKey
from iobridge.runtime.tasks import cancel_and_wait

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.observability.tracing import RunTracer
    from iobridge.protocol.options import RunOptions, ToolResultMode
    from iobridge.protocol.run_input import RunInput
    from iobridge.runtime.thread_memory import ThreadMemory
    from iobridge.store.base import Checkpoint, ThreadStore


logger = logging.getLogger("iobridge.runtime")

#: Seconds the readiness check answers 503 after a run's end write failed, unless another
#: succeeds first; then traffic is let back in, and a failing store turns it 503 again.
WRITE_FAILURE_HOLD = 10.0
#: Seconds between cancellations of a run that goes on after shutdown cancelled it.
RUN_RESEND_SECONDS = 0.5


class Runtime:
    """Starts and tracks runs; see the module docstring.

    Args:
        settings: Its limits, timeouts and retention bounds (default: ``Settings()``).
        memory: Thread persistence; ``None`` makes the engine stateless (the model sees
            exactly the request's messages).
        cluster: Claims runIds and threads across replicas and shares run logs
            (default: one process, nothing shared).
        metrics: Where runs, tool calls and live figures are counted (default: its own).
    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        memory: ThreadMemory | None = None,
        cluster: Coordinator | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.memory = memory
        self.cluster: Coordinator = cluster or LocalCluster()
        self.metrics = metrics or Metrics()
        #: Makes run and tool-call spans; set by the Backend while tracing is on.
        self.tracer: RunTracer | None = None
        #: Where durable runs keep their checkpoints (set by the Backend over a SQL store
        #: with ``durable_runs``); ``None``: runs die with their process.
        self.checkpoints: ThreadStore | None = None
        #: This process's name in the checkpoints it holds (the replica id with Redis).
        self.holder = ""
        #: Whether runs of other processes may be continued here (not once shutting down).
        self.accepting = True
        #: Take-overs under way (their tasks, kept until done).
        self._taking: set[asyncio.Task[Run | None]] = set()
        #: Runs being continued from a checkpoint here (concurrent callers share one).
        self._reviving: dict[RunKey, asyncio.Task[Run]] = {}
        #: Finds the catalog agents runs call as subagents; set by the Backend.
        self.find_agent: Callable[[str], Agent] | None = None
        self.pending = PendingRegistry()
        self._runs: dict[RunKey, Run] = {}
        self._retained: OrderedDict[RunKey, float] = OrderedDict()
        self._retained_bytes = 0
        #: Which runs may start, and what the admitted ones hold until released.
        self.admission = Admission(self.settings, stop=self._stop_holder)
        self._detach_timers: dict[RunKey, asyncio.TimerHandle] = {}
        #: Events of concluded runs per agent (live runs' are read from their logs).
        self._events: dict[str, int] = {}
        #: When a run's end write last failed (monotonic), until one succeeds again.
        self._write_failed_at: float | None = None
        #: Start writes begun and not settled, by thread id, then resource (one per live run).
        self._start_writes: dict[str, dict[str, asyncio.Future[None]]] = {}
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
        caller: str | None = None,
    ) -> Run:
        """Start the run (:meth:`Execution.start`); its events appear in ``run.log``.

        ``tool_result_mode`` is the transport's default frontend-tool mode (N-PAMP: results
        come in the next run); ``forwardedProps.toolResultMode`` and the agent's own win.
        ``caller``: whom the run counts against per caller (default: ``owner``).
        """
        execution = Execution(
            self, run_input, options, agent, owner=owner, resource_id=resource_id,
            tool_result_mode=tool_result_mode, caller=caller,
        )
        return await execution.start()

    async def revive(
        self, checkpoint: Checkpoint, agent: Agent, *, caller: str | None = None
    ) -> Run:
        """Continue a run another process checkpointed (:meth:`Execution.revive`), counted
        against ``caller`` (default: its owner); callers asking for the same run at once
        share one revival.

        Raises:
            ConflictError: another process took it over first, or its thread is busy.
            NotFoundError: it concluded already.
        """
        key = (checkpoint.owner, checkpoint.run_id)
        run = self._runs.get(key)
        if run is not None and not run.done:
            return run
        task = self._reviving.get(key)
        if task is None:
            execution = Revival(self, checkpoint, agent, caller=caller)
            task = self._reviving[key] = asyncio.ensure_future(execution.revive())
            task.add_done_callback(lambda _: self._reviving.pop(key, None))
        return await asyncio.shield(task)

    def take_over_soon(self, owner: str, run_id: str, caller: str | None = None) -> None:
        """Begin ``take_over`` (not waited for)."""
        task = asyncio.get_running_loop().create_task(
            self.take_over(owner, run_id, caller), name=f"take-over-{run_id}"
        )
        self._taking.add(task)
        task.add_done_callback(self._taking.discard)

    async def take_over(self, owner: str, run_id: str, caller: str | None = None) -> Run | None:
        """Continue a run no process holds, from its checkpoint (a drained replica handed it
        over, or its replica was lost); ``None`` if it is not to be continued here (no
        checkpoint, another process won it, this one is shutting down). Never raises."""
        store, find_agent = self.checkpoints, self.find_agent
        if store is None or find_agent is None or not self.accepting:
            return None
        try:
            checkpoint = await store.load_checkpoint(owner, run_id)
            if checkpoint is None:
                return None
            return await self.revive(checkpoint, find_agent(checkpoint.agent_id), caller=caller)
        except (IobridgeError, UnknownFormat) as exc:
            logger.info("run %s not taken over here (%s)", run_id, exc)
        except Exception as exc:
            logger.warning("run %s could not be taken over (%s: %s)",
                           run_id, type(exc).__name__, exc)
        return None

    async def submit_durable_result(
        self, run: Run, tool_call_id: str, result: ToolResult
    ) -> None:
        """``submit_tool_result`` for a durable run: the result is stored first, so a run
        continued elsewhere never asks for it again (a second post is refused).

        Raises:
            NotFoundError: unknown call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        self.pending.check(run.key, tool_call_id)
        store = self.checkpoints
        assert store is not None
        run.results_posted = True
        if not await store.record_tool_result(
            run.owner, run.run_id, tool_call_id, result.content, result.is_error
        ):
            raise ConflictError(
                "this tool call already has a result", code="TOOL_RESULT_ALREADY_SUBMITTED"
            )
        self.pending.resolve(run.key, tool_call_id, result)

    # -- the registry, as executions use it ---------------------------------------------

    def is_live(self, key: RunKey) -> bool:
        """Whether a run with this key has begun and not ended."""
        run = self._runs.get(key)
        return run is not None and not run.done

    def register(self, run: Run) -> None:
        """A run begins: it replaces a finished run with the same key, if one is retained."""
        if run.key in self._runs:
            self._forget(run.key)
        self._runs[run.key] = run

    def writing_start(self, run: Run, write: asyncio.Future[None]) -> None:
        """The run's start write (its thread, when new, and its messages) is begun, not
        awaited, before its events flow: thread reads wait for it (``start_writes``)."""
        writes = self._start_writes.setdefault(run.thread_id, {})
        writes[run.resource_id] = write

        def settled(_: object) -> None:
            if writes.get(run.resource_id) is write:
                del writes[run.resource_id]
                if not writes and self._start_writes.get(run.thread_id) is writes:
                    del self._start_writes[run.thread_id]

        write.add_done_callback(settled)

    def start_writes(self, thread_id: str) -> dict[str, asyncio.Future[None]]:
        """The unsettled start writes of live runs on ``thread_id``, by resource."""
        return self._start_writes.get(thread_id, {})

    def start_writes_of(self, resources: frozenset[str]) -> list[asyncio.Future[None]]:
        """The unsettled start writes of live runs on threads of ``resources`` (a walk over
        the live runs' writes: at most ``max_active_runs``)."""
        return [write for writes in self._start_writes.values()
                for resource, write in writes.items() if resource in resources]

    def ending(self, run: Run) -> None:
        """The run's agent is done: no pending call or detach timer outlives it."""
        self.pending.cancel_run(run.key)
        timer = self._detach_timers.pop(run.key, None)
        if timer is not None:
            timer.cancel()

    def let_go(self, run: Run) -> None:
        """The run was suspended here (it goes on in another process): not retained."""
        if self._runs.get(run.key) is run:
            self._forget(run.key)

    def retire(self, run: Run) -> None:
        """The run is over (stored, released): keep it for resume within the bounds."""
        self._events[run.agent_id] = self._events.get(run.agent_id, 0) + run.log.last_seq
        self._retain(run)

    def store_written(self, stored: bool) -> None:
        """A run's end write settled: ``stored`` or failed (the readiness check reads it)."""
        self._write_failed_at = None if stored else time.monotonic()

    def writes_failing(self) -> bool:
        """Whether the last run's end write failed within ``WRITE_FAILURE_HOLD`` seconds
        (held, then probed again by traffic: recovery needs no restart)."""
        failed = self._write_failed_at
        if failed is not None and time.monotonic() - failed >= WRITE_FAILURE_HOLD:
            self._write_failed_at = failed = None
        return failed is not None

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

    def find(self, owner: str, run_id: str) -> Run | None:
        """``get_run``, ``None`` for a run this process does not have."""
        return self._runs.get((owner, run_id))

    def submit_tool_result(self, run: Run, tool_call_id: str, result: ToolResult) -> None:
        """Deliver a frontend tool's result to its waiting run.

        Raises:
            NotFoundError: unknown call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        self.pending.resolve(run.key, tool_call_id, result)

    def act(self, command: RunCommand) -> Answer:
        """Act for another replica on one of this process's runs; errors become answers."""
        if isinstance(command, TakeOver):
            self.take_over_soon(command.owner, command.run, command.caller)
            return Answer()
        if isinstance(command, StopRun):
            return Answer(value=self.stop_run(
                (command.owner, command.run), "rollback" if command.rollback else "interrupt"
            ))
        try:
            run = self.get_run(command.owner, command.run)
            if command.resources is not None and run.resource_id not in command.resources:
                raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
            match command:
                case CancelRun():
                    return Answer(value=self.cancel(run))
                case SubmitToolResult(call=call, result=result):
                    self.submit_tool_result(run, call, result)
                case RoomForFollower():
                    self.room_for_follower(run)
                case AttachFollower():
                    self.attach(run)
                case DetachFollower(grace=grace):
                    self.detach(run, grace=grace)
        except IobridgeError as exc:
            return Answer.failed(exc)
        return Answer()

    def cancel(self, run: Run, reason: str = "cancelled") -> bool:
        """Stop a running run (agent task and pending tools). False if it already ended."""
        if run.done or run.task is None:
            return False
        run.stop_reason = run.stop_reason or reason
        # Sent after the task's first step (create_task scheduled that one first): a task
        # cancelled before it never enters its coroutine, so the run would never end (no
        # terminal event, its thread and admission slot held for good).
        asyncio.get_running_loop().call_soon(run.task.cancel)
        return True

    def stop_run(self, key: RunKey, request: StopRequest) -> bool:
        """A newer run on its thread stops this one (now, or once it began if it is still
        starting); False if it is neither starting nor running."""
        ticket = self.admission.starting(key)
        if ticket is not None:
            self.admission.stop_holder(ticket, request)
            return True
        run = self._runs.get(key)
        if run is None or run.done:
            return False
        run.rollback = run.rollback or request == "rollback"
        return self.cancel(run)

    def _stop_holder(self, ticket: Ticket, request: StopRequest) -> None:
        """Admission asks a thread's holder to stop: a run that is producing is cancelled
        now (its stream ends ``outcome: cancelled``); one still starting stops once begun."""
        run = self._runs.get(ticket.key)
        if run is None or run.queued or run.done:
            return
        run.rollback = run.rollback or request == "rollback"
        self.cancel(run)

    def room_for_follower(self, run: Run) -> None:
        """Check that one more client may follow ``run`` (its followers here and on other
        replicas: theirs attach here too).

        Raises:
            TooManyRequests: it has ``max_followers_per_run`` (``TOO_MANY_FOLLOWERS``).
        """
        if run.subscribers >= self.settings.max_followers_per_run:
            raise TooManyRequests("this run has too many followers", code="TOO_MANY_FOLLOWERS")

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

    def suspend_durable(self) -> None:
        """Shutdown begins: durable runs parked on frontend calls stop now, the others at
        their next durable point; both go on in the next process (``aclose`` suspends what
        is left). Runs of other processes are no longer taken over here."""
        self.accepting = False
        for run in list(self._runs.values()):
            if not run.durable or run.done:
                continue
            run.suspend_at_point = True
            if self.pending.waiting(run.key):
                self.cancel(run, "suspended")

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
        """End every live run with RUN_ERROR ``SERVER_SHUTDOWN``, stored, and wait for them;
        durable runs are suspended at their last durable point instead."""
        self.accepting = False
        tasks = [*self._live_tasks(), *self._taking]
        for run in list(self._runs.values()):
            self.cancel(run, "suspended" if run.durable else "shutdown")
        # One loop iteration first: a run begun in this one takes its first step and gets the
        # cancellation ``cancel`` sent after it (cancelled before that step, it never ends).
        await asyncio.sleep(0)
        # Cancelled again while they go on (a cancellation can be lost, see runtime.tasks);
        # a run that is storing its end waits for the write through every cancellation.
        await cancel_and_wait(tasks, resend=RUN_RESEND_SECONDS)

    def _live_tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]

    def _sample(self) -> EngineSample:
        events = dict(self._events)
        for run in self._runs.values():
            if not run.done:
                events[run.agent_id] = events.get(run.agent_id, 0) + run.log.last_seq
        return EngineSample(
            active_runs=self.admission.active,
            retained_runs=len(self._retained),
            pending_tool_calls=len(self.pending),
            events=events,
        )

    @property
    def active_runs(self) -> int:
        """Admitted runs not yet concluded (starting or producing events)."""
        return self.admission.active

    @property
    def retained_runs(self) -> int:
        """Finished runs kept for resume."""
        return len(self._retained)

