"""Tool dispatch for one run: where a call runs, and how its result comes back.

``ToolDispatch`` is what an agent's ``RunContext`` talks to (the ``RunSession`` protocol of
:mod:`iobridge.agents.context`). A server tool runs here; a frontend tool is registered with
the pending registry before its TOOL_CALL_END is visible and waits for the result route (in-run
mode), or is handed to the client for its next run (next-run mode). Either way the agent code
is the same. Everything the dispatch needs is given to it: it never reaches into the engine.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from iobridge.agents import outputs as out
from iobridge.agents.context import ToolCallHandle, ToolResult
from iobridge.agents.tools import result_content
from iobridge.errors import InputError
from iobridge.protocol import events as ev
from iobridge.runtime.session import RunEnded, Session

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.agents.tools import ServerTool
    from iobridge.observability.metrics import Metrics
    from iobridge.observability.tracing import RunTracer
    from iobridge.runtime.pending import PendingRegistry, PendingToolCall
    from iobridge.runtime.run import RunKey

logger = logging.getLogger("iobridge.runtime")


def error_result(message: str) -> ToolResult:
    """A failed tool result as the model sees it: ``{"error": message}``."""
    return ToolResult(content=json.dumps({"error": message}), is_error=True)


class ToolDispatch:
    """Implements ``iobridge.agents.context.RunSession`` for one run.

    Args:
        session: The run's event side.
        agent: The agent (its server tools run here).
        frontend_tools: Names of the tools the client declared.
        pending: Where in-run frontend calls wait for their result.
        run: The run's key in ``pending``.
        tool_timeout: Seconds a frontend call waits before the agent sees an error.
        defer_frontend: Next-run mode: frontend calls end the run instead of waiting.
        metrics: Counts awaited tool calls by kind.
        tracer: Makes a span per awaited tool call (``None``: no tracing).
    """

    def __init__(
        self,
        session: Session,
        agent: Agent,
        frontend_tools: Collection[str],
        *,
        pending: PendingRegistry,
        run: RunKey,
        tool_timeout: float,
        defer_frontend: bool,
        metrics: Metrics | None = None,
        tracer: RunTracer | None = None,
    ) -> None:
        self.session = session
        self.agent = agent
        self.pending = pending
        self.run = run
        self.tool_timeout = tool_timeout
        self.defer_frontend = defer_frontend
        self.metrics = metrics
        self.tracer = tracer
        self._frontend = frozenset(frontend_tools)

    def emit(self, output: out.AgentOutput) -> None:
        """Send an output into the run (same as yielding it from ``Agent.run``)."""
        self.session.emit(output)

    def answer_earlier_call(self, tool_call_id: str, result: ToolResult) -> None:
        """Report the result of a call an earlier run announced (see ``RunSession``)."""
        self.session.answer_earlier_call(tool_call_id, result)

    def annotate(self, metadata: Mapping[str, Any] | None) -> None:
        """Give ``metadata`` to the events of the next outputs (``None``: stop)."""
        self.session.annotate(dict(metadata) if metadata else None)

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
        return _Handle(self, name, self.session.open_tool_call(name, tool_call_id), local=local)


class _Handle:
    """A tool call announced by an agent; see ``ToolCallHandle``."""

    def __init__(
        self, dispatch: ToolDispatch, name: str, tool_call_id: str, *, local: bool = False
    ) -> None:
        self._dispatch = dispatch
        self.name = name
        self.tool_call_id = tool_call_id
        self._local = local
        self._fragments: list[str] = []
        self._ended = False
        self._pending: PendingToolCall | None = None

    def add_args(self, delta: str) -> None:
        if not self._ended and delta:
            self._fragments.append(delta)
            self._dispatch.session.push(ev.tool_call_args(self.tool_call_id, delta))

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        dispatch = self._dispatch
        if not self._local and dispatch.is_frontend_tool(self.name) and not dispatch.defer_frontend:
            # Register before TOOL_CALL_END is visible: a fast client cannot post too early.
            self._pending = dispatch.pending.register(dispatch.run, self.tool_call_id, self.name)
        dispatch.session.push(ev.tool_call_end(self.tool_call_id))

    def complete(self, result: ToolResult) -> None:
        self.end()
        session = self._dispatch.session
        if session.guard.ended:
            raise RunEnded()
        session.tool_result(self.tool_call_id, result)

    async def result(self, args: Mapping[str, Any] | None = None) -> ToolResult:
        self.end()
        dispatch = self._dispatch
        if dispatch.session.guard.ended:
            raise RunEnded()
        tracer = dispatch.tracer
        if tracer is None:
            result, kind = await self._result(args)
        else:
            with tracer.tool_call(self.name, self.tool_call_id) as finish:
                result, kind = await self._result(args)
                finish(kind, result.is_error)
        if dispatch.metrics is not None:
            dispatch.metrics.tool_call(dispatch.agent.id, kind)
        if result.deferred:
            return result
        if dispatch.session.guard.ended:
            raise RunEnded()
        dispatch.session.tool_result(self.tool_call_id, result)
        return result

    async def _result(self, args: Mapping[str, Any] | None) -> tuple[ToolResult, str]:
        """The call's result and its kind: server, frontend, deferred or unknown."""
        dispatch = self._dispatch
        session = dispatch.session
        if args is None:
            # The guard ends the run on arguments that are not JSON before this runs, so the
            # fallback is defensive only (its mutants cannot be told apart).
            try:
                parsed = json.loads("".join(self._fragments) or "{}")  # pragma: no mutate
            except ValueError:
                parsed = {}  # pragma: no mutate
            args = parsed if isinstance(parsed, dict) else {}
        server_tool = dispatch.agent.server_tool(self.name)
        if server_tool is not None:
            return await self._run_server_tool(server_tool, args), "server"
        if dispatch.is_frontend_tool(self.name):
            if dispatch.defer_frontend:
                session.deferred_calls.append(self.tool_call_id)
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
        dispatch = self._dispatch
        call = self._pending or dispatch.pending.register(
            dispatch.run, self.tool_call_id, self.name
        )
        try:
            return await dispatch.pending.wait(call, dispatch.tool_timeout)
        except TimeoutError:
            return error_result(f"tool {self.name!r} timed out waiting for the client")
