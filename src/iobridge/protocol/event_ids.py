"""Event ids of durable runs: numbers that survive a takeover, and what a client has open.

A run's events are numbered from 1 in its log. A durable run may be taken over by another
process (its owner lost, or drained) and re-executed from its last durable point ``K``: the
new owner's events are new events, so their ids must never be ids the lost owner used (it may
have sent events after ``K`` before it stopped). Ids are therefore **numbers** made of the
takeover **epoch** and the sequence number in the log:

    number = epoch × 2³² + seq

A run that was never taken over has epoch 0: its ids are 1, 2, 3… as for any run. After a
takeover, the continued run's own events are numbered from ``epoch × 2³² + K + 1`` on; the
numbers stay increasing over the client's concatenated stream, and an N-PAMP ``event_id``
is the same number.

What a client has **open** at an event (text and reasoning messages, reasoning spans, steps,
subagent invocations, and the tool calls that wait for a result) is written after the number
in the SSE ``id`` of a durable run's events, ``<number>~<open state>``. A client that resumes
with an id of a lost owner's stream (an epoch before the run's current one) is sent what
closes what it has open, a ``MESSAGES_SNAPSHOT`` of the conversation at ``K``, then the
continued run from ``K``: whatever cursor it holds, its stream stays valid. The open state is
sans-IO data here; ``LifecycleGuard.open_state`` makes it and ``closers`` closes it.

The open state's text form: items joined by ``!``; an item is a kind letter and its fields
joined by ``:``, each field percent-encoded (``urllib.parse.quote``, nothing kept but
unreserved characters), so the id holds only printable ASCII (an HTTP header value, a query
parameter). Kinds: ``s`` step (owner, name), ``t`` text message (owner, id), ``r`` reasoning
message (owner, id), ``R`` reasoning span (owner, id), ``a`` subagent invocation (id, parent),
``p`` tool call waiting for its result (id). An empty owner or parent is ``None`` (the run's
own agent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = [
    "EPOCH_SHIFT",
    "MAX_CURSOR_CHARS",
    "OPENS_OR_CLOSES",
    "Cursor",
    "OpenState",
    "OpenTracker",
    "epoch_of",
    "number",
    "parse_cursor",
    "seq_of",
]

#: Bits of the sequence number in an event id (the epoch is above them).
EPOCH_SHIFT = 32
_SEQ_MASK = (1 << EPOCH_SHIFT) - 1
#: Longest cursor text accepted (an SSE id with its open state).
MAX_CURSOR_CHARS = 16 * 1024
#: Most digits of a cursor's number (an epoch and a sequence number, far below 2⁶³).
_MAX_DIGITS = 19

Owned = tuple[str | None, str]


def number(epoch: int, seq: int) -> int:
    """The id of event ``seq`` of a run in ``epoch``."""
    return (epoch << EPOCH_SHIFT) | seq


def epoch_of(value: int) -> int:
    return value >> EPOCH_SHIFT


def seq_of(value: int) -> int:
    return value & _SEQ_MASK


@dataclass(frozen=True, slots=True)
class OpenState:
    """What is open for a client after an event (see the module docstring), in the order
    it was opened."""

    steps: tuple[Owned, ...] = ()
    texts: tuple[Owned, ...] = ()
    reasoning_messages: tuple[Owned, ...] = ()
    reasoning_spans: tuple[Owned, ...] = ()
    #: Open subagent invocations: (id, parent invocation).
    subagents: tuple[tuple[str, str | None], ...] = ()
    #: Tool calls announced whole that have no result yet.
    pending: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.steps or self.texts or self.reasoning_messages
                    or self.reasoning_spans or self.subagents or self.pending)

    def encode(self) -> bytes:
        """The text form (empty when nothing is open)."""
        items = [
            *(_item("s", owner or "", name) for owner, name in self.steps),
            *(_item("t", owner or "", mid) for owner, mid in self.texts),
            *(_item("r", owner or "", mid) for owner, mid in self.reasoning_messages),
            *(_item("R", owner or "", mid) for owner, mid in self.reasoning_spans),
            *(_item("a", sub, parent or "") for sub, parent in self.subagents),
            *(_item("p", call) for call in self.pending),
        ]
        return "!".join(items).encode("ascii")

    @classmethod
    def decode(cls, text: str) -> OpenState:
        """Parse the text form.

        Raises:
            ValueError: it is not one.
        """
        parts: dict[str, list[tuple[str, ...]]] = {k: [] for k in "strRap"}
        for item in text.split("!") if text else ():
            kind, raw = item[:1], item[1:].split(":")
            fields = [unquote(f, errors="strict") for f in raw]
            size = 1 if kind == "p" else 2
            if (kind not in parts or len(fields) != size + 1 or fields[0] != ""
                    or any(_field(f) != r for f, r in zip(fields, raw, strict=True))):
                raise ValueError(f"not an open-state item: {item!r}")
            parts[kind].append(tuple(fields[1:]))

        def owned(kind: str) -> tuple[Owned, ...]:
            return tuple((owner or None, name) for owner, name in parts[kind])

        return cls(
            steps=owned("s"), texts=owned("t"), reasoning_messages=owned("r"),
            reasoning_spans=owned("R"),
            subagents=tuple((sub, parent or None) for sub, parent in parts["a"]),
            pending=tuple(call for (call,) in parts["p"]),
        )


#: The event types that change what a client has open.
OPENS_OR_CLOSES = frozenset({
    "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "REASONING_START", "REASONING_END",
    "REASONING_MESSAGE_START", "REASONING_MESSAGE_END", "STEP_STARTED", "STEP_FINISHED",
    "SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR", "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
})


class OpenTracker:
    """What a client has open, followed event by event over a valid stream (what the
    lifecycle guard emitted: nothing is checked here). Each item is encoded once, when it
    opens: the open state's text form is a join."""

    def __init__(self, state: OpenState | None = None) -> None:
        state = state or OpenState()
        self._steps = {key: _item("s", key[0] or "", key[1]) for key in state.steps}
        self._texts = {m: _item("t", o or "", m) for o, m in state.texts}
        self._messages = {m: _item("r", o or "", m) for o, m in state.reasoning_messages}
        self._spans = {m: _item("R", o or "", m) for o, m in state.reasoning_spans}
        self._subagents = {a: _item("a", a, p or "") for a, p in state.subagents}
        self._pending = {c: _item("p", c) for c in state.pending}
        self._tables = {"TEXT_MESSAGE": (self._texts, "t"),
                        "REASONING_MESSAGE": (self._messages, "r"),
                        "REASONING": (self._spans, "R")}

    def apply(self, event: dict[str, object]) -> None:
        """Fold in one event whose type is in ``OPENS_OR_CLOSES``."""
        kind = str(event["type"])
        raw = event.get("subagentRunId")
        owner = raw if isinstance(raw, str) else ""
        if kind == "STEP_STARTED":
            name = str(event["stepName"])
            self._steps[(owner or None, name)] = _item("s", owner, name)
        elif kind == "STEP_FINISHED":
            self._steps.pop((owner or None, str(event["stepName"])), None)
        elif kind == "TOOL_CALL_END":
            call = str(event["toolCallId"])
            self._pending[call] = _item("p", call)
        elif kind == "TOOL_CALL_RESULT":
            self._pending.pop(str(event["toolCallId"]), None)
        elif kind == "SUBAGENT_STARTED":
            sub, parent = str(event["subagentRunId"]), event.get("parentSubagentRunId")
            self._subagents[sub] = _item("a", sub, parent if isinstance(parent, str) else "")
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            self._subagents.pop(str(event["subagentRunId"]), None)
        else:
            table, letter = self._tables[kind.rsplit("_", 1)[0]]
            key = str(event.get("messageId"))
            if kind.endswith("_START"):
                table[key] = _item(letter, owner, key)
            else:
                table.pop(key, None)

    def encoded(self) -> bytes:
        """The open state's text form (empty when nothing is open)."""
        return "!".join([*self._steps.values(), *self._texts.values(),
                         *self._messages.values(), *self._spans.values(),
                         *self._subagents.values(), *self._pending.values()]).encode("ascii")

    def state(self) -> OpenState:
        return OpenState.decode(self.encoded().decode("ascii"))


#: Fields that ``quote`` leaves as they are (ids and step names usually are).
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*")


def _field(value: str) -> str:
    return value if _PLAIN.fullmatch(value) else quote(value, safe="")


def _item(kind: str, *fields: str) -> str:
    return kind + "".join([":" + _field(f) for f in fields])


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a client resumes: the id of the last event it has, and what it has open then
    (``None``: not known, as for an N-PAMP cursor, which is the number alone)."""

    number: int
    state: OpenState | None = None

    @property
    def epoch(self) -> int:
        return epoch_of(self.number)

    @property
    def seq(self) -> int:
        return seq_of(self.number)


def parse_cursor(text: str) -> Cursor:
    """A ``Last-Event-ID`` (or ``?after=``): ``<number>`` or ``<number>~<open state>``. A
    number alone means nothing is open.

    Raises:
        ValueError: it is not an event id.
    """
    if len(text) > MAX_CURSOR_CHARS or not text.isascii():
        raise ValueError("not an event id")
    digits, _, state = text.partition("~")
    if not digits.isdigit() or len(digits) > _MAX_DIGITS:
        raise ValueError("not an event id")
    return Cursor(int(digits), OpenState.decode(state))
