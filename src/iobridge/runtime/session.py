"""One run's session: agent outputs and tool calls in, guarded encoded events out.

``RunSession`` (what ``RunContext`` talks to) turns high-level outputs into AG-UI events,
runs them through the lifecycle guard and appends what the guard lets out to the run log,
encoding each event exactly once. It also folds the emitted events into the AG-UI messages
the run produced, for persistence.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from iobridge.agents import outputs as out
from iobridge.agents.context import ToolCallHandle, ToolResult
from iobridge.agents.tools import result_content
from iobridge.errors import InputError
from iobridge.protocol import events as ev
from iobridge.protocol.events import Event, encode_event
from iobridge.protocol.guard import LifecycleGuard
from iobridge.protocol.transcript import Transcript

if TYPE_CHECKING:
    from iobridge.runtime.run import Run

logger = logging.getLogger("iobridge.runtime")


class RunEnded(Exception):
    """The run already ended (invalid tool arguments, cancellation): the agent must stop."""


def _new_id() -> str:
    return uuid.uuid4().hex


class Session:
    """Implements ``iobridge.agents.context.RunSession`` for one run."""

    def __init__(self, run: Run, *, new_id: Callable[[], str] = _new_id) -> None:
        self.run = run
        self._new_id = new_id
        self.guard = LifecycleGuard(
            run.thread_id, run.run_id, parent_run_id=run.parent_run_id, new_id=new_id
        )
        self.transcript = Transcript()
        #: Value for RUN_FINISHED.result.
        self.result: Any = None
        #: Frontend tool calls handed to the client for a later run (next-run mode).
        self.deferred_calls: list[str] = []
        self._text_id: str | None = None
        #: The assistant message the current turn's text and tool calls belong to.
        self._assistant_id: str | None = None
        self._assistant_has_text = False
        self._reasoning: tuple[str, str] | None = None
        self._frontend_tools = {t["name"] for t in run.frontend_tools}
        self._terminal: bytes | None = None

    # -- plumbing --------------------------------------------------------------------

    def push(self, event: Event) -> None:
        """Offer one event to the guard and append what it releases."""
        self._append(self.guard.feed(event))

    def _append(self, events: list[Event]) -> None:
        log = self.run.log
        if events and events[-1]["type"] == ev.RUN_ERROR:
            # What the guard closes on the way to RUN_ERROR was cut short: not persisted.
            self.transcript.seal(complete=False)
        for event in events:
            self.transcript.apply(event)
            if event["type"] in ev.TERMINAL_TYPES:
                # Held until the run is concluded (messages stored, thread free), so a
                # client that sees the terminal event can read the thread or run again.
                self._terminal = encode_event(event)
            else:
                log.append(encode_event(event))

    def release_terminal(self) -> None:
        """Append the held terminal event and close the log (the run is over)."""
        log = self.run.log
        if self._terminal is not None and not log.closed:
            log.append(self._terminal)
        log.close()

    def start(self) -> None:
        """Emit RUN_STARTED."""
        self._append(self.guard.start())

    def finish(self, outcome: dict[str, Any] | None = None) -> None:
        """Close what is open and emit RUN_FINISHED."""
        if outcome is None and self.deferred_calls:
            outcome = {"type": "success", "pendingToolCallIds": list(self.deferred_calls)}
        self._append(self.guard.finish(result=self.result, outcome=outcome))

    def fail(self, message: str, code: str) -> None:
        """Close what is open and emit RUN_ERROR (cut-short messages are not persisted)."""
        self._append(self.guard.fail(message, code))

    # -- RunSession ------------------------------------------------------------------

    def is_frontend_tool(self, name: str) -> bool:
        """Whether ``name`` was declared by the client (and is not a server tool)."""
        return name in self._frontend_tools and self.run.agent.server_tool(name) is None

    def emit(self, output: out.AgentOutput) -> None:
        """Translate one agent output into events."""
        if type(output) is str and self._text_id is not None:
            # The hot path: one more delta of the open text message.
            events = self.guard.feed_text_content(self._text_id, output)
            if events:
                self._append(events)
                return
        if self.guard.ended:
            raise RunEnded()
        if type(output) is str:
            output = out.TextDelta(delta=output)
        elif isinstance(output, str):
            output = out.TextDelta(delta=str(output))
        match output:
            case out.TextDelta(delta=delta, message_id=message_id):
                self._close_reasoning()
                if message_id is not None and message_id != self._text_id:
                    self._close_text()
                    self._assistant_id = message_id
                    self._assistant_has_text = False
                if self._text_id is None:
                    if self._assistant_id is None or self._assistant_has_text:
                        # A message id carries one text message: closed text is final.
                        self._assistant_id = self._new_id()
                    self._text_id = self._assistant_id
                    self._assistant_has_text = True
                    self.push(ev.text_start(self._text_id))
                self.push(ev.text_content(self._text_id, delta))
            case out.TextEnd():
                self._close_text()
            case out.ReasoningDelta(delta=delta):
                self._close_text()
                if self._reasoning is None:
                    self._reasoning = (self._new_id(), self._new_id())
                    self.push(ev.reasoning_start(self._reasoning[0]))
                    self.push(ev.reasoning_message_start(self._reasoning[1]))
                self.push(ev.reasoning_message_content(self._reasoning[1], delta))
            case out.ReasoningEnd():
                self._close_reasoning()
            case out.StepStarted(name=name):
                self._close_open()
                self.push(ev.step_started(name))
            case out.StepFinished(name=name):
                self._close_open()
                self.push(ev.step_finished(name))
            case out.StateSnapshot(snapshot=snapshot):
                self.push(ev.state_snapshot(snapshot))
            case out.StateDelta(patch=patch):
                self.push(ev.state_delta(patch))
            case out.CustomEvent(name=name, value=value):
                self.push(ev.custom(name, value))
            case out.RawEvent(event=event):
                self.push(dict(event))
            case out.FinalResult(value=value):
                self.result = value
            case _:
                raise TypeError(f"not an agent output: {type(output).__name__}")

    def start_tool_call(self, name: str, *, tool_call_id: str | None = None) -> ToolCallHandle:
        """Announce a tool call (its events are released by the guard at TOOL_CALL_END)."""
        if self.guard.ended:
            raise RunEnded()
        self._close_open()
        if self._assistant_id is None:
            self._assistant_id = self._new_id()
            self._assistant_has_text = False
        call_id = tool_call_id or self._new_id()
        self.push(ev.tool_call_start(call_id, name, self._assistant_id))
        return _Handle(self, name, call_id)

    # -- helpers ---------------------------------------------------------------------

    def _close_text(self) -> None:
        if self._text_id is not None:
            self.push(ev.text_end(self._text_id))
            self._text_id = None

    def _close_reasoning(self) -> None:
        if self._reasoning is not None:
            span_id, message_id = self._reasoning
            self.push(ev.reasoning_message_end(message_id))
            self.push(ev.reasoning_end(span_id))
            self._reasoning = None

    def _close_open(self) -> None:
        self._close_reasoning()
        self._close_text()

    def tool_result(self, call_id: str, result: ToolResult) -> None:
        """Emit TOOL_CALL_RESULT; the next text starts a new assistant message."""
        self.push(ev.tool_call_result(self._new_id(), call_id, result.content))
        self.transcript.mark_error(call_id, result.content if result.is_error else None)
        self._assistant_id = None


def _error_result(message: str) -> ToolResult:
    return ToolResult(content=json.dumps({"error": message}), is_error=True)


class _Handle:
    """A tool call announced by an agent; see ``ToolCallHandle``."""

    def __init__(self, session: Session, name: str, tool_call_id: str) -> None:
        self._session = session
        self.name = name
        self.tool_call_id = tool_call_id
        self._fragments: list[str] = []
        self._ended = False
        self._pending: Any = None

    def add_args(self, delta: str) -> None:
        if not self._ended and delta:
            self._fragments.append(delta)
            self._session.push(ev.tool_call_args(self.tool_call_id, delta))

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        session = self._session
        run = session.run
        if session.is_frontend_tool(self.name) and not run.defer_frontend_tools:
            # Register before TOOL_CALL_END is visible: a fast client cannot post too early.
            self._pending = run.runtime.pending.register(run.run_id, self.tool_call_id, self.name)
        session.push(ev.tool_call_end(self.tool_call_id))

    async def result(self, args: Mapping[str, Any] | None = None) -> ToolResult:
        self.end()
        session = self._session
        run = session.run
        if session.guard.ended:
            raise RunEnded()
        if args is None:
            try:
                parsed = json.loads("".join(self._fragments) or "{}")
            except ValueError:
                parsed = {}
            args = parsed if isinstance(parsed, dict) else {}
        server_tool = run.agent.server_tool(self.name)
        if server_tool is not None:
            result = await self._run_server_tool(server_tool, args)
        elif session.is_frontend_tool(self.name):
            if run.defer_frontend_tools:
                session.deferred_calls.append(self.tool_call_id)
                return ToolResult(content="", deferred=True)
            result = await self._await_frontend()
        else:
            result = _error_result(f"unknown tool {self.name!r}")
        if session.guard.ended:
            raise RunEnded()
        session.tool_result(self.tool_call_id, result)
        return result

    async def _run_server_tool(self, tool: Any, args: Mapping[str, Any]) -> ToolResult:
        try:
            value = await tool.invoke(args)
        except InputError as exc:
            return _error_result(exc.message)
        except Exception:
            logger.exception("server tool %s failed", self.name)
            return _error_result(f"tool {self.name!r} failed")
        return ToolResult(content=result_content(value), value=value)

    async def _await_frontend(self) -> ToolResult:
        run = self._session.run
        registry = run.runtime.pending
        try:
            return await registry.wait(self._pending, run.runtime.settings.tool_timeout)
        except TimeoutError:
            return _error_result(f"tool {self.name!r} timed out waiting for the client")
