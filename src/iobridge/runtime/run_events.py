"""One run's events: agent outputs in, guarded encoded events out.

``RunEvents`` turns high-level agent outputs into AG-UI events, runs them through the
lifecycle guard and appends what the guard lets out to the run log, encoding each event
exactly once. It also folds the emitted events into the AG-UI messages the run produced, for
persistence. Tool calls are dispatched by :mod:`iobridge.runtime.agent_session`, which
announces them here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from iobridge.agents import outputs as out
from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import OPENS_OR_CLOSES
from iobridge.protocol.events import Event, encode_event
from iobridge.protocol.guard import DEFAULT_MAX_STATE_BYTES, LifecycleGuard
from iobridge.protocol.run_limits import RunLimits
from iobridge.protocol.text import has_nul_escape, replace_nul
from iobridge.protocol.tool_results import ToolResult
from iobridge.protocol.transcript import Transcript
from iobridge.runtime.run_ids import RunIds
from iobridge.runtime.runlog import RunLog


class RunEnded(Exception):
    """The run already ended (invalid tool arguments, cancellation): the agent must stop."""


def _new_id() -> str:
    return uuid.uuid4().hex


def _unencodable_terminal() -> Event:
    """What replaces a terminal event that cannot be encoded (a ``result`` nested too deep)."""
    return ev.run_error("The run's terminal event could not be encoded.", "AGENT_ERROR")


class RunEvents:
    """The event side of one run: outputs to guarded, encoded, logged events.

    Args:
        log: The run's log (what every transport follows).
        thread_id: Echoed in RUN_STARTED/RUN_FINISHED.
        run_id: Echoed in RUN_STARTED/RUN_FINISHED.
        parent_run_id: Echoed in RUN_STARTED when given.
        new_id: Id factory for messages and tool calls (injectable for tests).
        state: The shared state the run starts from (the guard tracks it from there).
        max_state_bytes: Bound of the shared state's JSON.
        limits: The run's other bounds (``protocol.run_limits``).
    """

    def __init__(
        self,
        log: RunLog,
        thread_id: str,
        run_id: str,
        *,
        parent_run_id: str | None = None,
        new_id: Callable[[], str] = _new_id,
        state: Any = None,
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        limits: RunLimits | None = None,
        pre_1_0: bool = False,
    ) -> None:
        self.log = log
        #: The client speaks AG-UI 0.x (no ``protocolVersion``): outcomes in 0.x shapes.
        self.pre_1_0 = pre_1_0
        self.new_id = new_id
        self.guard = LifecycleGuard(
            thread_id, run_id, parent_run_id=parent_run_id, new_id=new_id, state=state,
            max_state_bytes=max_state_bytes, limits=limits,
        )
        self.transcript = Transcript()
        #: Value for RUN_FINISHED.result.
        self.result: Any = None
        #: AG-UI ``TokenUsage`` entries for the terminal event (the agent's ``ctx.usage``).
        self.usage: list[dict[str, Any]] = []
        #: Frontend tool calls handed to the client for a later run (next-run mode).
        self.deferred_calls: list[str] = []
        #: The error text of failed tool results, by call id (for a durable point).
        self.tool_errors: dict[str, str] = {}
        #: A durable run's event ids (what clients have open after each event), else None.
        self.ids: RunIds | None = None
        self._reset_translation()
        self._terminal: bytes | None = None
        #: The run ended with RUN_FINISHED, not cancelled (a generated title is worth it).
        self.succeeded = False
        #: The run ended with RUN_ERROR.
        self.failed = False
        #: The interrupts the run finished with (``outcome.interrupts``), if it did.
        self.interrupts: list[dict[str, Any]] = []
        #: How the run ended: RUN_FINISHED's ``outcome.type`` (``success`` when it has none,
        #: ``cancelled``, ``interrupt``), or ``error`` with RUN_ERROR's ``code``.
        self.outcome = "success"
        self.error_code: str | None = None

    def _reset_translation(self) -> None:
        """The state of turning outputs into events: what is open for the agent now."""
        self._text_id: str | None = None
        #: The assistant message the current turn's text and tool calls belong to.
        self._assistant_id: str | None = None
        self._assistant_has_text = False
        self._reasoning: tuple[str, str] | None = None
        #: The run's last reasoning message (an encrypted value after its end belongs to it).
        self._last_reasoning: str | None = None

    # -- plumbing --------------------------------------------------------------------

    def push(self, event: Event) -> None:
        """Offer one event to the guard and append what it releases."""
        self._append(self.guard.feed(event))

    def _append(self, events: list[Event]) -> None:
        log, ids = self.log, self.ids
        if events and events[-1]["type"] == ev.RUN_ERROR:
            # What the guard closes on the way to RUN_ERROR was cut short: not persisted.
            self.transcript.seal(complete=False)
        for event in events:
            try:
                data = encode_event(event)
            except TypeError:  # orjson: nested past its depth limit, or not JSON
                if event["type"] not in ev.TERMINAL_TYPES:
                    raise  # the agent fails; its RUN_ERROR is encoded below
                # The guard has ended: without this the run would end with no terminal event.
                event = _unencodable_terminal()
                self.transcript.seal(complete=False)
                data = encode_event(event)
            if has_nul_escape(data):
                # U+0000 from the agent: replaced on the wire and in the transcript alike,
                # so the thread can store what the client saw (no store holds U+0000).
                event = replace_nul(event)
                data = encode_event(event)
            self.transcript.apply(event)
            if event["type"] in ev.TERMINAL_TYPES:
                self._hold_terminal(event, data)
            else:
                seq = log.append(data)
                if ids is not None and event["type"] in OPENS_OR_CLOSES:
                    ids.apply(seq, event)
                    ids.prune(log.first_seq)  # no change points for events the log dropped

    def _hold_terminal(self, event: Event, data: bytes) -> None:
        """Held until the run is concluded (messages stored, thread free), so a client that
        sees the terminal event can read the thread or run again."""
        outcome = event.get("outcome")
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        if self.pre_1_0 and isinstance(outcome, dict):
            legacy = {k: v for k, v in event.items() if k != "outcome"}
            shape = ev.pre_1_0_outcome(outcome)
            if shape is not None:
                legacy["outcome"] = shape
            data = encode_event(legacy)
        self._terminal = data
        self.succeeded = event["type"] == ev.RUN_FINISHED and kind != "cancelled"
        self.failed = event["type"] == ev.RUN_ERROR
        if kind == "interrupt" and isinstance(outcome, dict):
            self.interrupts = list(outcome["interrupts"])
        if self.failed:
            self.outcome, self.error_code = "error", str(event.get("code"))
        elif isinstance(kind, str):
            self.outcome = kind

    def answer_earlier_call(self, call_id: str, result: ToolResult) -> None:
        """TOOL_CALL_RESULT for a call of an earlier run that this run resumes."""
        if self.guard.ended:
            raise RunEnded()
        self.guard.allow_result(call_id)
        self.tool_result(call_id, result)

    def annotate(self, metadata: dict[str, Any] | None) -> None:
        """Give ``metadata`` to the events of the next outputs (see ``LifecycleGuard``)."""
        self.guard.annotate(metadata)

    def release_terminal(self) -> None:
        """Append the held terminal event and close the log (the run is over); a run that
        has none gets a last-resort RUN_ERROR, so every follower and resume sees one."""
        log = self.log
        if self._terminal is None and not log.closed:
            self._append([ev.run_error("The run ended without a terminal event.",
                                       "AGENT_ERROR")])
        if self._terminal is not None and not log.closed:
            log.append(self._terminal)
        log.close()

    def not_stored(self) -> None:
        """What the run produced could not be stored: a held RUN_FINISHED becomes RUN_ERROR
        ``STORE_UNAVAILABLE`` (a run is finished only if it was stored; a RUN_ERROR stays)."""
        if self._terminal is None or self.failed:
            return
        self._terminal = encode_event(ev.run_error(
            "what the run produced could not be stored", "STORE_UNAVAILABLE",
            usage=self.usage or None,
        ))
        self.succeeded, self.failed = False, True
        self.outcome, self.error_code = "error", "STORE_UNAVAILABLE"

    def start(self) -> None:
        """Emit RUN_STARTED."""
        self._append(self.guard.start())

    def finish(self, outcome: dict[str, Any] | None = None) -> None:
        """Close what is open and emit RUN_FINISHED."""
        if outcome is None and self.deferred_calls:
            outcome = {"type": "success", "pendingToolCallIds": list(self.deferred_calls)}
        self._append(
            self.guard.finish(result=self.result, outcome=outcome, usage=self.usage or None)
        )

    def fail(self, message: str, code: str) -> None:
        """Close what is open and emit RUN_ERROR (cut-short messages are not persisted)."""
        self._append(self.guard.fail(message, code, usage=self.usage or None))

    # -- agent outputs ---------------------------------------------------------------

    def emit(self, output: out.AgentOutput) -> None:
        """Translate one agent output into events."""
        # The hot path: one more delta of the open text message. Anything else, or a delta
        # it does not take, goes down the general path below, which gives the same events.
        # It buys ~35 % of the server CPU per event of long replies (bench/load_runs.py A/B).
        if type(output) is str and self._text_id is not None:  # pragma: no mutate
            events = self.guard.feed_text_content(self._text_id, output)  # pragma: no mutate
            if events:
                self._append(events)
                return
        if self.guard.ended:
            raise RunEnded()
        if isinstance(output, str):
            output = out.TextDelta(delta=str(output))
        match output:
            case out.TextDelta(delta=delta, message_id=message_id):
                self._text(delta, message_id)
            case out.TextEnd():
                self._close_text()
            case out.ReasoningDelta(delta=delta):
                self._reasoning_delta(delta)
            case out.ReasoningEnd():
                self._close_reasoning()
            case out.ReasoningEncryptedValue(value=value, tool_call_id=call, metadata=metadata):
                self._encrypted_value(value, call, metadata)
            case _:
                self._emit_other(output)

    def _text(self, delta: str, message_id: str | None) -> None:
        self._close_reasoning()
        if message_id is not None and message_id != self._text_id:
            self._close_text()
            self._assistant_id = message_id
            self._assistant_has_text = False
        if self._text_id is None:
            if self._assistant_id is None or self._assistant_has_text:
                # A message id carries one text message: closed text is final.
                self._assistant_id = self.new_id()
            self._text_id = self._assistant_id
            self._assistant_has_text = True
            self.push(ev.text_start(self._text_id))
        self.push(ev.text_content(self._text_id, delta))

    def _reasoning_delta(self, delta: str) -> None:
        self._close_text()
        if self._reasoning is None:
            self._reasoning = (self.new_id(), self.new_id())
            self.push(ev.reasoning_start(self._reasoning[0]))
            self.push(ev.reasoning_message_start(self._reasoning[1]))
        self.push(ev.reasoning_message_content(self._reasoning[1], delta))

    def _emit_other(self, output: out.AgentOutput) -> None:
        """Steps, state, custom and raw events, the final result."""
        match output:
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

    def open_tool_call(self, name: str, tool_call_id: str | None) -> str:
        """Announce a tool call (TOOL_CALL_START) on the current assistant message.

        The guard releases the call's events at TOOL_CALL_END. Returns the call's id.
        """
        if self.guard.ended:
            raise RunEnded()
        self._close_open()
        if self._assistant_id is None:
            self._assistant_id = self.new_id()
            self._assistant_has_text = False
        call_id = tool_call_id or self.new_id()
        self.push(ev.tool_call_start(call_id, name, self._assistant_id))
        return call_id

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
            self._last_reasoning = message_id

    def _encrypted_value(
        self, value: str, tool_call_id: str | None, metadata: dict[str, Any] | None
    ) -> None:
        if tool_call_id is not None:
            self.push(ev.reasoning_encrypted_value("tool-call", tool_call_id, value, metadata))
            return
        if self._reasoning is None and self._last_reasoning is None:
            # Opaque reasoning with nothing readable: an empty reasoning message holds it.
            self._close_text()
            self._reasoning = (self.new_id(), self.new_id())
            self.push(ev.reasoning_start(self._reasoning[0]))
            self.push(ev.reasoning_message_start(self._reasoning[1]))
        entity = self._reasoning[1] if self._reasoning is not None else self._last_reasoning
        assert entity is not None
        self.push(ev.reasoning_encrypted_value("message", entity, value, metadata))

    def _close_open(self) -> None:
        self._close_reasoning()
        self._close_text()

    def close_open(self) -> None:
        """Close the open text and reasoning messages (an agent's turn is over)."""
        self._close_open()

    def tool_result(self, call_id: str, result: ToolResult) -> None:
        """Emit TOOL_CALL_RESULT; the next text starts a new assistant message."""
        self.push(ev.tool_call_result(self.new_id(), call_id, result.parts or result.content))
        if result.is_error:
            self.tool_errors[call_id] = result.content
            self.transcript.mark_error(call_id, result.content)
        self._assistant_id = None

    def close_steps(self) -> None:
        """Finish the run's own open steps (a durable run parks with none open)."""
        self._append(self.guard.close_steps())

    @property
    def quiet(self) -> bool:
        """Nothing is open for clients: no text message, no reasoning (a durable point)."""
        return self._text_id is None and self._reasoning is None

