"""The lifecycle guard: whatever an agent emits, the wire gets a valid AG-UI run.

Theory of operation
-------------------
The guard sits between an agent (through the runtime) and the run log. It is a sans-IO
state machine: it takes candidate events (dicts) and returns the events to put on the wire.
It never raises for anything an agent does; every problem is repaired or turned into a
terminal ``RUN_ERROR``. It enforces the seven guarantees of the io.Intelligence Agent
Protocol, plus what ``@ag-ui/client`` checks (``verifyEvents``):

1. ``RUN_STARTED`` is first and echoes ``threadId``/``runId``: the guard emits it itself,
   before the first event, and drops any ``RUN_STARTED`` an agent emits.
2. Exactly one terminal event (``RUN_FINISHED`` or ``RUN_ERROR``) is last, and
3. nothing follows it: after ``finish``/``fail`` the guard is ``ENDED`` and returns nothing.
4. Every text message (and reasoning message/span, and step) is closed before the
   terminal event: ``finish``/``fail`` close what is open, innermost first.
5. Every tool call is closed. The guard *holds back* a tool call (START, ARGS…) until its
   TOOL_CALL_END and releases it whole only if the concatenated TOOL_CALL_ARGS parse as
   JSON (guarantee 7 below).
6. Empty ``TEXT_MESSAGE_CONTENT`` deltas are dropped.
7. Concatenated ``TOOL_CALL_ARGS`` form valid JSON (``{}`` is inserted when there were no
   fragments). If they do not, the call is never shown and the run ends with RUN_ERROR
   ``INVALID_TOOL_ARGS``: a frontend must never execute a tool with broken arguments, and
   an announced call could not be closed validly. Holding back costs only the live display
   of argument streaming, which a UI cannot act on before TOOL_CALL_END anyway.

Shared state: the guard keeps the run's current state (the state the run started from,
then each STATE_SNAPSHOT, each STATE_DELTA applied by ``protocol.json_patch``; ``None``
counts as ``{}``, the client's initial state). A delta that is not a valid RFC 6902 patch or
does not apply to the current state is never shown and the run ends with RUN_ERROR
``INVALID_STATE_DELTA``: a client applying it would fail or silently diverge from what the
agent believes, and the next run would start from a state nobody agreed on. A state whose
JSON would exceed ``max_state_bytes`` or nest deeper than ``max_json_depth``, even between
two operations of one patch, ends the run with ``STATE_TOO_LARGE``; a patch of more than
``max_state_patch_ops`` operations, or one that would copy more than a few times the
state's bound, with ``STATE_DELTA_TOO_LARGE``. ``shared_state`` is what the client holds at
the end (the thread keeps it for the next run).

Bounds (``RunLimits``): the messages a run produces (text and reasoning deltas, tool-call
arguments, held back or released, tool results, ids) count against
``max_run_output_bytes``; one byte more ends the run with ``RUN_OUTPUT_TOO_LARGE``, so
neither the transcript nor the held-back calls grow without bound. Tool-call arguments that
nest deeper than ``max_json_depth`` are ``INVALID_TOOL_ARGS``. The interrupts of
``outcome`` may encode to at most ``max_interrupt_bytes`` (``INTERRUPTS_TOO_LARGE``). A
terminal event that would not encode (a result that is not JSON or nests deeper than
``max_json_depth``) becomes RUN_ERROR ``INVALID_RESULT``: the terminal event is the one
event that must always reach the log. The events that carry an agent's values as they are
(CUSTOM, RAW, ACTIVITY_*, MESSAGES_SNAPSHOT and unknown types carried in RAW) are checked the
same way before they are emitted; one that would not encode ends the run with
``INVALID_EVENT`` (what an upstream sends is checked when it is decoded, so this concerns a
Python agent's values: a ``set``, an ``int`` beyond 64 bits, a nest too deep).

The run-level machine has three states (``GuardState``): ``IDLE`` until the first input,
which emits RUN_STARTED and moves to ``RUNNING``; ``ENDED`` once ``finish``/``fail`` emitted
the terminal event. Nothing moves it back; in ``ENDED`` every call returns nothing.

Subagents (AG-UI 1.0): a subagent invocation is open from its SUBAGENT_STARTED to its
SUBAGENT_FINISHED or SUBAGENT_ERROR; its id is used once per run, and a nested one names an
open parent (``parentSubagentRunId``). An event attributed to a subagent (``subagentRunId``)
that is not open is dropped, and so is one whose attribution differs from the owner of the
message, tool call, reasoning message or step it continues (an unattributed continuation
gets its owner's id); a tool call whose ``parentMessageId`` belongs to another owner loses
that link. Run-scoped events (RUN_*, MESSAGES_SNAPSHOT) never carry a ``subagentRunId``.
Ending a subagent first ends its open subagents and closes what it still has open, so every
attributed event lies inside its invocation; the run's end closes every open subagent (with
SUBAGENT_ERROR when the run fails).

Repairs: content for a message that is not open opens it; END/RESULT for unknown ids,
duplicate STARTs, events without a string ``type``, non-integer timestamps and ``null``
fields are dropped; CHUNK events are expanded into START/CONTENT. Event types AG-UI 1.0 does
not define are carried inside a RAW event (``{"type": "RAW", "event": ...}``): the client
validates every event against its schema and would fail the run on an unknown type.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import OpenState
from iobridge.protocol.events import Event
from iobridge.protocol.json_limits import depth_exceeds, encodes_within
from iobridge.protocol.json_patch import PatchError, PatchTooLarge, apply_patch
from iobridge.protocol.media import content_problems
from iobridge.protocol.run_limits import INTERRUPTS_TOO_LARGE, RUN_OUTPUT_TOO_LARGE, RunLimits
from iobridge.protocol.text import is_id


class GuardState(enum.Enum):
    """Run-level states (see the module docstring)."""

    #: Nothing emitted yet; the first input emits RUN_STARTED.
    IDLE = "idle"
    #: RUN_STARTED emitted; events flow.
    RUNNING = "running"
    #: The terminal event was emitted; every later input yields nothing.
    ENDED = "ended"

INVALID_TOOL_ARGS = "INVALID_TOOL_ARGS"
INVALID_STATE_DELTA = "INVALID_STATE_DELTA"
INVALID_INTERRUPT = "INVALID_INTERRUPT"
#: Most interrupts one run may finish with (the thread keeps them until answered).
MAX_INTERRUPTS = 100
STATE_TOO_LARGE = "STATE_TOO_LARGE"
STATE_DELTA_TOO_LARGE = "STATE_DELTA_TOO_LARGE"
#: A terminal event that would not encode (its result is not JSON, or nests too deep).
INVALID_RESULT = "INVALID_RESULT"
#: A CUSTOM, RAW or other pass-through event that would not encode.
INVALID_EVENT = "INVALID_EVENT"
#: Default bound of the shared state's JSON (``Settings.max_state_bytes``).
DEFAULT_MAX_STATE_BYTES = 1024 * 1024
#: Code of a RUN_ERROR an agent emitted without one (every RUN_ERROR carries a code).
AGENT_ERROR = "AGENT_ERROR"
#: Roles a TEXT_MESSAGE_START may carry (anything else becomes ``assistant``).
TEXT_ROLES = frozenset({"developer", "system", "assistant", "user"})
SUBAGENT_STARTED = "SUBAGENT_STARTED"
SUBAGENT_FINISHED = "SUBAGENT_FINISHED"
SUBAGENT_ERROR = "SUBAGENT_ERROR"


@dataclass(slots=True)
class _PendingCall:
    start: Event
    fragments: list[str] = field(default_factory=list)


def _new_id() -> str:
    return uuid.uuid4().hex


class LifecycleGuard:
    """Turns any sequence of candidate events into a valid AG-UI run.

    Args:
        thread_id: The request's threadId, echoed in RUN_STARTED/RUN_FINISHED.
        run_id: The request's runId.
        parent_run_id: Echoed in RUN_STARTED when given.
        new_id: Id factory for messages the guard has to create (injectable for tests).
        state: The shared state the run starts from (JSON).
        max_state_bytes: Largest JSON encoding the shared state may reach.
        limits: The run's other bounds (see the module docstring).
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        parent_run_id: str | None = None,
        new_id: Callable[[], str] = _new_id,
        state: Any = None,
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        limits: RunLimits | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self._new_id = new_id
        self.state = GuardState.IDLE
        #: Open text messages (insertion ordered), by messageId.
        self._texts: dict[str, None] = {}
        #: Text message ids already closed: never reopened (ag-ui-validate AGUI104).
        self._closed_texts: set[str] = set()
        #: Open subagent invocations (in order of start) -> their parent invocation.
        self._subagents: dict[str, str | None] = {}
        #: Invocations that ended: an id is used once per run.
        self._ended_subagents: set[str] = set()
        #: Owners of what subagents opened, by id (absent: the run's own agent).
        self._text_owners: dict[str, str] = {}
        self._call_owners: dict[str, str] = {}
        self._reasoning_owners: dict[str, str] = {}
        self._reasoning_messages: dict[str, None] = {}
        self._reasoning_spans: dict[str, None] = {}
        #: Open steps as (owner, name): each subagent has its own step names.
        self._steps: list[tuple[str | None, str]] = []
        self._calls: dict[str, _PendingCall] = {}
        #: Tool calls released (closed) and whether their result was sent.
        self._closed_calls: dict[str, bool] = {}
        self._chunk_text: str | None = None
        self._chunk_reasoning: str | None = None
        self._chunk_call: str | None = None
        self._out: list[Event] = []
        #: The shared state as the client holds it after the events emitted so far.
        self.shared_state: Any = state
        self._max_state_bytes = max_state_bytes
        #: Encoded size of ``shared_state`` (measured at the first delta, then tracked).
        self._state_size: int | None = None
        self.limits = limits or RunLimits()
        #: Bytes of messages produced so far (``RunLimits.max_run_output_bytes``).
        self.output_bytes = 0
        #: Metadata given to every event fed while it is set (``annotate``).
        self._annotation: dict[str, Any] | None = None

    # -- public API ------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """True once the terminal event has been emitted."""
        return self.state is GuardState.ENDED

    def start(self) -> list[Event]:
        """Emit RUN_STARTED (idempotent)."""
        self._ensure_started()
        return self._drain()

    def feed(self, event: Event) -> list[Event]:
        """Offer one candidate event; returns the events to emit now (possibly none)."""
        if self.state is GuardState.ENDED:
            return []
        self._ensure_started()
        annotation = self._annotation
        if annotation is not None and event.get("type") not in _RUN_SCOPED:
            own = event.get("metadata")
            event = {**event, "metadata": {**annotation, **own} if isinstance(own, dict)
                     else annotation}
        self._handle(event)
        return self._drain()

    def allow_result(self, tool_call_id: str) -> None:
        """Let one TOOL_CALL_RESULT through for a call announced in an earlier run, which
        this run resumes (an approval interrupt left it open). The client files the result
        after the call it already holds; nothing is announced again."""
        if is_id(tool_call_id) and tool_call_id not in self._calls:
            self._closed_calls.setdefault(tool_call_id, False)

    def annotate(self, metadata: dict[str, Any] | None) -> None:
        """Give ``metadata`` to every event fed from now on (an event's own keys win), until
        the next call; ``None`` or ``{}`` stops. For events that translate another agent's
        (an upstream AG-UI server's ``metadata`` passes through); run-scoped events
        (RUN_STARTED, RUN_FINISHED, RUN_ERROR) are the bridge's own and get none."""
        self._annotation = dict(metadata) if metadata else None

    # -- what clients have open (durable runs: ``protocol.event_ids``) ----------------

    @property
    def nothing_open(self) -> bool:
        """No message, reasoning, step or subagent is open (calls may wait for results)."""
        return not (self._texts or self._reasoning_messages or self._reasoning_spans
                    or self._steps or self._subagents)

    @property
    def open_steps(self) -> list[tuple[str | None, str]]:
        """The open steps (owner, name), outermost first."""
        return list(self._steps)

    @property
    def open_besides_steps(self) -> bool:
        """A message, reasoning or subagent is open."""
        return bool(self._texts or self._reasoning_messages or self._reasoning_spans
                    or self._subagents)

    def continue_from(self, *, output_bytes: int, pending: list[str]) -> None:
        """Go on from a durable point another process reached: RUN_STARTED was emitted
        there, nothing is open, the calls ``pending`` wait for their results."""
        self.state = GuardState.RUNNING
        self.output_bytes = output_bytes
        for call_id in pending:
            self._closed_calls[call_id] = False

    def open_state(self) -> OpenState:
        """What a client that received every event emitted so far has open."""
        texts, reasoning = self._text_owners, self._reasoning_owners
        return OpenState(
            steps=tuple(self._steps),
            texts=tuple((texts.get(m), m) for m in self._texts),
            reasoning_messages=tuple((reasoning.get(m), m) for m in self._reasoning_messages),
            reasoning_spans=tuple((reasoning.get(m), m) for m in self._reasoning_spans),
            subagents=tuple(self._subagents.items()),
            pending=tuple(c for c, answered in self._closed_calls.items() if not answered),
        )

    def prime(self, state: OpenState) -> None:
        """Take ``state`` as what is open, as if the events that opened it were emitted
        (RUN_STARTED included: nothing is emitted for it)."""
        self.state = GuardState.RUNNING
        self._steps = list(state.steps)
        for owner, message_id in state.texts:
            self._texts[message_id] = None
            if owner is not None:
                self._text_owners[message_id] = owner
        for table, items in ((self._reasoning_messages, state.reasoning_messages),
                             (self._reasoning_spans, state.reasoning_spans)):
            for owner, message_id in items:
                table[message_id] = None
                if owner is not None:
                    self._reasoning_owners[message_id] = owner
        self._subagents.update(state.subagents)
        for call_id in state.pending:
            self._closed_calls[call_id] = False

    def close_steps(self) -> list[Event]:
        """Finish the run's own open steps, innermost first (a durable run parks with none
        open: a step is a span of the agent's work, and the wait is the client's)."""
        for owner, name in reversed(list(self._steps)):
            if owner is None:
                self._on_step_finished(ev.step_finished(name))
        return self._drain()

    def feed_text_content(self, message_id: str, delta: str) -> list[Event]:
        """``feed`` of a TEXT_MESSAGE_CONTENT built by the caller (the hot path of a run).

        Same rules as ``feed``; the common case (an open message, a non-empty string
        delta) skips the generic dispatch.
        """
        if (
            self.state is GuardState.RUNNING
            and message_id in self._texts
            and message_id not in self._text_owners
            and type(delta) is str
            and delta
            and self._annotation is None
        ):
            # _spend(_text_bytes(delta)) written out: two calls fewer per delta.
            self.output_bytes += (
                len(delta) if delta.isascii() else len(delta.encode("utf-8", "surrogatepass"))
            )
            if self.output_bytes > self.limits.max_run_output_bytes:
                self._overspent()
                return self._drain()
            return [{"type": ev.TEXT_MESSAGE_CONTENT, "messageId": message_id, "delta": delta}]
        return self.feed(ev.text_content(message_id, delta))

    def finish(
        self,
        *,
        result: Any = None,
        outcome: dict[str, Any] | None = None,
        usage: list[dict[str, Any]] | None = None,
    ) -> list[Event]:
        """Close everything open and emit RUN_FINISHED (with ``usage`` when there is some)."""
        if self.ended:
            return []
        self._ensure_started()
        self._finish(result, outcome, usage)
        return self._drain()

    def fail(
        self, message: str, code: str | None = None, *, usage: list[dict[str, Any]] | None = None
    ) -> list[Event]:
        """Close everything open and emit RUN_ERROR (with ``usage`` when there is some)."""
        if self.ended:
            return []
        self._ensure_started()
        self._close_all(failed=True)
        self._terminate(ev.run_error(message, code, usage=usage))
        return self._drain()

    # -- machinery -------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self.state is GuardState.IDLE:
            self.state = GuardState.RUNNING
            self._out.append(ev.run_started(self.thread_id, self.run_id, self.parent_run_id))

    def _terminate(self, event: Event) -> None:
        if self.state is GuardState.ENDED:
            return
        # The event itself is one level: what it carries may nest max_json_depth below it.
        if not encodes_within(event, self.limits.max_json_depth + 1):
            event = ev.run_error(
                "The agent ended the run with a terminal event that cannot be encoded as JSON "
                f"(or whose result nests deeper than {self.limits.max_json_depth} levels).",
                INVALID_RESULT,
                usage=event.get("usage"),
            )
        self._out.append(event)
        self.state = GuardState.ENDED

    def _spend(self, nbytes: int) -> bool:
        """Count ``nbytes`` of produced messages; past the bound, end the run (``False``)."""
        if self.state is GuardState.ENDED:
            return False
        self.output_bytes += nbytes
        if self.output_bytes <= self.limits.max_run_output_bytes:
            return True
        self._overspent()
        return False

    def _overspent(self) -> None:
        """End the run: its messages went past ``max_run_output_bytes``."""
        self._close_all()
        self._terminate(
            ev.run_error(
                f"The run produced more than {self.limits.max_run_output_bytes} bytes of "
                "messages.",
                RUN_OUTPUT_TOO_LARGE,
            )
        )

    def _drain(self) -> list[Event]:
        out, self._out = self._out, []
        return out

    def _emit(self, event: Event) -> None:
        if self.state is not GuardState.ENDED:  # nothing follows the terminal event
            self._out.append(event)

    def _close_all(self, *, failed: bool = True) -> None:
        # Held-back tool calls were never shown: dropping them keeps the stream valid and
        # never lets a frontend run a call whose arguments were not finished.
        self._calls.clear()
        self._chunk_call = None
        self._chunk_text = None
        self._chunk_reasoning = None
        owners = self._reasoning_owners
        for message_id in list(self._reasoning_messages):
            self._emit(_owned(ev.reasoning_message_end(message_id), owners.get(message_id)))
        self._reasoning_messages.clear()
        for span_id in list(self._reasoning_spans):
            self._emit(_owned(ev.reasoning_end(span_id), owners.get(span_id)))
        self._reasoning_spans.clear()
        for message_id in list(self._texts):
            self._emit(_owned(ev.text_end(message_id), self._text_owners.get(message_id)))
        self._texts.clear()
        for owner, name in reversed(self._steps):
            self._emit(_owned(ev.step_finished(name), owner))
        self._steps.clear()
        for subagent_id in reversed(list(self._subagents)):
            self._emit(_subagent_end(subagent_id, failed=failed))
            self._ended_subagents.add(subagent_id)
        self._subagents.clear()

    def _close_owned(self, owner: str) -> None:
        """Close what the subagent invocation ``owner`` still has open (its held tool calls
        were never shown: they are dropped)."""
        for call_id in [c for c in self._calls if self._call_owners.get(c) == owner]:
            del self._calls[call_id]
            if self._chunk_call == call_id:
                self._chunk_call = None
        reasoning = self._reasoning_owners
        for message_id in [m for m in self._reasoning_messages if reasoning.get(m) == owner]:
            self._on_reasoning_message_end(_owned(ev.reasoning_message_end(message_id), owner))
        for span_id in [m for m in self._reasoning_spans if reasoning.get(m) == owner]:
            self._on_reasoning_end(_owned(ev.reasoning_end(span_id), owner))
        for message_id in [m for m in self._texts if self._text_owners.get(m) == owner]:
            self._on_text_end(_owned(ev.text_end(message_id), owner))
        for step_owner, name in reversed(list(self._steps)):
            if step_owner == owner:
                self._on_step_finished(_owned(ev.step_finished(name), owner))

    def _attributed(self, event: Event, owners: dict[str, str], entity: Any) -> bool:
        """Whether ``event`` may continue ``entity`` (a message, call or reasoning id): its
        ``subagentRunId`` must be the entity's owner; an unattributed one gets it."""
        owner = owners.get(entity) if isinstance(entity, str) else None
        if owner is not None and owner not in self._subagents:
            return False  # its subagent ended: nothing of it comes after
        claimed = event.get("subagentRunId")
        if claimed is None:
            if owner is not None:
                event["subagentRunId"] = owner
            return True
        return bool(claimed == owner)

    def _opens(self, event: Event, owners: dict[str, str], entity: str) -> bool:
        """Whether ``event`` may open ``entity`` (a reasoning id: one may be opened again
        once closed): an id a subagent owns stays its; any other is whoever opens it."""
        return entity not in owners or self._attributed(event, owners, entity)

    def _handle(self, event: Event) -> None:
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            return
        clean = _clean(event)
        required = _REQUIRED.get(kind)
        if required is not None and not all(check(clean.get(f)) for f, check in required):
            return
        if "subagentRunId" in clean and kind not in _SUBAGENT_TYPES:
            claimed = clean["subagentRunId"]
            if kind in _RUN_SCOPED or kind == ev.MESSAGES_SNAPSHOT:
                del clean["subagentRunId"]  # about the run itself: never a subagent's
            elif not isinstance(claimed, str) or claimed not in self._subagents:
                return  # work of a subagent that is not running (or never was)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, clean)
        elif not encodes_within(clean, self.limits.max_json_depth + 1):
            self._close_all()
            self._terminate(
                ev.run_error(
                    f"The agent produced {kind if kind in PASS_THROUGH else 'an unknown'} event "
                    "that cannot be encoded as JSON "
                    f"(or that nests deeper than {self.limits.max_json_depth} levels).",
                    INVALID_EVENT,
                )
            )
        elif kind in PASS_THROUGH:
            self._emit(clean)
        else:
            # A type the client does not know would fail its schema check and the whole run:
            # carry it as a RAW event instead, so nothing is lost and the stream stays valid.
            self._emit({"type": ev.RAW, "event": clean, "source": RAW_SOURCE})

    # -- run lifecycle ---------------------------------------------------------------

    def _on_run_started(self, event: Event) -> None:
        """The guard emits RUN_STARTED itself; an agent's copy is dropped."""

    def _on_run_finished(self, event: Event) -> None:
        self._finish(event.get("result"), event.get("outcome"), _valid_usage(event.get("usage")))

    def _finish(
        self, result: Any, outcome: Any, usage: list[dict[str, Any]] | None = None
    ) -> None:
        self._close_all(failed=False)
        valid = _valid_outcome(outcome)
        if valid is None and isinstance(outcome, dict) and outcome.get("type") == "interrupt":
            # An interrupted run must not be reported as a success (AG-UI 1.0).
            self._terminate(
                ev.run_error(
                    "The agent interrupted the run with malformed interrupts (1 to "
                    f"{MAX_INTERRUPTS}, each with a unique id and a reason).",
                    INVALID_INTERRUPT,
                    usage=usage,
                )
            )
            return
        if valid is not None and valid["type"] == "interrupt":
            limit = self.limits.max_interrupt_bytes
            if not encodes_within(valid["interrupts"], self.limits.max_json_depth) or len(
                orjson.dumps(valid["interrupts"])
            ) > limit:
                self._terminate(
                    ev.run_error(
                        f"The agent's interrupts exceed {limit} bytes of JSON (or do not "
                        "encode).",
                        INTERRUPTS_TOO_LARGE,
                        usage=usage,
                    )
                )
                return
        self._terminate(
            ev.run_finished(self.thread_id, self.run_id, result=result, outcome=valid, usage=usage)
        )

    def _on_run_error(self, event: Event) -> None:
        message = event.get("message")
        code = event.get("code")
        self._close_all()
        self._terminate(
            ev.run_error(
                message if isinstance(message, str) and message else "The run failed.",
                code if isinstance(code, str) and code else AGENT_ERROR,
            )
        )

    # -- text ------------------------------------------------------------------------

    def _on_text_start(self, event: Event) -> None:
        message_id = event.get("messageId")
        if (
            not is_id(message_id)
            or message_id in self._texts
            or message_id in self._closed_texts
        ):
            return
        if "role" in event and event["role"] not in TEXT_ROLES:
            event["role"] = "assistant"
        if "name" in event and not isinstance(event["name"], str):
            del event["name"]
        if not self._spend(_ID_COST + len(message_id)):
            return
        self._texts[message_id] = None
        if "subagentRunId" in event:
            self._text_owners[message_id] = event["subagentRunId"]
        self._emit(event)

    def _on_text_content(self, event: Event) -> None:
        message_id = event.get("messageId")
        delta = event.get("delta")
        if not is_id(message_id) or not isinstance(delta, str) or not delta:
            return
        if message_id in self._closed_texts:
            return
        if message_id not in self._texts:
            self._on_text_start(_owned(ev.text_start(message_id), event.get("subagentRunId")))
            if message_id not in self._texts:
                return
        if not self._attributed(event, self._text_owners, message_id):
            return
        if self._spend(_text_bytes(delta)):
            self._emit(event)

    def _on_text_end(self, event: Event) -> None:
        message_id = event.get("messageId")
        if (
            is_id(message_id)
            and message_id in self._texts
            and self._attributed(event, self._text_owners, message_id)
        ):
            del self._texts[message_id]
            self._closed_texts.add(message_id)
            if self._chunk_text == message_id:
                self._chunk_text = None
            self._emit(event)

    def _on_text_chunk(self, event: Event) -> None:
        message_id = event.get("messageId")
        if is_id(message_id) and message_id != self._chunk_text:
            if self._chunk_text is not None and self._chunk_text in self._texts:
                self._on_text_end(ev.text_end(self._chunk_text))
            self._chunk_text = message_id
            role = event.get("role")
            start = ev.text_start(message_id, role if role in TEXT_ROLES else "assistant")
            self._on_text_start(_owned(start, event.get("subagentRunId")))
        if self._chunk_text is None:
            return
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            self._on_text_content(
                _owned(ev.text_content(self._chunk_text, delta), event.get("subagentRunId"))
            )

    # -- tool calls ------------------------------------------------------------------

    def _on_tool_start(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        name = event.get("toolCallName")
        if (
            not is_id(call_id)
            or not call_id
            or not isinstance(name, str)
            or not name
            or call_id in self._calls
            or call_id in self._closed_calls
        ):
            return
        parent = event.get("parentMessageId")
        owner = event.get("subagentRunId")
        if "parentMessageId" in event and (
            not is_id(parent)
            or (
                (parent in self._texts or parent in self._closed_texts)
                and self._text_owners.get(parent) != owner
            )
        ):
            # A call belongs to the message that carries it: not to another owner's.
            del event["parentMessageId"]
        if self._spend(_ID_COST + len(call_id) + len(name)):
            self._calls[call_id] = _PendingCall(start=event)
            if owner is not None:
                self._call_owners[call_id] = owner

    def _on_tool_args(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        call = self._calls.get(call_id) if is_id(call_id) else None
        delta = event.get("delta")
        if (
            call is not None
            and self._attributed(event, self._call_owners, call_id)
            and isinstance(delta, str)
            and delta
            and self._spend(_text_bytes(delta))
        ):
            call.fragments.append(delta)

    def _on_tool_end(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        if (
            not is_id(call_id)
            or call_id not in self._calls
            or not self._attributed(event, self._call_owners, call_id)
        ):
            return
        call = self._calls.pop(call_id)
        if self._chunk_call == call_id:
            self._chunk_call = None
        fragments = call.fragments or ["{}"]
        problem = _args_problem("".join(fragments), self.limits.max_json_depth)
        if problem is not None:
            self._close_all()
            self._terminate(
                ev.run_error(f"The agent produced tool-call arguments that {problem}.",
                             INVALID_TOOL_ARGS)
            )
            return
        self._emit(call.start)
        owner = self._call_owners.get(call_id)
        for fragment in fragments:
            self._emit(_owned(ev.tool_call_args(call_id, fragment), owner))
        self._emit(event)
        self._closed_calls[call_id] = False

    def _on_tool_chunk(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        if is_id(call_id) and call_id != self._chunk_call:
            if self._chunk_call is not None:
                self._on_tool_end(ev.tool_call_end(self._chunk_call))
                if self.ended:
                    return
            name = event.get("toolCallName")
            start = ev.tool_call_start(call_id, name if isinstance(name, str) else "")
            if is_id(event.get("parentMessageId")):
                start["parentMessageId"] = event["parentMessageId"]
            self._on_tool_start(_owned(start, event.get("subagentRunId")))
            self._chunk_call = call_id if call_id in self._calls else None
        if self._chunk_call is not None:
            delta = event.get("delta")
            if isinstance(delta, str):
                self._on_tool_args(
                    _owned(ev.tool_call_args(self._chunk_call, delta), event.get("subagentRunId"))
                )

    def _on_tool_result(self, event: Event) -> None:
        call_id = event.get("toolCallId")
        if (
            not is_id(call_id)
            or self._closed_calls.get(call_id, True)
            or not self._attributed(event, self._call_owners, call_id)
        ):
            return
        content = event.get("content")
        if not isinstance(content, (str, list)) or (
            isinstance(content, list) and content_problems(content, ())
        ):
            # Only text or well-formed content parts pass the client's schema.
            try:
                content = event["content"] = json.dumps(
                    content, separators=(",", ":"), default=str
                )
            except (RecursionError, ValueError):
                content = event["content"] = "[a tool result that is not JSON]"
        size = _text_bytes(content) if isinstance(content, str) else len(
            orjson.dumps(content, default=str)
        )
        if not self._spend(size):
            return
        if not is_id(event.get("messageId")):
            event["messageId"] = self._new_id()
        if "role" in event:
            event["role"] = "tool"
        self._closed_calls[call_id] = True
        self._emit(event)

    # -- steps and reasoning ---------------------------------------------------------

    def _on_step_started(self, event: Event) -> None:
        name = event.get("stepName")
        if not isinstance(name, str) or not name:
            return
        key = (event.get("subagentRunId"), name)
        if key not in self._steps:
            self._steps.append(key)
            self._emit(event)

    def _on_step_finished(self, event: Event) -> None:
        key = (event.get("subagentRunId"), event.get("stepName"))
        if key in self._steps:  # finished by whoever started it
            self._steps.remove(key)
            self._emit(event)

    def _on_reasoning_start(self, event: Event) -> None:
        span_id = event.get("messageId")
        if (
            is_id(span_id)
            and span_id not in self._reasoning_spans
            and self._opens(event, self._reasoning_owners, span_id)
        ):
            self._reasoning_spans[span_id] = None
            self._own_reasoning(span_id, event)
            self._emit(event)

    def _own_reasoning(self, entity: str, event: Event) -> None:
        owner = event.get("subagentRunId")
        if owner is not None:
            self._reasoning_owners[entity] = owner

    def _on_reasoning_end(self, event: Event) -> None:
        span_id = event.get("messageId")
        if (
            is_id(span_id)
            and span_id in self._reasoning_spans
            and self._attributed(event, self._reasoning_owners, span_id)
        ):
            owner = self._reasoning_owners.get(span_id)
            for message_id in list(self._reasoning_messages):
                if self._reasoning_owners.get(message_id) == owner:
                    self._on_reasoning_message_end(
                        _owned(ev.reasoning_message_end(message_id), owner)
                    )
            del self._reasoning_spans[span_id]
            self._emit(event)

    def _on_reasoning_message_start(self, event: Event) -> None:
        message_id = event.get("messageId")
        if (
            is_id(message_id)
            and message_id not in self._reasoning_messages
            and self._opens(event, self._reasoning_owners, message_id)
            and self._spend(_ID_COST + len(message_id))
        ):
            self._reasoning_messages[message_id] = None
            self._own_reasoning(message_id, event)
            event["role"] = "reasoning"
            self._emit(event)

    def _on_reasoning_message_content(self, event: Event) -> None:
        message_id = event.get("messageId")
        delta = event.get("delta")
        if not is_id(message_id) or not isinstance(delta, str) or not delta:
            return
        if message_id not in self._reasoning_messages:
            self._on_reasoning_message_start(
                _owned(ev.reasoning_message_start(message_id), event.get("subagentRunId"))
            )
            if message_id not in self._reasoning_messages:
                return
        if not self._attributed(event, self._reasoning_owners, message_id):
            return
        if self._spend(_text_bytes(delta)):
            self._emit(event)

    def _on_reasoning_chunk(self, event: Event) -> None:
        message_id = event.get("messageId")
        if is_id(message_id) and message_id != self._chunk_reasoning:
            if self._chunk_reasoning is not None:
                self._on_reasoning_message_end(ev.reasoning_message_end(self._chunk_reasoning))
            self._chunk_reasoning = message_id
            self._on_reasoning_message_start(
                _owned(ev.reasoning_message_start(message_id), event.get("subagentRunId"))
            )
        delta = event.get("delta")
        if self._chunk_reasoning is not None and isinstance(delta, str) and delta:
            self._on_reasoning_message_content(_owned(
                ev.reasoning_message_content(self._chunk_reasoning, delta),
                event.get("subagentRunId"),
            ))

    def _on_reasoning_message_end(self, event: Event) -> None:
        message_id = event.get("messageId")
        if (
            is_id(message_id)
            and message_id in self._reasoning_messages
            and self._attributed(event, self._reasoning_owners, message_id)
        ):
            del self._reasoning_messages[message_id]
            if self._chunk_reasoning == message_id:
                self._chunk_reasoning = None
            self._emit(event)


    # -- shared state ----------------------------------------------------------------

    def _on_state_snapshot(self, event: Event) -> None:
        snapshot = event["snapshot"]
        try:
            encoded = orjson.dumps(snapshot)
        except TypeError:
            self._state_error("The agent produced a state snapshot that is not JSON.")
            return
        if len(encoded) > self._max_state_bytes or depth_exceeds(
            snapshot, self.limits.max_json_depth
        ):
            self._state_too_large()
            return
        self.shared_state = orjson.loads(encoded)  # a copy: later changes by the agent stay out
        self._state_size = len(encoded)
        self._emit(event)

    def _on_state_delta(self, event: Event) -> None:
        base = {} if self.shared_state is None else self.shared_state
        try:
            size = self._state_size
            if size is None:
                size = len(orjson.dumps(base))
            # Copy on write: all of the patch applies or none of it does, and the bounds
            # hold at every operation.
            patched, size = apply_patch(
                base, event["delta"], size=size, max_bytes=self._max_state_bytes,
                max_ops=self.limits.max_state_patch_ops, max_depth=self.limits.max_json_depth,
            )
        except PatchTooLarge as exc:
            if exc.kind in ("bytes", "depth"):
                self._state_too_large()
            else:
                self._close_all()
                self._terminate(
                    ev.run_error(f"The agent produced a state delta too large: {exc}",
                                 STATE_DELTA_TOO_LARGE)
                )
            return
        except (PatchError, orjson.JSONEncodeError) as exc:
            self._state_error(
                "The agent produced a state delta that does not apply to the current "
                f"state: {str(exc)[:200]}"
            )
            return
        self.shared_state, self._state_size = patched, size
        self._emit(event)

    def _state_too_large(self) -> None:
        self._close_all()
        self._terminate(
            ev.run_error(
                f"The shared state would exceed {self._max_state_bytes} bytes or nest deeper "
                f"than {self.limits.max_json_depth} levels.",
                STATE_TOO_LARGE,
            )
        )

    def _state_error(self, message: str) -> None:
        self._close_all()
        self._terminate(ev.run_error(message, INVALID_STATE_DELTA))

    # -- subagents (AG-UI 1.0) -------------------------------------------------------

    def _on_subagent_started(self, event: Event) -> None:
        run_id = event["subagentRunId"]
        parent = event.get("parentSubagentRunId")
        if (
            not is_id(run_id)
            or run_id in self._subagents
            or run_id in self._ended_subagents  # ids are per invocation
            or (parent is not None and (not is_id(parent) or parent not in self._subagents))
        ):
            return
        for key in ("description", "parentToolCallId", "parentMessageId"):
            if key in event and not isinstance(event[key], str):
                del event[key]
        if self._spend(_ID_COST + len(run_id)):
            self._subagents[run_id] = parent
            self._emit(event)

    def _on_subagent_ended(self, event: Event) -> None:
        run_id = event["subagentRunId"]
        if run_id not in self._subagents:
            return
        self._end_subagent(run_id)
        if self.ended:
            return
        if event["type"] == SUBAGENT_FINISHED:
            if "outcome" in event and not _valid_subagent_outcome(event["outcome"]):
                del event["outcome"]
            if "result" in event and not encodes_within(
                event["result"], self.limits.max_json_depth
            ):
                del event["result"]
        elif "code" in event and not isinstance(event["code"], str):
            del event["code"]
        self._emit(event)

    def _end_subagent(self, run_id: str) -> None:
        """Before ``run_id`` ends: its open subagents end, then what it holds open closes."""
        for child in [c for c, p in reversed(self._subagents.items()) if p == run_id]:
            if child in self._subagents:
                self._end_subagent(child)
                self._emit(_subagent_end(child, failed=False))
        self._close_owned(run_id)
        self._subagents.pop(run_id, None)
        self._ended_subagents.add(run_id)


def closers(state: OpenState) -> list[Event]:
    """The events that close what ``state`` holds open (as a failed run's end closes it:
    innermost first, subagents with SUBAGENT_ERROR); calls waiting for a result stay so."""
    guard = LifecycleGuard("", "")
    guard.prime(state)
    guard._close_all(failed=True)
    return guard._drain()


def _owned(event: Event, owner: str | None) -> Event:
    """``event`` attributed to the subagent invocation ``owner`` (``None``: the run's own)."""
    if owner is not None:
        event["subagentRunId"] = owner
    return event


def _subagent_end(run_id: str, *, failed: bool) -> Event:
    """What ends an invocation the guard closes itself (the run ended around it)."""
    if failed:
        return {"type": SUBAGENT_ERROR, "subagentRunId": run_id,
                "message": "The run ended before the subagent finished."}
    return {"type": SUBAGENT_FINISHED, "subagentRunId": run_id}


def _valid_subagent_outcome(outcome: Any) -> bool:
    """``{type: "success"}`` or ``{type: "suspended", interruptIds?: [str]}`` (AG-UI 1.0)."""
    if not isinstance(outcome, dict):
        return False
    if outcome.get("type") == "success":
        return True
    ids = outcome.get("interruptIds")
    return outcome.get("type") == "suspended" and (
        ids is None or (isinstance(ids, list) and all(isinstance(i, str) for i in ids))
    )


#: What an open message, call or reasoning span costs beyond its id (its entries in the
#: guard's and the transcript's tables), counted against ``max_run_output_bytes``.
_ID_COST = 64


def _text_bytes(text: str) -> int:
    """UTF-8 length of ``text`` (``isascii`` is a flag check: most deltas skip the encode)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _args_problem(arguments: str, max_depth: int) -> str | None:
    """Why ``arguments`` cannot be released (``None``: they can)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            return f"nest deeper than {max_depth} levels"
        return "are not valid JSON"
    if depth_exceeds(value, max_depth):
        return f"nest deeper than {max_depth} levels"
    return None


def _valid_outcome(outcome: Any) -> dict[str, Any] | None:
    """The outcome if it has one of AG-UI's shapes, else ``None`` (the client rejects others)."""
    if not isinstance(outcome, dict):
        return None
    kind = outcome.get("type")
    if kind == "success":
        pending = outcome.get("pendingToolCallIds")
        if pending is None or (
            isinstance(pending, list) and all(isinstance(i, str) for i in pending)
        ):
            return outcome
        return None
    if kind == "interrupt":
        interrupts = outcome.get("interrupts")
        if (
            isinstance(interrupts, list)
            and 0 < len(interrupts) <= MAX_INTERRUPTS
            and all(
                isinstance(i, dict) and _is_str(i.get("id")) and _is_str(i.get("reason"))
                for i in interrupts
            )
            and len({i["id"] for i in interrupts}) == len(interrupts)
        ):
            return outcome
        return None
    return outcome if kind == "cancelled" else None


def _valid_usage(value: Any) -> list[dict[str, Any]] | None:
    """An agent's ``usage`` as AG-UI ``TokenUsage`` entries: string labels and non-negative
    integer counts of the known names (anything else is left out)."""
    if not isinstance(value, list):
        return None
    entries = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        kept = {k: v for k, v in entry.items()
                if (k in ev.USAGE_LABELS and isinstance(v, str))
                or (k in ev.USAGE_COUNTS and type(v) is int and 0 <= v <= ev.MAX_SAFE_INTEGER)}
        if any(k in ev.USAGE_COUNTS for k in kept):
            entries.append(kept)
    return entries or None


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_subtype(value: Any) -> bool:
    return value in ("tool-call", "message")


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


#: Required members of pass-through event types; an event missing one is dropped, because
#: ``@ag-ui/client`` fails the whole run on it (ZodError).
_REQUIRED: dict[str, tuple[tuple[str, Callable[[Any], bool]], ...]] = {
    ev.CUSTOM: (("name", _is_str),),
    ev.STATE_DELTA: (("delta", _is_list),),
    ev.MESSAGES_SNAPSHOT: (("messages", _is_list),),
    "ACTIVITY_SNAPSHOT": (("messageId", _is_str), ("activityType", _is_str),
                          ("content", _is_dict)),
    "ACTIVITY_DELTA": (("messageId", _is_str), ("activityType", _is_str), ("patch", _is_list)),
    SUBAGENT_STARTED: (("subagentRunId", _is_str), ("name", _is_str)),
    SUBAGENT_FINISHED: (("subagentRunId", _is_str),),
    SUBAGENT_ERROR: (("subagentRunId", _is_str), ("message", _is_str)),
    "REASONING_ENCRYPTED_VALUE": (("subtype", _is_subtype), ("entityId", _is_str),
                                  ("encryptedValue", _is_str)),
}

#: Types emitted as they are (after the checks above): AG-UI 1.0 types with no open/close
#: state. Anything else, including the deprecated THINKING_* family, becomes RAW.
PASS_THROUGH = frozenset(
    {
        ev.MESSAGES_SNAPSHOT, ev.CUSTOM, ev.RAW,
        "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "REASONING_ENCRYPTED_VALUE",
    }
)
#: ``source`` of the RAW events that carry event types the guard does not know.
RAW_SOURCE = "iobridge"
#: Events about the run itself: never annotated with another agent's metadata, never a
#: subagent's.
_RUN_SCOPED = frozenset({ev.RUN_STARTED, ev.RUN_FINISHED, ev.RUN_ERROR})
#: The events whose ``subagentRunId`` is the invocation they start or end.
_SUBAGENT_TYPES = frozenset({SUBAGENT_STARTED, SUBAGENT_FINISHED, SUBAGENT_ERROR})


#: Required members whose type is "any": ``null`` is a value there, not an absent option.
_NULLABLE: dict[str, str] = {ev.CUSTOM: "value", ev.STATE_SNAPSHOT: "snapshot", ev.RAW: "event"}


def _clean(event: Event) -> Event:
    """A copy without ``null`` optional members and without a non-integer ``timestamp``."""
    keep = _NULLABLE.get(event["type"])
    clean = {k: v for k, v in event.items() if v is not None or k == keep}
    if keep is not None:
        clean.setdefault(keep, None)
    stamp = clean.get("timestamp")
    if stamp is not None and (not isinstance(stamp, int) or isinstance(stamp, bool)):
        del clean["timestamp"]
    if "metadata" in clean and not isinstance(clean["metadata"], dict):
        del clean["metadata"]  # an object or absent (AG-UI 1.0): the client rejects others
    return clean


_HANDLERS: dict[str, Callable[[LifecycleGuard, Event], None]] = {
    ev.RUN_STARTED: LifecycleGuard._on_run_started,
    ev.RUN_FINISHED: LifecycleGuard._on_run_finished,
    ev.RUN_ERROR: LifecycleGuard._on_run_error,
    ev.TEXT_MESSAGE_START: LifecycleGuard._on_text_start,
    ev.TEXT_MESSAGE_CONTENT: LifecycleGuard._on_text_content,
    ev.TEXT_MESSAGE_END: LifecycleGuard._on_text_end,
    ev.TEXT_MESSAGE_CHUNK: LifecycleGuard._on_text_chunk,
    ev.TOOL_CALL_START: LifecycleGuard._on_tool_start,
    ev.TOOL_CALL_ARGS: LifecycleGuard._on_tool_args,
    ev.TOOL_CALL_END: LifecycleGuard._on_tool_end,
    ev.TOOL_CALL_CHUNK: LifecycleGuard._on_tool_chunk,
    ev.TOOL_CALL_RESULT: LifecycleGuard._on_tool_result,
    ev.STATE_SNAPSHOT: LifecycleGuard._on_state_snapshot,
    ev.STATE_DELTA: LifecycleGuard._on_state_delta,
    ev.STEP_STARTED: LifecycleGuard._on_step_started,
    ev.STEP_FINISHED: LifecycleGuard._on_step_finished,
    ev.REASONING_START: LifecycleGuard._on_reasoning_start,
    ev.REASONING_END: LifecycleGuard._on_reasoning_end,
    ev.REASONING_MESSAGE_START: LifecycleGuard._on_reasoning_message_start,
    ev.REASONING_MESSAGE_CONTENT: LifecycleGuard._on_reasoning_message_content,
    ev.REASONING_MESSAGE_END: LifecycleGuard._on_reasoning_message_end,
    ev.REASONING_MESSAGE_CHUNK: LifecycleGuard._on_reasoning_chunk,
    SUBAGENT_STARTED: LifecycleGuard._on_subagent_started,
    SUBAGENT_FINISHED: LifecycleGuard._on_subagent_ended,
    SUBAGENT_ERROR: LifecycleGuard._on_subagent_ended,
}
