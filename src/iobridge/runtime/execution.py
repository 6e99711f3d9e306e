"""One run's life, from admission to release: ``Execution``, one object per run.

The steps are methods, in the order they run:

1. ``admit`` — within the limits, its runId and its thread free in this process;
2. ``claim`` — its runId and thread claimed cluster-wide (a no-op on one process);
3. ``read`` — its thread read once: ownership, history, state, open interrupts;
4. ``begin`` — the run's parts built, RUN_STARTED in the log, the write of its new messages
   begun, the task that drives it started;
5. ``drive`` (that task) — what the client is shown of the thread, then ``produce``: the
   agent's outputs through the guard into the log;
6. ``save`` — what it produced stored (with unanswered frontend calls closed); a run whose
   end write fails ends ``RUN_ERROR STORE_UNAVAILABLE`` instead of RUN_FINISHED;
7. ``release`` — its thread and runId freed, its terminal event released, the run retained.

A failure in ``claim`` or ``read`` undoes what the steps before took (``refuse``); from
``begin`` on the run always ends through ``save`` and ``release``, even when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from iobridge.agents.context import Interrupted, Resume, RunContext
from iobridge.agents.outputs import StepFinished
from iobridge.errors import AgentError, IobridgeError, PayloadTooLarge
from iobridge.observability.logs import current_run
from iobridge.protocol import events as ev
from iobridge.protocol.events import encode_event
from iobridge.protocol.messages import model_view
from iobridge.protocol.run_input import RunInput
from iobridge.runtime.agent_session import AgentSession, Lineage
from iobridge.runtime.checkpoints import FORMAT, Checkpointer, CheckpointTooLarge
from iobridge.runtime.replica_messages import TakeOver
from iobridge.runtime.run import Run, RunKey
from iobridge.runtime.run_events import RunEnded, RunEvents
from iobridge.runtime.run_ids import RunIds
from iobridge.runtime.runlog import RunLog
from iobridge.store.base import (
    Checkpoint,
    CheckpointDrop,
    CheckpointSuperseded,
    is_outage,
    outage_refusal,
)

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.protocol.options import MultitaskStrategy, RunOptions, ToolResultMode
    from iobridge.runtime.admission import Ticket
    from iobridge.runtime.cluster import QueuedClaim
    from iobridge.runtime.engine import Runtime
    from iobridge.runtime.pending import PendingToolCall
    from iobridge.runtime.thread_memory import RunMemory

__all__ = ["Execution"]

logger = logging.getLogger("iobridge.runtime")

#: Outputs an agent may produce before the engine yields to the event loop.
YIELD_EVERY = 32
#: Why a run was stopped -> what its stored, unanswered frontend calls say.
_UNANSWERED = {
    "cancelled": "the run was cancelled before the client answered",
    "disconnected": "the client disconnected before answering",
    "shutdown": "the server shut down before the client answered",
}


class _Suspended(Exception):
    """A durable run reached a durable point while its process shuts down: it stops there
    (no terminal event) and goes on in the next process."""


class Execution:
    """One run from admission to release; see the module docstring for its steps.

    Args:
        runtime: The engine the run belongs to (its settings, store, cluster, registry).
        run_input: The validated request.
        options: Its ``forwardedProps``, parsed.
        agent: The agent that answers it.
        owner: The principal that started it (part of its key).
        resource_id: The resource it acts for (its thread's owner).
        tool_result_mode: The transport's default frontend-tool mode;
            ``forwardedProps.toolResultMode`` and the agent's own win.
        caller: Whom the run counts against in ``max_active_runs_per_principal``
            (default: ``owner``).
    """

    def __init__(
        self,
        runtime: Runtime,
        run_input: RunInput,
        options: RunOptions,
        agent: Agent,
        *,
        owner: str,
        resource_id: str,
        tool_result_mode: ToolResultMode | None = None,
        caller: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.input = run_input
        self.options = options
        self.agent = agent
        self.owner = owner
        self.resource_id = resource_id
        self.key: RunKey = (owner, run_input.run_id)
        self.caller = owner if caller is None else caller
        self.mode: ToolResultMode = (
            options.tool_result_mode
            or agent.tool_result_mode
            or tool_result_mode
            or runtime.settings.tool_result_mode
        )
        self.strategy: MultitaskStrategy = (
            options.multitask_strategy
            or agent.multitask_strategy
            or runtime.settings.multitask_strategy
        )
        self.memory: RunMemory | None = None
        self._ticket: Ticket | None = None
        self._saved: asyncio.Future[None] | None = None
        self._claimed = False
        self._admitted = 0.0
        self._started = 0.0
        #: Writes the run's durable points (``None``: the run is not durable).
        self.checkpoints: Checkpointer | None = None
        #: The checkpoint this process continues the run from (``None``: a new run).
        self.revival: Checkpoint | None = None
        #: Times the run was re-executed from a ``running`` point in another process.
        self.takeovers = 0
        #: A durable run's first point written alone (it had no start write to go with).
        self._first_write: asyncio.Future[None] | None = None
        #: The takeover epoch the run is claimed with (a continued run's is above 0).
        self.claim_epoch = 0
        #: Stopped at a durable point (shutdown or takeover): no terminal event here.
        self.suspended = False
        #: Its end write found the run taken over by another process: nothing stored here,
        #: no terminal event (its followers go on with the process that holds it).
        self.taken_over = False

    # -- starting (steps 1-4) -----------------------------------------------------------

    async def start(self) -> Run:
        """Admit, claim, read and begin the run; its events then appear in ``run.log``.

        A run that waits for its thread (``enqueue``, or an interrupt waiting for the run it
        stops) is returned at once, empty and ``queued``: its task waits, then claims, reads
        and begins it; a failure meanwhile ends its log with RUN_ERROR and stores nothing.

        Raises:
            TooManyRequests: an admission limit is reached (``TOO_MANY_RUNS``), or the
                thread's queue is full (``TOO_MANY_QUEUED_RUNS``).
            ConflictError: the runId is already running, or the thread is busy.
            ServiceUnavailable: the thread store does not answer (``STORE_UNAVAILABLE``).
            NotFoundError: a thread of another resource.
            InputError: a ``resume`` that does not answer the thread's open interrupts.
        """
        ticket = self.admit()
        if ticket.turn is not None:
            return self.queue(None)
        try:
            place = await self.claim()
            if place is not None:
                self.runtime.admission.unhold(ticket)
                return self.queue(place)
            await self.read()
            base = self._durable_base()
        except BaseException as exc:
            self.runtime.admission.started(ticket)
            await self.refuse()
            error = _refusal(exc, self.input.run_id)
            if error is exc:
                raise
            raise error from exc
        self.runtime.admission.started(ticket)
        return self.begin(base)

    @property
    def _durable_agent(self) -> bool:
        """Whether the run will be durable (``_durable_base`` may still refuse it)."""
        runtime = self.runtime
        return runtime.checkpoints is not None and self.agent.durable and (
            runtime.memory is not None
        )

    def _durable_base(self) -> bytes | None:
        """The checkpoint's ``base`` when the run is durable (``runtime.checkpoints``, a
        durable agent, thread memory), else ``None``.

        Raises:
            PayloadTooLarge: it exceeds ``max_checkpoint_bytes`` (``CHECKPOINT_TOO_LARGE``).
        """
        runtime, run_input, memory = self.runtime, self.input, self.memory
        if runtime.checkpoints is None or not self.agent.durable or memory is None:
            return None
        base = orjson.dumps({
            "v": FORMAT, "mode": self.mode, "caller": self.caller,
            "memory": memory.durable_view(),
            "input": {
                "tools": run_input.tools, "context": run_input.context,
                "state": run_input.state, "forwardedProps": run_input.forwarded_props,
                "parentRunId": run_input.parent_run_id,
            },
        }, default=str)
        limit = runtime.settings.max_checkpoint_bytes
        if len(base) > limit:
            raise PayloadTooLarge(
                f"the run's checkpoint would be larger than {limit} bytes",
                code="CHECKPOINT_TOO_LARGE",
            )
        return base

    def admit(self) -> Ticket:
        """Step 1: count the run against the limits and mark its thread busy, or queue the
        run for it (nothing is awaited, so two requests cannot both pass)."""
        runtime = self.runtime
        self._ticket = runtime.admission.admit(
            self.key, (self.resource_id, self.input.thread_id), live=runtime.is_live(self.key),
            strategy=self.strategy, shared=runtime.cluster.distributed,
            caller=self.caller,
        )
        self._admitted = time.perf_counter()
        return self._ticket

    async def claim(self) -> QueuedClaim | None:
        """Step 2: claim the runId and the thread across replicas (or queue for it)."""
        place = await self.runtime.cluster.claim(
            self.owner, self.input.run_id, self.resource_id, self.input.thread_id,
            strategy=self.strategy, epoch=self.claim_epoch if self._durable_agent else None,
        )
        if place is None:
            self._claimed = True
            assert self._ticket is not None
            if not self._ticket.holding:
                self.runtime.admission.hold(self._ticket)
        return place

    async def read(self) -> None:
        """Step 3: read the thread (ownership, history, state, interrupts); nothing is
        written yet. Stateless (no thread memory): the request is all there is."""
        memory = self.runtime.memory
        if memory is not None:
            self.memory = await memory.begin(self.input, self.options, self.resource_id,
                                             self.agent)

    async def refuse(self) -> None:
        """Undo what ``admit`` and ``claim`` took: the run does not start."""
        runtime = self.runtime
        assert self._ticket is not None
        runtime.admission.release(self._ticket)
        if self._claimed:
            await runtime.cluster.abandon(
                self.owner, self.input.run_id, self.resource_id, self.input.thread_id
            )

    def queue(self, place: QueuedClaim | None) -> Run:
        """The run waits for its thread (here, or in the cluster's queue at ``place``): its
        record is registered at once (so it can be followed and cancelled), its task waits."""
        self.run = run = self._new_run()
        run.queued = True
        self.runtime.register(run)
        run.task = asyncio.get_running_loop().create_task(
            self._queued(place), name=f"run-{run.run_id}", context=_run_context(run)
        )
        return run

    async def _queued(self, place: QueuedClaim | None) -> None:
        """The task of a queued run: its turn, then the read and the run (or, if it is
        cancelled or refused meanwhile, RUN_ERROR with nothing stored)."""
        runtime, ticket = self.runtime, self._ticket
        assert ticket is not None
        try:
            if place is None:
                await runtime.admission.wait(ticket)
            else:
                await runtime.cluster.wait_claim(place)
                self._claimed = True
                runtime.admission.hold(ticket)
            await self.read()
            base = self._durable_base()
        except BaseException as exc:
            runtime.admission.started(ticket)
            await asyncio.shield(self.refuse())
            self._not_started(exc)
            return
        runtime.admission.started(ticket)
        self.run.queued = False
        self._begin_run(base)
        self._start_write()
        await self.drive()

    def _not_started(self, exc: BaseException) -> None:
        """A queued run ends before it started: RUN_ERROR, the log closed, nothing stored."""
        run = self.run
        if isinstance(exc, asyncio.CancelledError):
            message, code = "The run was cancelled before it started.", "RUN_CANCELLED"
        else:
            error = _refusal(exc, run.run_id)
            if not isinstance(error, IobridgeError):
                logger.error("queued run %s failed to start", run.run_id, exc_info=exc)
                error = AgentError("The run could not start.", code="AGENT_ERROR")
            message, code = error.message, error.code
        run.log.append(encode_event(ev.run_error(message, code)))
        run.log.close()
        run.queued = False
        self.runtime.retire(run)

    def _new_run(self) -> Run:
        runtime, run_input = self.runtime, self.input
        return Run(
            run_id=run_input.run_id, thread_id=run_input.thread_id, owner=self.owner,
            resource_id=self.resource_id, agent_id=self.agent.id, options=self.options,
            log=RunLog(max_bytes=runtime.settings.max_run_log_bytes),
        )

    def begin(self, base: bytes | None = None) -> Run:
        """Step 4: build the run's parts, emit RUN_STARTED, begin writing the new messages
        and start the task that drives the run (``base``: checkpoint it)."""
        self.run = run = self._new_run()
        self._begin_run(base)
        # Begun, not awaited: queued for the store's next commit (or done at once in memory).
        context = _run_context(run)
        context.run(self._start_write)
        run.task = asyncio.get_running_loop().create_task(
            self.drive(), name=f"run-{run.run_id}", context=context
        )
        return run

    def _begin_run(self, base: bytes | None) -> None:
        """The run's parts around ``self.run``, registered, RUN_STARTED in its log (``base``:
        its checkpoint's, when it is durable)."""
        self._parts()
        if base is not None:
            self._checkpointer(base=base, epoch=0)
        self.runtime.register(self.run)
        self.events.start()
        self._live()

    def _start_write(self) -> None:
        """Begin storing the new messages; a durable run's first point goes with them (or
        alone when there are none to store)."""
        checkpoints, memory = self.checkpoints, self.memory
        if checkpoints is None or memory is None:
            self._saved = memory_start(memory)
        else:
            row = checkpoints.first(self._point_values([]), self.run.log.last_seq)
            self._saved = memory.save_start(row)
            if self._saved is None:
                self._first_write = checkpoints.store.insert_checkpoint(row)
        if self._saved is not None:
            self.runtime.writing_start(self.run, self._saved)

    def _parts(self) -> None:
        """The run's event side, its agent session and the agent's context."""
        runtime, run_input, memory, run = self.runtime, self.input, self.memory, self.run
        # The client's state wins; without one the run continues from the thread's.
        state = run_input.state
        self.state_from_thread = state is None and memory is not None and memory.state is not None
        if self.state_from_thread and memory is not None:
            state = memory.state
        self.limits = runtime.settings.run_limits
        self.events = RunEvents(
            run.log, run.thread_id, run.run_id, parent_run_id=run_input.parent_run_id,
            state=state, max_state_bytes=runtime.settings.max_state_bytes,
            limits=self.limits,
            pre_1_0=runtime.settings.pre_1_0_outcomes and "protocolVersion" not in run_input.raw,
        )
        self.events.usage = run.usage
        lineage = Lineage(run.thread_id, self.resource_id, run.usage, self.limits)
        self.session = AgentSession(
            self.events, self.agent, lineage, [t["name"] for t in run_input.tools],
            pending=runtime.pending, run=self.key, tool_timeout=runtime.settings.tool_timeout,
            defer_frontend=self.mode == "next-run", metrics=runtime.metrics,
            tracer=runtime.tracer, find_agent=runtime.find_agent,
        )
        self.context = self._agent_context(state)

    def _live(self) -> None:
        """The registered run: announced to the cluster, counted, maybe stopped at once."""
        runtime, run = self.runtime, self.run
        runtime.cluster.started(run)
        self._started = time.perf_counter()
        runtime.metrics.run_started(self.agent.id, self._started - self._admitted)
        assert self._ticket is not None
        if self._ticket.stop is not None:
            # A newer run asked this one to stop while it was starting: it stops at once.
            run.rollback = self._ticket.stop == "rollback"
            run.stop_reason = "cancelled"

    def _checkpointer(self, *, base: bytes, epoch: int, after: int = 0) -> None:
        """Make the run durable: its checkpoints, and event ids that survive a takeover."""
        runtime, run = self.runtime, self.run
        assert runtime.checkpoints is not None
        key = {"owner": self.owner, "run_id": run.run_id, "thread_id": run.thread_id,
               "resource_id": self.resource_id, "agent_id": self.agent.id}
        self.checkpoints = Checkpointer(
            runtime.checkpoints, key, epoch=epoch, holder=runtime.holder, base=base,
            max_bytes=runtime.settings.max_checkpoint_bytes,
            superseded=lambda: runtime.cancel(run, "suspended"),
        )
        self.session.on_park = self._parked
        run.durable = True
        run.ids = self.events.ids = RunIds(epoch, after)

    def _agent_context(self, state: Any) -> RunContext:
        """What the agent sees: the model's history, the request's tools and context."""
        run_input, memory = self.input, self.memory
        history = (
            memory.history if memory is not None
            else [dict(m) for m in model_view(run_input.messages)]
        )
        # Stateless: nothing to check the answers against; they are taken as sent.
        resume = memory.resume if memory is not None else run_input.resume
        answered = memory.answered if memory is not None else run_input.resume
        return RunContext(
            thread_id=run_input.thread_id, run_id=run_input.run_id, messages=history,
            frontend_tools=run_input.tools, context=run_input.context, options=self.options,
            state=state, resource_id=self.resource_id, session=self.session,
            resume=[Resume.from_wire(e) for e in resume],
            answered=[Resume.from_wire(e) for e in answered], usage=self.events.usage,
            limits=self.limits,
        )

    # -- the task (steps 5-7) -----------------------------------------------------------

    async def drive(self) -> None:
        """Step 5, the run's task: show the thread, produce, then ``conclude``; traced as
        one span when tracing is on."""
        tracer = self.runtime.tracer
        if tracer is None:
            await self._drive()
            return
        run = self.run
        with tracer.run(
            thread_id=run.thread_id, run_id=run.run_id, agent_id=run.agent_id,
            resource_id=run.resource_id,
        ) as finish:
            try:
                await self._drive()
            finally:
                finish(self.events.outcome)

    async def _drive(self) -> None:
        memory, events = self.memory, self.events
        try:
            # ``messagesSnapshot`` (thread memory reads the thread; stateless: no thread).
            if memory is not None and memory.snapshot is not None:
                events.push(ev.messages_snapshot(memory.snapshot))
            if self.state_from_thread and self.revival is None:
                # The client did not send the state the run starts from: show it first, so
                # the agent's deltas apply on the client too.
                events.push(ev.state_snapshot(self.context.state))
            if memory is not None and memory.hydrate_only:
                events.finish()
            else:
                await self.produce()
        finally:
            try:
                await self.conclude()
            finally:
                self.session.on_park = None  # the session's way back here: no cycle left

    async def produce(self) -> None:
        """The agent's outputs into the log, and how the run ends: finished, interrupted,
        cancelled or failed (every way out leaves a terminal event)."""
        events = self.events
        try:
            if self.run.stop_reason is not None:
                raise asyncio.CancelledError  # stopped before its agent began (a newer run)
            await self._outputs()
            events.finish()
        except RunEnded:
            pass
        except _Suspended:
            self.suspended = True
        except Interrupted as exc:
            for interrupt in exc.interrupts:
                call_id = interrupt.get("toolCallId")
                if isinstance(call_id, str):
                    # The call an interrupt asks about is answered by the resumed run.
                    events.deferred_calls.append(call_id)
            events.finish(outcome={"type": "interrupt", "interrupts": exc.interrupts})
        except asyncio.CancelledError:
            self._stopped()
        except AgentError as exc:
            events.fail(exc.message, exc.code)
        except Exception:
            logger.exception("agent %s failed in run %s", self.agent.id, self.run.run_id)
            events.fail("The agent failed unexpectedly.", "AGENT_ERROR")

    async def _outputs(self) -> None:
        durable = self.checkpoints is not None
        await self._before_agent()
        agen = self.agent.run(self.context)
        try:
            produced = 0
            async for output in agen:
                self.events.emit(output)
                produced += 1
                if durable and type(output) is StepFinished:
                    self._stepped()
                if produced % YIELD_EVERY == 0:
                    # An agent that never awaits would hold the loop for the whole run: let
                    # followers send what is ready (time to first event).
                    await asyncio.sleep(0)
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _before_agent(self) -> None:
        """What a run does before its agent (a continued run answers its parked calls)."""

    # -- durable points -------------------------------------------------------------------

    def _stepped(self) -> None:
        """A step finished: a durable point if nothing is open (no message, step or
        subagent) and every call is answered; a run whose process shuts down stops there."""
        events = self.events
        if not events.guard.nothing_open or events.transcript.unanswered_calls():
            return
        self._point("running")
        if self.run.suspend_at_point:
            raise _Suspended()

    def _parked(self) -> None:
        """A frontend call waits, or a tool result came. A durable point if the run now
        waits only on frontend calls (a server tool still running is not re-executable;
        its steps may be open: the point says which, and a process that continues the run
        finishes them first), or if the results it waited on are all in."""
        events = self.events
        if events.guard.ended or not events.quiet or events.guard.open_besides_steps:
            return
        waiting = self.runtime.pending.waiting(self.key)
        unanswered = set(events.transcript.unanswered_calls())
        if not waiting:
            if not unanswered and events.guard.nothing_open:
                self._point("running")  # the results are in: not asked for again
            return
        if not unanswered <= {c.tool_call_id for c in waiting}:
            return
        self._point("parked", waiting)
        if self.run.suspend_at_point:
            # Delivered at the wait that follows: nothing is emitted after the point.
            self.runtime.cancel(self.run, "suspended")

    def _point_values(self, waiting: list[PendingToolCall]) -> dict[str, Any]:
        """What a durable point stores (``Checkpointer``): enough to go on from here."""
        events = self.events
        ids = events.ids
        assert ids is not None
        return {
            "messages": events.transcript.messages,
            "pending": [{"id": c.tool_call_id, "name": c.name,
                         "at": ids.announced.get(c.tool_call_id, 0)} for c in waiting],
            "usage": events.usage, "result": events.result,
            "state": events.guard.shared_state, "outputBytes": events.guard.output_bytes,
            "takeovers": self.takeovers, "branches": ids.branches,
            "steps": [[owner, name] for owner, name in events.guard.open_steps],
            "parentRunId": self.input.parent_run_id,
        }

    def _point(self, phase: str, waiting: list[PendingToolCall] | None = None) -> None:
        """Write a durable point; a checkpoint over its bound ends the run."""
        checkpoints, events, log = self.checkpoints, self.events, self.run.log
        assert checkpoints is not None and events.ids is not None
        values = self._point_values(waiting or [])
        try:
            checkpoints.point(phase, values, log.last_seq)
        except CheckpointTooLarge:
            events.fail(
                f"The run's checkpoint is larger than {checkpoints.max_bytes} bytes.",
                "CHECKPOINT_TOO_LARGE",
            )
            raise RunEnded() from None
        events.ids.point_seq, events.ids.point = log.last_seq, values

    def _stopped(self) -> None:
        """The run's task was cancelled: end it as the reason it was stopped says."""
        reason = self.run.stop_reason
        if reason == "suspended" and self.checkpoints is not None:
            self.suspended = True
        # A client gone with no follower left is how AG-UI frontends stop a run (they abort
        # the request): cancelled like the cancel route, what was produced kept.
        elif reason in ("cancelled", "disconnected"):
            self.events.finish(outcome={"type": "cancelled"})
        elif reason == "shutdown":
            self.events.fail("The server is shutting down.", "SERVER_SHUTDOWN")
        else:
            self.events.fail("The run was stopped.", "RUN_CANCELLED")

    async def conclude(self) -> None:
        """Steps 6 and 7: store what the run produced, then release it.

        The thread stays busy until the final write has committed or definitively failed,
        even if the run's task is cancelled meanwhile: otherwise the next run could start on
        a thread whose last run is not stored yet, and the history would interleave. A
        cancel that came meanwhile is raised once the run is released.
        """
        if self.suspended:
            await self.suspend()
            return
        if not self.events.guard.ended:
            self.events.fail("The run ended without a terminal event.", "AGENT_ERROR")
        self.runtime.ending(self.run)
        cancelled = False
        try:
            cancelled = await self.save()
        finally:
            cancelled = await self.release() or cancelled
        if cancelled:
            raise asyncio.CancelledError()

    async def save(self) -> bool:
        """Step 6: settle the start write, then store what the run produced and what it
        leaves for the next run. True if the task was cancelled while waiting."""
        memory, events = self.memory, self.events
        if memory is None:
            return False
        # Concluded here (stored, rolled back, or told it was not): the run must not be
        # continued anywhere; its checkpoint goes with its end write. Decided before the
        # start write is waited for, so a point still queued is withdrawn (a run that ends
        # right after its last step writes no point for it).
        drop = (self.checkpoints.drop(results=self.run.results_posted)
                if self.checkpoints is not None else None)
        cancelled = False
        if self._saved is not None:
            cancelled = await _settle(self._saved)
            _log_failure(self._saved, self.run)
        if drop is not None and self._row_stored():
            drop = replace(drop, stored=True)
        if self.run.rollback and events.outcome == "cancelled":
            # Rolled back by a newer run: what the start write stored goes, nothing else is.
            self._drop_alone(drop)
            undo = memory.rollback()
            if undo is not None:
                cancelled = await _settle(undo) or cancelled
                _log_failure(undo, self.run)
            return cancelled
        self._close_unanswered()
        write = memory.save_end(
            events.transcript.messages, finished=events.succeeded, failed=events.failed,
            raised=events.interrupts, state=events.guard.shared_state, checkpoint=drop,
        )
        if write is None:
            self._drop_alone(drop)
            return cancelled
        cancelled = await _settle(write) or cancelled
        if not write.cancelled() and isinstance(write.exception(), CheckpointSuperseded):
            logger.warning("run %s was taken over by another process: this copy of it is "
                           "not stored", self.run.run_id)
            self.taken_over = True
            return cancelled
        stored = _log_failure(write, self.run)
        self.runtime.store_written(stored)
        if not stored:
            events.not_stored()
            self._drop_alone(drop)  # the run ends here all the same
        return cancelled

    def _row_stored(self) -> bool:
        """Whether the run's checkpoint row is in the store: it was continued here (claimed),
        or its first point went with a start write that succeeded."""
        if self.revival is not None:
            return True
        first = self._saved if self._saved is not None else self._first_write
        return first is not None and first.done() and not first.cancelled() and (
            first.exception() is None)

    def _drop_alone(self, drop: CheckpointDrop | None) -> None:
        """Forget the checkpoint without an end write to go with (not waited for: a process
        that stops first leaves a checkpoint whose run is then continued)."""
        if drop is not None and self.checkpoints is not None:
            self.checkpoints.store.drop_checkpoint(
                drop.owner, drop.run_id, drop.epoch
            ).add_done_callback(_log_drop)

    async def suspend(self) -> None:
        """Instead of steps 6 and 7 for a run stopped at a durable point: nothing stored,
        no terminal event; the checkpoint's writes settle, the run is let go here (its
        followers see the log end) and goes on in another process."""
        runtime, run = self.runtime, self.run
        runtime.ending(run)
        cancelled = False
        checkpoints = self.checkpoints
        assert checkpoints is not None and self._ticket is not None
        if checkpoints.working:
            # Let go: no replica holds it now (any may continue it). Stopped exactly at the
            # point, continuing it re-executes nothing (not counted against
            # ``max_takeovers``).
            checkpoints.holder = ""
            clean = checkpoints.last_seq == run.log.last_seq
            with contextlib.suppress(CheckpointTooLarge):
                checkpoints.point(checkpoints.phase, {**checkpoints.last, "clean": clean},
                                  checkpoints.last_seq)
        for write in (self._saved, self._first_write):
            if write is not None:
                cancelled = await _settle(write) or cancelled
        cancelled = await _settle(asyncio.ensure_future(checkpoints.settle())) or cancelled
        runtime.admission.release(self._ticket)
        if runtime.cluster.distributed:
            released = asyncio.ensure_future(runtime.cluster.release(run))
            cancelled = await _settle(released) or cancelled
        run.log.close()
        runtime.let_go(run)
        logger.info("run %s suspended at its last durable point", run.run_id)
        if runtime.cluster.distributed and checkpoints.phase == "running":
            # A run that was producing goes on now on a peer (a parked one waits for its
            # results, whichever replica they reach).
            handed = asyncio.ensure_future(self._hand_off())
            cancelled = await _settle(handed) or cancelled
        if cancelled:
            raise asyncio.CancelledError()

    async def _hand_off(self) -> None:
        """Ask a live peer to continue the run (exactly one process wins it: if the
        message is lost, a client's resume or result continues it wherever it lands)."""
        cluster, run = self.runtime.cluster, self.run
        try:
            peers = await cluster.peers()
            if peers:
                peer = peers[hash(run.run_id) % len(peers)]
                await cluster.send(peer, TakeOver(owner=run.owner, run=run.run_id,
                                                  caller=self.caller))
        except IobridgeError as exc:
            logger.warning("run %s: no peer took it over now (%s)", run.run_id, exc)

    def _close_unanswered(self) -> None:
        """Give each frontend call the client never answered an error result, for storage."""
        events = self.events
        transcript = events.transcript
        deferred = set(events.deferred_calls)  # next-run calls: answered by the next run
        reason = _UNANSWERED.get(
            self.run.stop_reason or "", "the run ended before the client answered"
        )
        for call_id in transcript.unanswered_calls():
            if call_id not in deferred:
                transcript.add_error_result(events.new_id(), call_id, reason)

    async def release(self) -> bool:
        """Step 7: free the thread (here, then across replicas), release the terminal event,
        retain the run. True if the task was cancelled while waiting."""
        runtime, run = self.runtime, self.run
        assert self._ticket is not None
        runtime.admission.release(self._ticket)
        cancelled = False
        if runtime.cluster.distributed:  # the shared busy mark goes before the terminal
            cancelled = await _settle(asyncio.ensure_future(runtime.cluster.release(run)))
        if self.taken_over:  # let go as a suspended run is: it goes on elsewhere
            run.log.close()
            runtime.let_go(run)
            return cancelled
        self.events.release_terminal()
        runtime.retire(run)
        runtime.metrics.run_finished(
            run.agent_id, self.events.outcome, self.events.error_code,
            time.perf_counter() - self._started,
        )
        return cancelled


def memory_start(memory: RunMemory | None) -> asyncio.Future[None] | None:
    """Begin storing the run's new messages (stateless: nothing to store)."""
    return memory.save_start() if memory is not None else None


def _refusal(exc: BaseException, run_id: str) -> BaseException:
    """What a run that could not start answers: a store outage becomes 503, the rest as is."""
    if isinstance(exc, Exception) and is_outage(exc):
        logger.error("run %s: the thread store does not answer (%s: %s)",
                     run_id, type(exc).__name__, exc)
        return outage_refusal()
    return exc


def _run_context(run: Run) -> contextvars.Context:
    """A context for one of the run's tasks: its log records carry the run's ids."""
    context = contextvars.copy_context()
    context.run(current_run.set, (run.thread_id, run.run_id))
    return context


def _log_drop(drop: asyncio.Future[None]) -> None:
    error = None if drop.cancelled() else drop.exception()
    if error is not None:
        logger.error("a run's checkpoint could not be dropped (%s: %s)",
                     type(error).__name__, error)


def _log_failure(write: asyncio.Future[Any], run: Run) -> bool:
    """Log why ``write`` failed; True if it stored what it had to."""
    if write.cancelled():
        return False
    error = write.exception()
    if error is None:
        return True
    if is_outage(error):  # no stack trace for a store that is down or too slow
        logger.error("could not store the messages of run %s (%s: %s)",
                     run.run_id, type(error).__name__, error)
    else:
        logger.error("could not store the messages of run %s", run.run_id, exc_info=error)
    return False


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
