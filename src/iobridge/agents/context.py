"""The agent-facing side of a run: ``RunContext`` and tool-call handles.

An agent sees the model-visible history, the declared frontend tools, the context entries and
forwardedProps, and calls tools with ``await ctx.call_tool(name, args)``. Whether the tool runs
on the server or in the frontend is the runtime's business: the agent code is the same.
``await ctx.interrupt(...)`` ends the run to ask for something (an approval, a value); the run
that answers it re-runs the agent, and the same call then returns the answer.
The runtime implements ``RunSession``; this module only describes it, so agents never import
the runtime.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from iobridge.errors import AgentError
from iobridge.protocol import events as ev
from iobridge.protocol.options import RunOptions
from iobridge.protocol.run_limits import RunLimits
from iobridge.protocol.text import validate_id
from iobridge.protocol.tool_results import ToolResult as ToolResult  # re-exported for agents

#: Most answers one series of interrupts may collect (the thread keeps them all, and every
#: resumed run of the series replays them): asking again past it fails the run.
MAX_INTERRUPT_SERIES = 100

if TYPE_CHECKING:
    from iobridge.agents.outputs import AgentOutput


#: The count fields of an AG-UI 1.0 ``TokenUsage`` (labels are ``provider`` and ``model``), and
#: the largest count a JSON reader keeps exactly.
USAGE_COUNTS = ev.USAGE_COUNTS
MAX_SAFE_INTEGER = ev.MAX_SAFE_INTEGER


def _labels(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: entry[k] for k in ("provider", "model") if k in entry}


ResumeStatus = Literal["resolved", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """The answer to one interrupt: a ``resume`` entry of the run that continues it."""

    interrupt_id: str
    #: ``resolved`` (answered; ``payload`` is the answer) or ``cancelled`` (abandoned).
    status: ResumeStatus
    payload: Any = None
    metadata: dict[str, Any] | None = None

    @property
    def cancelled(self) -> bool:
        """True when whoever answered abandoned the interrupt instead of resolving it."""
        return self.status == "cancelled"

    @classmethod
    def from_wire(cls, entry: Mapping[str, Any]) -> Resume:
        """From a validated ``resume`` entry (camelCase)."""
        return cls(
            interrupt_id=entry["interruptId"],
            status=entry["status"],
            payload=entry.get("payload"),
            metadata=entry.get("metadata"),
        )


class Interrupted(BaseException):
    """Raised by ``RunContext.interrupt``: the run finishes with the interrupt outcome.

    A ``BaseException`` so that an agent's ``except Exception`` does not swallow it; let it
    propagate out of ``Agent.run``. An agent fronting another one (an upstream that ended
    with several interrupts) raises it with all of them.
    """

    def __init__(self, interrupt: dict[str, Any], *more: dict[str, Any]) -> None:
        super().__init__(interrupt["id"])
        #: The first AG-UI ``Interrupt`` object (camelCase) the run finishes with.
        self.interrupt = interrupt
        #: All of them, in order.
        self.interrupts = [interrupt, *more]


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
        self, name: str, *, tool_call_id: str | None = None, local: bool = False
    ) -> ToolCallHandle:
        """Announce a tool call (TOOL_CALL_START) and return its handle.

        ``local``: the agent runs the call itself (a pydantic-ai tool, an MCP tool) and
        reports its outcome with ``complete``; the runtime never dispatches it.
        """
        ...

    def is_frontend_tool(self, name: str) -> bool:
        """Whether ``name`` is a frontend tool of this run."""
        ...

    def annotate(self, metadata: Mapping[str, Any] | None) -> None:
        """Give ``metadata`` to the events the next outputs produce, until the next call
        (``None``: stop); run-scoped events get none."""

    def answer_earlier_call(self, tool_call_id: str, result: ToolResult) -> None:
        """Emit TOOL_CALL_RESULT for a call an earlier run announced and left open (an
        interrupt this run resumes asked about it); it is not announced again."""

    async def subagent(
        self,
        agent_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        parent_tool_call_id: str | None = None,
    ) -> ToolResult:
        """Run the catalog agent ``agent_id`` on ``messages`` inside the run (a subagent)
        and return its answer as a tool result (failed when it failed)."""
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
    #: The shared state the run starts from: ``RunAgentInput.state`` when the client sent
    #: one, else the state the thread's last run ended with (``None`` on a new thread).
    state: Any = None
    #: The resource the run acts for (thread owner).
    resource_id: str = "default"
    session: RunSession
    #: Token usage of the run's model requests, as AG-UI ``TokenUsage`` objects (one per
    #: provider and model), reported on the terminal event; add to it with ``add_usage``.
    usage: list[dict[str, Any]] = field(default_factory=list)
    #: This run's answers to the interrupts the previous run ended with (``resume``),
    #: validated against the thread: each open interrupt answered exactly once.
    resume: list[Resume] = field(default_factory=list)
    #: Every answer since the thread's current series of interrupts began, in the order the
    #: interrupts were raised (earlier resumed runs' answers, then this run's):
    #: ``interrupt`` replays them to the re-run agent. Empty when the run does not resume.
    answered: list[Resume] = field(default_factory=list)
    #: The run's bounds (``protocol.run_limits``): an agent that reads JSON from elsewhere
    #: (an upstream server) checks it against ``limits.max_json_depth``.
    limits: RunLimits = field(default_factory=RunLimits)
    _interrupt_calls: int = field(default=0, init=False, repr=False)

    @property
    def resuming(self) -> bool:
        """True when this run continues an interrupted one (``resume`` answers it)."""
        return bool(self.resume)

    async def interrupt(
        self,
        reason: str,
        *,
        message: str | None = None,
        response_schema: Mapping[str, Any] | None = None,
        tool_call_id: str | None = None,
        expires_at: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> Resume:
        """Ask for something from outside the run and return the answer.

        The first time, this raises ``Interrupted``: the run finishes with
        ``RUN_FINISHED.outcome = {type: "interrupt", interrupts: [...]}`` and the thread
        keeps the open interrupt. The client answers it in the next run's ``resume``; that
        run calls the agent again from the start, and this call (the same one: the n-th
        ``interrupt`` call of the run, or the one with the same ``id``) returns the answer
        at once. Code before it runs again: keep it free of side effects, or check
        ``ctx.resuming``.

        Args:
            reason: why the run stops (an open string, e.g. ``"approval"``).
            message: a prompt for whoever answers.
            response_schema: JSON Schema of the expected ``payload``.
            tool_call_id: the tool call an approval concerns.
            expires_at: ISO 8601 time after which the answer is not wanted.
            metadata: anything else the UI needs (shown as ``metadata``).
            id: the interrupt's id (default: generated); matched by id when re-run.

        Raises:
            Interrupted: the run ends to ask (do not catch it).
            AgentError: ``TOO_MANY_INTERRUPTS``, the series already holds
                ``MAX_INTERRUPT_SERIES`` answers.
        """
        call = self._interrupt_calls
        self._interrupt_calls += 1
        if id is not None:
            validate_id(id, "interrupt id")
            answer = next((a for a in self.answered if a.interrupt_id == id), None)
        else:
            answer = self.answered[call] if call < len(self.answered) else None
        if answer is not None:
            return answer
        if len(self.answered) >= MAX_INTERRUPT_SERIES:
            raise AgentError(
                f"the agent asked more than {MAX_INTERRUPT_SERIES} times in a row",
                code="TOO_MANY_INTERRUPTS",
            )
        if not isinstance(reason, str) or not reason:
            raise ValueError("an interrupt needs a non-empty reason")
        interrupt: dict[str, Any] = {"id": id or uuid.uuid4().hex, "reason": reason}
        optional = {
            "message": message,
            "toolCallId": tool_call_id,
            "responseSchema": dict(response_schema) if response_schema is not None else None,
            "expiresAt": expires_at,
            "metadata": dict(metadata) if metadata is not None else None,
        }
        interrupt.update({k: v for k, v in optional.items() if v is not None})
        raise Interrupted(interrupt)

    @property
    def forwarded_props(self) -> dict[str, Any]:
        """The request's ``forwardedProps`` object as sent (unknown keys included)."""
        return self.options.props

    def emit(self, output: AgentOutput) -> None:
        """Send an output into the run stream."""
        self.session.emit(output)

    def answer_earlier_call(self, tool_call_id: str, result: ToolResult) -> None:
        """Report the result of a tool call announced by an earlier run of the thread and
        left open by the interrupt this run resumes (see ``RunSession``)."""
        self.session.answer_earlier_call(tool_call_id, result)

    def annotate(self, metadata: Mapping[str, Any] | None) -> None:
        """Give ``metadata`` (an AG-UI event ``metadata`` object) to the events of the next
        outputs, until the next call (``None``: stop). The key ``ag-ui`` is the protocol's:
        an agent does not write it."""
        self.session.annotate(metadata)

    def start_tool_call(
        self, name: str, *, tool_call_id: str | None = None, local: bool = False
    ) -> ToolCallHandle:
        """Announce a tool call whose arguments the agent will stream (see ``RunSession``)."""
        if local:
            return self.session.start_tool_call(name, tool_call_id=tool_call_id, local=True)
        return self.session.start_tool_call(name, tool_call_id=tool_call_id)

    def add_usage(self, provider: str | None, model: str | None, counts: Mapping[str, int]) -> None:
        """Add one model request's token counts (``TokenUsage`` keys such as ``inputTokens``).

        Counts of the same provider and model are summed, so the terminal event carries the
        run's total per model; counts that are not non-negative integers are ignored.
        """
        valid = {k: v for k, v in counts.items()
                 if k in USAGE_COUNTS and type(v) is int and v >= 0}
        if not valid:
            return
        labels = {k: v for k, v in (("provider", provider), ("model", model)) if v}
        entry = next((e for e in self.usage if _labels(e) == labels), None)
        if entry is None:
            entry = dict(labels)
            self.usage.append(entry)
        for key, value in valid.items():
            entry[key] = min(entry.get(key, 0) + value, MAX_SAFE_INTEGER)

    async def subagent(
        self, agent_id: str, messages: Sequence[Mapping[str, Any]] | str
    ) -> ToolResult:
        """Run the catalog agent ``agent_id`` inside this run, as a subagent (AG-UI 1.0).

        ``messages`` is its conversation (AG-UI messages; a string is one user message). Its
        events stream between SUBAGENT_STARTED and SUBAGENT_FINISHED (or SUBAGENT_ERROR),
        attributed to one ``subagentRunId``; its token usage adds to this run's. Returns its
        answer: its last assistant text as ``content`` (or its result as JSON, and as
        ``value``); ``is_error`` when it failed, interrupted, is unknown or would nest
        deeper than ``max_subagent_depth``. A subagent gets no frontend tools and no state.
        """
        if isinstance(messages, str):
            messages = [{"id": uuid.uuid4().hex, "role": "user", "content": messages}]
        return await self.session.subagent(agent_id, [dict(m) for m in messages])

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
