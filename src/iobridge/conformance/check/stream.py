"""Sans-IO grading of one AG-UI event stream: SSE framing, then the lifecycle rules.

Written from the io.Intelligence Agent Protocol text, not from iobridge's own guard, so the
grader and the server cannot share a mistake. Every rule reports the *first* offending event
(its index in the stream and the event itself) or nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GUARANTEES",
    "Capture",
    "SseDecoder",
    "Violation",
    "framing_violation",
    "lifecycle_violations",
    "null_violation",
]

TERMINALS = frozenset({"RUN_FINISHED", "RUN_ERROR"})
SPEC_GUARANTEES = "io-agent-protocol: Required lifecycle guarantees"

#: (rule id, the guarantee's text) in the order the spec lists them.
GUARANTEES: tuple[tuple[str, str], ...] = (
    ("L1.run-started-first", "RUN_STARTED must be first"),
    ("L1.terminal-last", "RUN_FINISHED or RUN_ERROR must be last"),
    ("L1.nothing-after-terminal", "No events may appear after a terminal event"),
    ("L1.text-closed", "Every open text sequence must close before the stream ends"),
    ("L1.tool-call-closed", "Every open tool call must close before the stream ends"),
    ("L1.text-delta-non-empty", "TEXT_MESSAGE_CONTENT.delta must be non-empty"),
    ("L1.tool-args-json", "Concatenated TOOL_CALL_ARGS.delta values must form valid JSON"),
)


@dataclass(frozen=True, slots=True)
class Violation:
    """The first event that breaks a rule, and why."""

    rule: str
    detail: str
    index: int
    event: Any


@dataclass(slots=True)
class Capture:
    """What one run's HTTP answer was: status, media type, bytes and decoded events."""

    label: str
    status: int = 0
    content_type: str = ""
    raw: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Frames whose ``data`` was not a JSON object: (index, text).
    undecodable: list[tuple[int, str]] = field(default_factory=list)
    #: Why reading stopped early (timeout, size bound, connection error), if it did.
    cut: str = ""

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    def last_seen(self) -> Any:
        """The last event, or the start of a non-stream answer: what a failure shows."""
        return self.events[-1] if self.events else self.raw[:300].decode("utf-8", "replace")


class SseDecoder:
    """Incremental SSE decoder: ``feed(chunk)`` returns the events completed by it.

    Frames end at a blank line. A CR anywhere is normalised away so the remaining rules can
    still be graded; :func:`framing_violation` reports it from the raw bytes.
    """

    def __init__(self, capture: Capture) -> None:
        self._capture = capture
        self._buffer = bytearray()
        self._cr = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        # Linear in the stream: only the new octets are searched, consumed ones deleted once.
        data = self._cr + chunk
        self._cr = b"\r" if data.endswith(b"\r") else b""  # its LF may be in the next chunk
        data = data[: len(data) - len(self._cr)]
        scanned = len(self._buffer)
        self._buffer += data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[dict[str, Any]] = []
        start, search = 0, max(0, scanned - 1)
        while (end := self._buffer.find(b"\n\n", search)) >= 0:
            event = self._frame(bytes(self._buffer[start:end]))
            if event is not None:
                out.append(event)
            start = search = end + 2
        del self._buffer[:start]
        return out

    def _frame(self, frame: bytes) -> dict[str, Any] | None:
        data = [
            line[5:].removeprefix(b" ")
            for line in frame.split(b"\n")
            if line.startswith(b"data:")
        ]
        if not data:
            return None  # a comment or id-only frame carries no event
        text = b"\n".join(data).decode("utf-8", "replace")
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self._capture.undecodable.append((len(self._capture.events), text))
            return None
        self._capture.events.append(event)
        return event


def framing_violation(raw: bytes | bytearray) -> Violation | None:
    """LF-only framing: the first frame that holds a CR, shown as sent."""
    at = raw.find(b"\r")
    if at < 0:
        return None
    start = raw.rfind(b"\n\n", 0, at) + 1
    frame = raw[start : at + 80].decode("utf-8", "replace")
    index = raw[:at].replace(b"\r\n", b"\n").count(b"\n\n")
    return Violation(
        "L1.lf-framing",
        "a CR octet in the stream: frames must be separated by LF only (@ag-ui/client splits "
        "on \\n\\n)",
        index,
        frame,
    )


