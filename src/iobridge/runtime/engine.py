"""The run engine: one place that starts, drives, cancels and retains runs.

Both transports call only this: ``start`` a run (after which they follow ``run.log``),
``submit_tool_result``, ``cancel``, ``detach`` when a follower goes away, and ``get_run``
to resume. Agents, tools, pending frontend calls and persistence live behind it, so a
feature that works over SSE works over N-PAMP by construction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from iobridge.agents.context import RunContext, ToolResult
from iobridge.errors import AgentError, ConflictError, InputError, NotFoundError
from iobridge.protocol.run_input import RunInput
from iobridge.runtime.pending import PendingRegistry
from iobridge.runtime.run import Run, RunStatus
from iobridge.runtime.session import RunEnded, Session
from iobridge.store.history import model_view

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.agents.catalog import AgentCatalog

logger = logging.getLogger("iobridge.runtime")

TOOL_RESULT_MODES = ("in-run", "next-run")
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
    tool_result_mode: str = "in-run"


class ThreadMemory(Protocol):
    """Persistence hooks (thread memory); absent means a stateless engine."""

    async def begin(self, run_input: RunInput, resource_id: str, agent_id: str) -> list[Any]:
        """Check ownership, store the new messages, return the history the model sees."""
        ...

    async def end(self, run: Run, messages: list[dict[str, Any]]) -> None:
        """Store the messages the run produced."""
        ...


AccessCheck = Callable[[str], bool]


class Runtime:
    """Starts and tracks runs; see the module docstring."""

    def __init__(
        self,
        catalog: AgentCatalog,
        *,
        settings: RuntimeSettings | None = None,
        memory: ThreadMemory | None = None,
    ) -> None:
        self.catalog = catalog
        self.settings = settings or RuntimeSettings()
        self.memory = memory
        self.pending = PendingRegistry()
        self._runs: dict[str, Run] = {}
        self._retained: OrderedDict[str, float] = OrderedDict()
        self._busy_threads: set[str] = set()
        self._detach_timers: dict[str, asyncio.TimerHandle] = {}

    # -- starting ----------------------------------------------------------------------

    async def start(
        self,
        run_input: RunInput,
        *,
        resource_id: str = "default",
        tool_result_mode: str | None = None,
    ) -> Run:
        """Validate a run request and start the run; events appear in ``run.log``.

        ``tool_result_mode`` is the transport's default frontend-tool mode (N-PAMP: results
        come in the next run); ``forwardedProps.toolResultMode`` and agent config win.

        Raises:
            NotFoundError: unknown ``forwardedProps.agentId`` (or a foreign thread).
            InputError: options the agent rejects (``modelSettings``, ...).
            ConflictError: the runId is already running, or the thread is busy.
        """
        props = run_input.forwarded_props
        agent_id = props.get("agentId")
        agent = self.catalog.get(agent_id if isinstance(agent_id, str) else None)
        agent.prepare(props)
        mode = self._tool_mode(props, agent, tool_result_mode)
        existing = self._runs.get(run_input.run_id)
        if existing is not None and not existing.done:
            raise ConflictError("a run with this runId is running", code="RUN_ALREADY_RUNNING")
        if run_input.thread_id in self._busy_threads:
            raise ConflictError("another run is active on this thread", code="THREAD_BUSY")
        self._busy_threads.add(run_input.thread_id)
        try:
            if self.memory is not None:
                history = await self.memory.begin(run_input, resource_id, agent.id)
            else:
                history = [dict(m) for m in model_view(run_input.messages)]
        except BaseException:
            self._busy_threads.discard(run_input.thread_id)
            raise
        if existing is not None:
            self._forget(existing.run_id)
        run = Run(
            run_id=run_input.run_id,
            thread_id=run_input.thread_id,
            parent_run_id=run_input.parent_run_id,
            resource_id=resource_id,
            agent=agent,
            runtime=self,
            frontend_tools=run_input.tools,
            forwarded_props=props,
            defer_frontend_tools=mode == "next-run",
        )
        session = Session(run)
        run.session = session
        ctx = RunContext(
            thread_id=run.thread_id,
            run_id=run.run_id,
            messages=history,
            frontend_tools=run_input.tools,
            context=run_input.context,
            forwarded_props=props,
            state=run_input.state,
            resource_id=resource_id,
            session=session,
        )
        self._runs[run.run_id] = run
        session.start()
        run.task = asyncio.create_task(self._drive(run, ctx), name=f"run-{run.run_id}")
        return run

    def _tool_mode(self, props: dict[str, Any], agent: Agent, default: str | None) -> str:
        mode = props.get("toolResultMode")
        if mode is None:
            mode = agent.tool_result_mode or default or self.settings.tool_result_mode
        if mode not in TOOL_RESULT_MODES:
            raise InputError(
                "forwardedProps.toolResultMode must be 'in-run' or 'next-run'",
                code="INVALID_FORWARDED_PROPS",
            )
        return str(mode)

    async def _drive(self, run: Run, ctx: RunContext) -> None:
        try:
            await self._produce(run, ctx)
        finally:
            await self._conclude(run)

    async def _produce(self, run: Run, ctx: RunContext) -> None:
        session = run.session
        assert session is not None
        try:
            agen = run.agent.run(ctx)
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
            run.status = RunStatus.FINISHED
        except RunEnded:
            run.status = RunStatus.FAILED
        except asyncio.CancelledError:
            if run.stop_reason == "cancelled":
                session.finish(outcome={"type": "cancelled"})
            else:
                session.fail("The run was stopped.", "RUN_CANCELLED")
            run.status = RunStatus.CANCELLED
        except AgentError as exc:
            session.fail(exc.message, exc.code)
            run.status = RunStatus.FAILED
        except Exception:
            logger.exception("agent %s failed in run %s", run.agent.id, run.run_id)
            session.fail("The agent failed unexpectedly.", "AGENT_ERROR")
            run.status = RunStatus.FAILED

    async def _conclude(self, run: Run) -> None:
        """Store what the run produced, free the thread, then release the terminal event."""
        session = run.session
        assert session is not None
        if not session.guard.ended:
            session.fail("The run ended without a terminal event.", "AGENT_ERROR")
        if run.status is RunStatus.RUNNING:
            run.status = RunStatus.FAILED
        self.pending.cancel_run(run.run_id)
        timer = self._detach_timers.pop(run.run_id, None)
        if timer is not None:
            timer.cancel()
        try:
            if self.memory is not None:
                await asyncio.shield(self.memory.end(run, session.transcript.messages))
        except (Exception, asyncio.CancelledError):
            logger.exception("could not store the messages of run %s", run.run_id)
        finally:
            self._busy_threads.discard(run.thread_id)
            session.release_terminal()
            self._retain(run.run_id)

    # -- retention ---------------------------------------------------------------------

    def _retain(self, run_id: str) -> None:
        now = time.monotonic()
        self._retained[run_id] = now
        self._expire(now)

    def _expire(self, now: float) -> None:
        limit = self.settings.max_retained_runs
        horizon = now - self.settings.retention_seconds
        while self._retained:
            run_id, finished = next(iter(self._retained.items()))
            if len(self._retained) <= limit and finished > horizon:
                break
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        self._retained.pop(run_id, None)
        self._runs.pop(run_id, None)
        self.pending.forget_run(run_id)

    # -- lookups and actions -------------------------------------------------------------

    def get_run(self, run_id: str, *, resource_ids: Collection[str] | None = None) -> Run:
        """A live or retained run the caller may see.

        Raises:
            NotFoundError: unknown, expired, or owned by another resource.
        """
        self._expire(time.monotonic())
        run = self._runs.get(run_id)
        if run is None or (resource_ids is not None and run.resource_id not in resource_ids):
            raise NotFoundError("unknown run", code="RUN_NOT_FOUND")
        return run

    def submit_tool_result(
        self,
        run_id: str,
        tool_call_id: str,
        result: ToolResult,
        *,
        resource_ids: Collection[str] | None = None,
    ) -> None:
        """Deliver a frontend tool's result to its waiting run.

        Raises:
            NotFoundError: unknown run, unknown call, or a server tool's call.
            ConflictError: the call already has a result.
        """
        run = self.get_run(run_id, resource_ids=resource_ids)
        self.pending.resolve(run.run_id, tool_call_id, result)

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
        timer = self._detach_timers.pop(run.run_id, None)
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
        self._detach_timers[run.run_id] = loop.call_later(
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
