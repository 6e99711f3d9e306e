"""The agent-facing side of a run: ``RunContext`` and tool-call handles.

An agent sees the model-visible history, the declared frontend tools, the context entries and
forwardedProps, and calls tools with ``await ctx.call_tool(name, args)``. Whether the tool runs
on the server or in the frontend is the runtime's business: the agent code is the same.
The runtime implements ``RunSession``; this module only describes it, so agents never import
the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from iobridge.protocol.options import RunOptions

if TYPE_CHECKING:
    from iobridge.agents.outputs import AgentOutput


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The outcome of one tool call as the agent (and the model) sees it."""

    #: The result as text: JSON for structured values, as carried in TOOL_CALL_RESULT.
    content: str
    is_error: bool = False
    #: The structured value when there is one (server tools, posted ``result``).
    value: Any = None
    #: True when the call was handed to the client and its result arrives in a later run.
    deferred: bool = False


class ToolCallHandle(Protocol):
    """A tool call being announced; lets an agent stream its arguments before running it."""

    tool_call_id: str
    name: str

    def add_args(self, delta: str) -> None:
        """Emit one TOOL_CALL_ARGS fragment."""

    def end(self) -> None:
        """Emit TOOL_CALL_END (idempotent)."""

    async def result(self, args: Mapping[str, Any] | None = None) -> ToolResult:
        """End the call if needed, run or await it, emit TOOL_CALL_RESULT, return the result.

        ``args`` defaults to the JSON object the streamed fragments form.
        """
        ...

    def complete(self, result: ToolResult) -> None:
        """End the call if needed and emit TOOL_CALL_RESULT for a result produced elsewhere.

        For agents that front another agent (an upstream AG-UI server ran the tool): the call
        is reported as a server tool call, stored and replayed like one.
        """


class RunSession(Protocol):
    """What the runtime provides to a ``RunContext``."""

    def emit(self, output: AgentOutput) -> None:
        """Send an output into the run (same as yielding it from ``Agent.run``)."""

    def start_tool_call(
        self, name: str, *, tool_call_id: str | None = None
    ) -> ToolCallHandle:
        """Announce a tool call (TOOL_CALL_START) and return its handle."""
        ...

    def is_frontend_tool(self, name: str) -> bool:
        """Whether ``name`` is a frontend tool of this run."""
        ...


@dataclass(kw_only=True)
class RunContext:
    """Everything an agent needs for one run."""

    thread_id: str
    run_id: str
    #: Model-visible history (AG-UI message dicts, camelCase): stored thread memory plus the
    #: request's messages, with ``activity`` and ``reasoning`` removed and tool calls kept
    #: paired with their results.
    messages: list[dict[str, Any]]
    #: Tools declared by the client in ``RunAgentInput.tools`` (executed in the frontend).
    frontend_tools: list[dict[str, Any]] = field(default_factory=list)
    #: ``RunAgentInput.context`` entries (``{description, value}``).
    context: list[dict[str, Any]] = field(default_factory=list)
    #: ``forwardedProps``, parsed once at run start (unknown keys in ``options.props``).
    options: RunOptions = field(default_factory=RunOptions)
    state: Any = None
    #: The resource the run acts for (thread owner).
    resource_id: str = "default"
    session: RunSession

    @property
    def forwarded_props(self) -> dict[str, Any]:
        """The request's ``forwardedProps`` object as sent (unknown keys included)."""
        return self.options.props

    def emit(self, output: AgentOutput) -> None:
        """Send an output into the run stream."""
        self.session.emit(output)

    def start_tool_call(self, name: str, *, tool_call_id: str | None = None) -> ToolCallHandle:
        """Announce a tool call whose arguments the agent will stream."""
        return self.session.start_tool_call(name, tool_call_id=tool_call_id)

    async def call_tool(
        self, name: str, args: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None
    ) -> ToolResult:
        """Call a server or frontend tool and wait for its result.

        Emits TOOL_CALL_START/ARGS/END at once (so parallel calls started with
        ``asyncio.gather`` are announced together), then TOOL_CALL_RESULT when the result is
        known: at once for server tools, after the frontend posts it for frontend tools.
        """
        handle = self.session.start_tool_call(name, tool_call_id=tool_call_id)
        handle.add_args(json.dumps(dict(args or {}), separators=(",", ":")))
        return await handle.result(args or {})