def _null_path(value: Any, path: str) -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if item is None:
                return f"{path}/{key}"
    return None


def null_violation(events: list[dict[str, Any]]) -> Violation | None:
    """No ``null`` members: optional fields are omitted (an AG-UI client's schema rejects
    ``"metadata": null``). Free-form values (a result, a snapshot) may hold nulls as data, so
    only event members and the members of snapshot messages and their tool calls are read.
    """
    for index, event in enumerate(events):
        where = _null_path(event, "")
        messages = event.get("messages") if event.get("type") == "MESSAGES_SNAPSHOT" else None
        for n, message in enumerate(messages if isinstance(messages, list) else []):
            where = where or _null_path(message, f"/messages/{n}")
            calls = message.get("toolCalls") if isinstance(message, dict) else None
            for c, call in enumerate(calls if isinstance(calls, list) else []):
                where = where or _null_path(call, f"/messages/{n}/toolCalls/{c}")
        if where is not None:
            return Violation(
                "L1.no-null-fields", f"{event.get('type')} has null at {where}", index, event
            )
    return None


def lifecycle_violations(events: list[dict[str, Any]]) -> dict[str, Violation]:
    """The seven lifecycle guarantees: for each broken one, its first offending event."""
    found: dict[str, Violation] = {}

    def flag(rule: str, detail: str, index: int) -> None:
        if rule not in found:
            event = events[index] if 0 <= index < len(events) else None
            found[rule] = Violation(rule, detail, index, event)

    if not events:
        flag("L1.run-started-first", "the stream carried no event", -1)
        flag("L1.terminal-last", "the stream carried no event", -1)
        return found
    if events[0].get("type") != "RUN_STARTED":
        flag("L1.run-started-first", f"the first event is {events[0].get('type')}", 0)
    if events[-1].get("type") not in TERMINALS:
        last = len(events) - 1
        flag("L1.terminal-last", f"the stream ended on {events[-1].get('type')}", last)
    open_texts: dict[str, int] = {}
    open_calls: dict[str, int] = {}
    args: dict[str, list[str]] = {}
    terminal: int | None = None
    for index, event in enumerate(events):
        kind = event.get("type")
        if terminal is not None:
            flag("L1.nothing-after-terminal", f"{kind} after {events[terminal].get('type')} "
                 f"(event {terminal})", index)
            continue
        if kind == "TEXT_MESSAGE_START":
            open_texts[str(event.get("messageId"))] = index
        elif kind == "TEXT_MESSAGE_CONTENT":
            if not isinstance(event.get("delta"), str) or not event["delta"]:
                flag("L1.text-delta-non-empty", "TEXT_MESSAGE_CONTENT with an empty delta", index)
        elif kind == "TEXT_MESSAGE_END":
            open_texts.pop(str(event.get("messageId")), None)
        elif kind == "TOOL_CALL_START":
            call = str(event.get("toolCallId"))
            open_calls[call] = index
            args[call] = []
        elif kind == "TOOL_CALL_ARGS":
            args.setdefault(str(event.get("toolCallId")), []).append(str(event.get("delta", "")))
        elif kind == "TOOL_CALL_END":
            call = str(event.get("toolCallId"))
            open_calls.pop(call, None)
            text = "".join(args.get(call, []))
            if text:
                try:
                    json.loads(text)
                except ValueError:
                    flag("L1.tool-args-json", f"the arguments of {call} are not JSON: "
                         f"{text[:200]!r}", index)
        elif kind in TERMINALS:
            terminal = index
            for message_id in open_texts:
                flag("L1.text-closed", f"{kind} while text message {message_id} is open "
                     f"(started at event {open_texts[message_id]})", index)
            for call in open_calls:
                flag("L1.tool-call-closed", f"{kind} while tool call {call} is open "
                     f"(started at event {open_calls[call]})", index)
    if terminal is None:
        end = len(events) - 1
        for message_id, start in open_texts.items():
            flag("L1.text-closed", f"the stream ended with text message {message_id} open "
                 f"(started at event {start})", end)
        for call, start in open_calls.items():
            flag("L1.tool-call-closed", f"the stream ended with tool call {call} open "
                 f"(started at event {start})", end)
    return found
