"""The run engine: one place that starts, drives, cancels and retains runs.

The application core (:mod:`iobridge.app`) calls only this: ``start`` a run (after which
transports follow ``run.log``), ``get_run``, ``submit_tool_result``, ``cancel``, ``attach``
and ``detach``. Agents, tools, pending frontend calls and persistence live behind it, so a
feature that works over SSE works over N-PAMP by construction.

Runs are keyed by ``(owner, runId)``; a thread is busy per ``(resourceId, threadId)`` from
the moment a run is admitted until what it produced is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iobridge.agents.context import RunContext, ToolResult
from iobridge.errors import AgentError, ConflictError, NotFoundError
from iobridge.protocol.messages import model_view
from iobridge.runtime.pending import PendingRegistry
from iobridge.runtime.run import Run, RunKey
from iobridge.runtime.runlog import RunLog
from iobridge.runtime.session import RunEnded, Session
from iobridge.runtime.tools import ToolDispatch

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.protocol.options import RunOptions, ToolResultMode
    from iobridge.protocol.run_input import RunInput
    from iobridge.runtime.thread_memory import ThreadMemory

logger = logging.getLogger("iobridge.runtime")

#: Outputs an agent may produce before the engine yields to the event loop.
YIELD_EVERY = 32


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


class Runtime:
    """Starts and tracks runs; see the module docstring.

    Args:
        settings: The engine's knobs.
        memory: Thread persistence; ``None`` makes the engine stateless (the model sees
            exactly the request's messages).
    """

    def __init__(
        self, *, settings: RuntimeSettings | None = None, memory: ThreadMemory | None = None
    ) -> None:
        self.settings = settings or RuntimeSettings()
        self.memory = memory
        self.pending = PendingRegistry()
        self._runs: dict[RunKey, Run] = {}
        self._retained: OrderedDict[RunKey, float] = OrderedDict()
        self._busy_threads: set[tuple[str, str]] = set()
        self._detach_timers: dict[RunKey, asyncio.TimerHandle] = {}

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
            NotFoundError: a thread of another resource.
            ConflictError: the runId is already running, or the thread is busy.
        """
        key: RunKey = (owner, run_input.run_id)
        mode = (
            options.tool_result_mode
            or agent.tool_result_mode
            or tool_result_mode
            or self.settings.tool_result_mode
        )
        existing = self._runs.get(key)
        if existing is not None and not existing.done:
            raise ConflictError("a run with this runId is running", code="RUN_ALREADY_RUNNING")
        thread = (resource_id, run_input.thread_id)
        if thread in self._busy_threads:
            raise ConflictError("another run is active on this thread", code="THREAD_BUSY")
        self._busy_threads.add(thread)
        try:
            if self.memory is not None:
                history = await self.memory.begin(run_input, options, resource_id, agent.id)
            else:
                history = [dict(m) for m in model_view(run_input.messages)]
        except BaseException:
            self._busy_threads.discard(thread)
            raise
        if existing is not None:
            self._forget(key)
        log = RunLog()
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
            log, run_input.thread_id, run_input.run_id, parent_run_id=run_input.parent_run_id
        )
        dispatch = ToolDispatch(
            session,
            agent,
            [t["name"] for t in run_input.tools],
            pending=self.pending,
            run=key,
            tool_timeout=self.settings.tool_timeout,
            defer_frontend=mode == "next-run",
        )
        ctx = RunContext(
            thread_id=run.thread_id,
            run_id=run.run_id,
            messages=history,
            frontend_tools=run_input.tools,
            context=run_input.context,
            options=options,
            state=run_input.state,
            resource_id=resource_id,
            session=dispatch,
        )
        self._runs[key] = run
        session.start()
        run.task = asyncio.create_task(
            self._drive(run, agent, session, ctx), name=f"run-{run.run_id}"
        )
        return run

    async def _drive(self, run: Run, agent: Agent, session: Session, ctx: RunContext) -> None:
        try:
            await self._produce(run, agent, session, ctx)
        finally:
            await self._conclude(run, session)

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
        except asyncio.CancelledError:
            if run.stop_reason == "cancelled":
                session.finish(outcome={"type": "cancelled"})
            else:
                session.fail("The run was stopped.", "RUN_CANCELLED")
        except AgentError as exc:
            session.fail(exc.message, exc.code)
        except Exception:
            logger.exception("agent %s failed in run %s", agent.id, run.run_id)
            session.fail("The agent failed unexpectedly.", "AGENT_ERROR")

    async def _conclude(self, run: Run, session: Session) -> None:
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
            if self.memory is not None:
                write = asyncio.ensure_future(
                    self.memory.end(run.thread_id, run.options, session.transcript.messages)
                )
                cancelled = await _settle(write)
                if not write.cancelled() and write.exception() is not None:
                    logger.error(
                        "could not store the messages of run %s",
                        run.run_id,
                        exc_info=write.exception(),
                    )
        finally:
            self._busy_threads.discard((run.resource_id, run.thread_id))
            session.release_terminal()
            self._retain(run.key)
        if cancelled:
            raise asyncio.CancelledError()

    # -- retention ---------------------------------------------------------------------

    def _retain(self, key: RunKey) -> None:
        now = time.monotonic()
        self._retained[key] = now
        self._expire(now)

    def _expire(self, now: float) -> None:
        limit = self.settings.max_retained_runs
        horizon = now - self.settings.retention_seconds
        while self._retained:
            key, finished = next(iter(self._retained.items()))
            if len(self._retained) <= limit and finished > horizon:
                break
            self._forget(key)

    def _forget(self, key: RunKey) -> None:
        self._retained.pop(key, None)
        self._runs.pop(key, None)
        self.pending.forget_run(key)

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

    async def aclose(self) -> None:
        """Cancel every live run and wait for them to conclude (server shutdown)."""
        tasks = [r.task for r in self._runs.values() if r.task and not r.task.done()]
        for run in list(self._runs.values()):
            self.cancel(run, "shutdown")
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def active_runs(self) -> int:
        """Runs still producing events."""
        return sum(1 for r in self._runs.values() if not r.done)


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
