"""The agent's session of one run: what ``RunContext.session`` is, and where tool calls go.

``AgentSession`` implements the ``RunSession`` protocol of :mod:`iobridge.agents.context`: an
agent emits outputs through it and announces tool calls. A server tool runs here; a frontend
tool is registered with the pending registry before its TOOL_CALL_END is visible and waits for
the result route (in-run mode), or is handed to the client for its next run (next-run mode).
Either way the agent code is the same. Everything the session needs is given to it: it never
reaches into the engine.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iobridge.agents import outputs as out
from iobridge.agents.context import ToolCallHandle
from iobridge.agents.subagents import SubagentTool, task_messages
from iobridge.agents.tools import result_content
from iobridge.errors import InputError, NotFoundError
from iobridge.protocol import events as ev
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.delegation import SubagentEvents, run_subagent
from iobridge.runtime.run_events import RunEnded, RunEvents

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.agents.tools import ServerTool
    from iobridge.observability.metrics import Metrics
    from iobridge.observability.tracing import RunTracer
    from iobridge.protocol.run_limits import RunLimits
    from iobridge.runtime.pending import PendingRegistry, PendingToolCall
    from iobridge.runtime.run import RunKey

logger = logging.getLogger("iobridge.runtime")


def error_result(message: str) -> ToolResult:
    """A failed tool result as the model sees it: ``{"error": message}``."""
    return ToolResult(content=json.dumps({"error": message}), is_error=True)


@dataclass(frozen=True, slots=True)
class Lineage:
    """What a subagent's context inherits from its run.

    The session keeps this, not the run's ``RunContext``: the context holds the session, and
    a session holding its context back would keep every run's parts alive until a cycle
    collection instead of freeing them when the run ends.
    """

    thread_id: str
    resource_id: str
    #: The run's token usage, which a subagent's requests add to.
    usage: list[dict[str, Any]]
    limits: RunLimits


class AgentSession:
    """Implements ``iobridge.agents.context.RunSession`` for one run.

    Args:
        events: The run's event side.
        agent: The agent (its server tools run here).
        lineage: What a subagent started from this session inherits.
        frontend_tools: Names of the tools the client declared.
        pending: Where in-run frontend calls wait for their result.
        run: The run's key in ``pending``.
        tool_timeout: Seconds a frontend call waits before the agent sees an error.
        defer_frontend: Next-run mode: frontend calls end the run instead of waiting.
        metrics: Counts awaited tool calls by kind.
        tracer: Makes a span per awaited tool call (``None``: no tracing).
        on_park: Called when a frontend call begins to wait and after each tool result
            (a durable run checks there whether it is parked on frontend calls).
        find_agent: The catalog's lookup, for subagents (``None``: the run has none).
        depth: How many subagent levels this session is nested in (0: the run's agent).
        subagent_run_id: The invocation this session runs (``None``: the run's agent).
    """

    def __init__(
        self,
        events: RunEvents,
        agent: Agent,
        lineage: Lineage,
        frontend_tools: Collection[str],
        *,
        pending: PendingRegistry,
        run: RunKey,
        tool_timeout: float,
        defer_frontend: bool,
        metrics: Metrics | None = None,
        tracer: RunTracer | None = None,
        on_park: Callable[[], None] | None = None,
        find_agent: Callable[[str], Agent] | None = None,
        depth: int = 0,
        subagent_run_id: str | None = None,
    ) -> None:
        self.events = events
        self.on_park = on_park
        self.agent = agent
        self.lineage = lineage
        self.pending = pending
        self.run = run
        self.tool_timeout = tool_timeout
        self.defer_frontend = defer_frontend
        self.metrics = metrics
        self.tracer = tracer
        self._frontend = frozenset(frontend_tools)
        self._find_agent = find_agent
        self.depth = depth
        self.subagent_run_id = subagent_run_id

    def find_agent(self, agent_id: str) -> Agent:
        """The catalog agent ``agent_id`` (see ``AgentCatalog.get``).

        Raises:
            NotFoundError: no such agent, or no catalog to look in.
            ServiceUnavailable: it cannot run.
        """
        if self._find_agent is None:
            raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
        return self._find_agent(agent_id)

    async def subagent(
        self,
        agent_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        parent_tool_call_id: str | None = None,
    ) -> ToolResult:
        """Run the catalog agent ``agent_id`` inside this run (``runtime.delegation``)."""
        return await run_subagent(
            self, agent_id, messages, parent_tool_call_id=parent_tool_call_id,
            make_session=self._child,
        )

    def _child(self, events: SubagentEvents, agent: Agent) -> AgentSession:
        """The session of a subagent: its own tools only (no frontend tools), one level
        deeper, attributed to its invocation."""
        return AgentSession(
            events, agent, self.lineage, (), pending=self.pending, run=self.run,
            tool_timeout=self.tool_timeout, defer_frontend=self.defer_frontend,
            metrics=self.metrics, tracer=self.tracer, find_agent=self._find_agent,
            depth=self.depth + 1, subagent_run_id=events.subagent_run_id,
        )

    def emit(self, output: out.AgentOutput) -> None:
        """Send an output into the run (same as yielding it from ``Agent.run``)."""
        self.events.emit(output)

    def answer_earlier_call(self, tool_call_id: str, result: ToolResult) -> None:
        """Report the result of a call an earlier run announced (see ``RunSession``)."""
        self.events.answer_earlier_call(tool_call_id, result)

    def annotate(self, metadata: Mapping[str, Any] | None) -> None:
        """Give ``metadata`` to the events of the next outputs (``None``: stop)."""
        self.events.annotate(dict(metadata) if metadata else None)

    def is_frontend_tool(self, name: str) -> bool:
        """Whether ``name`` was declared by the client (and is not a server tool)."""
        return name in self._frontend and self.agent.server_tool(name) is None

    def start_tool_call(
        self, name: str, *, tool_call_id: str | None = None, local: bool = False
    ) -> ToolCallHandle:
        """Announce a tool call (its events are released by the guard at TOOL_CALL_END).

        A ``local`` call is run by the agent itself: it is never registered as pending, even
        when a frontend tool has the same name.
        """
        return _Handle(self, name, self.events.open_tool_call(name, tool_call_id), local=local)


class _Handle:
    """A tool call announced by an agent; see ``ToolCallHandle``."""

    def __init__(
        self, session: AgentSession, name: str, tool_call_id: str, *, local: bool = False
    ) -> None:
        self._session = session
        self.name = name
        self.tool_call_id = tool_call_id
        self._local = local
        self._fragments: list[str] = []
        self._ended = False
        self._pending: PendingToolCall | None = None

    def add_args(self, delta: str) -> None:
        if not self._ended and delta:
            self._fragments.append(delta)
            self._session.events.push(ev.tool_call_args(self.tool_call_id, delta))

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        session = self._session
        if not self._local and session.is_frontend_tool(self.name) and not session.defer_frontend:
            # Register before TOOL_CALL_END is visible: a fast client cannot post too early.
            self._pending = session.pending.register(session.run, self.tool_call_id, self.name)
        session.events.push(ev.tool_call_end(self.tool_call_id))

    def complete(self, result: ToolResult) -> None:
        self.end()
        events = self._session.events
        if events.guard.ended:
            raise RunEnded()
        events.tool_result(self.tool_call_id, result)

    async def result(self, args: Mapping[str, Any] | None = None) -> ToolResult:
        self.end()
        session = self._session
        if session.events.guard.ended:
            raise RunEnded()
        tracer = session.tracer
        if tracer is None:
            result, kind = await self._result(args)
        else:
            with tracer.tool_call(self.name, self.tool_call_id) as finish:
                result, kind = await self._result(args)
                finish(kind, result.is_error)
        if session.metrics is not None:
            session.metrics.tool_call(session.agent.id, kind)
        if result.deferred:
            return result
        if session.events.guard.ended:
            raise RunEnded()
        session.events.tool_result(self.tool_call_id, result)
        if session.on_park is not None:
            session.on_park()
        return result

    async def _result(self, args: Mapping[str, Any] | None) -> tuple[ToolResult, str]:
        """The call's result and its kind: server, frontend, deferred or unknown."""
        session = self._session
        if args is None:
            # The guard ends the run on arguments that are not JSON before this runs, so the
            # fallback is defensive only (its mutants cannot be told apart).
            try:
                parsed = json.loads("".join(self._fragments) or "{}")  # pragma: no mutate
            except ValueError:
                parsed = {}  # pragma: no mutate
            args = parsed if isinstance(parsed, dict) else {}
        server_tool = session.agent.server_tool(self.name)
        if isinstance(server_tool, SubagentTool):
            try:
                messages = task_messages(args, session.events.new_id())
            except InputError as exc:
                return error_result(exc.message), "subagent"
            result = await session.subagent(
                server_tool.agent_id, messages, parent_tool_call_id=self.tool_call_id
            )
            return result, "subagent"
        if server_tool is not None:
            return await self._run_server_tool(server_tool, args), "server"
        if session.is_frontend_tool(self.name):
            if session.defer_frontend:
                session.events.deferred_calls.append(self.tool_call_id)
                return ToolResult(content="", deferred=True), "deferred"
            return await self._await_frontend(), "frontend"
        return error_result(f"unknown tool {self.name!r}"), "unknown"

    async def _run_server_tool(self, tool: ServerTool, args: Mapping[str, Any]) -> ToolResult:
        try:
            value = await tool.invoke(args)
        except InputError as exc:
            return error_result(exc.message)
        except Exception:
            logger.exception("server tool %s failed", self.name)
            return error_result(f"tool {self.name!r} failed")
        return ToolResult(content=result_content(value), value=value)

    async def _await_frontend(self) -> ToolResult:
        session = self._session
        call = self._pending or session.pending.register(
            session.run, self.tool_call_id, self.name
        )
        if session.on_park is not None:
            session.on_park()
        try:
            return await session.pending.wait(call, session.tool_timeout)
        except TimeoutError:
            return error_result(f"tool {self.name!r} timed out waiting for the client")
