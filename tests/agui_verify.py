"""An independent AG-UI stream checker for tests (shares no code with ``iobridge``).

``verify_events`` models what ``@ag-ui/client@1.0.0``'s ``verifyEvents`` rejects (run
lifecycle, open/close pairing of text messages, tool calls, steps, reasoning and subagents)
plus the io.Intelligence guarantees the client does not check (exactly one terminal event,
everything closed before it even on RUN_ERROR, non-empty text deltas, tool arguments that parse
as JSON, results only for closed calls) and the wire shapes its Zod schemas enforce (no
``null`` members, integer timestamps, string ids). ``parse_sse`` checks our SSE framing.

It is written from the specs, not from the guard, so a bug in one is not hidden by the other.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

TERMINALS = ("RUN_FINISHED", "RUN_ERROR")

#: Members whose value is free-form JSON: ``null`` inside them is data, not an omitted field.
FREE_FORM = frozenset({"result", "value", "event", "snapshot", "rawEvent", "metadata", "input"})

#: Required string members per event type (Zod: ``z.string()``).
REQUIRED_STRINGS: dict[str, tuple[str, ...]] = {
    "RUN_STARTED": ("threadId", "runId"),
    "RUN_FINISHED": ("threadId", "runId"),
    "RUN_ERROR": ("message",),
    "STEP_STARTED": ("stepName",),
    "STEP_FINISHED": ("stepName",),
    "TEXT_MESSAGE_START": ("messageId",),
    "TEXT_MESSAGE_CONTENT": ("messageId", "delta"),
    "TEXT_MESSAGE_END": ("messageId",),
    "TOOL_CALL_START": ("toolCallId", "toolCallName"),
    "TOOL_CALL_ARGS": ("toolCallId", "delta"),
    "TOOL_CALL_END": ("toolCallId",),
    "TOOL_CALL_RESULT": ("messageId", "toolCallId"),
    "REASONING_START": ("messageId",),
    "REASONING_END": ("messageId",),
    "REASONING_MESSAGE_START": ("messageId",),
    "REASONING_MESSAGE_CONTENT": ("messageId", "delta"),
    "REASONING_MESSAGE_END": ("messageId",),
    "CUSTOM": ("name",),
    "SUBAGENT_STARTED": ("subagentRunId", "name"),
    "SUBAGENT_FINISHED": ("subagentRunId",),
    "SUBAGENT_ERROR": ("subagentRunId", "message"),
    "REASONING_ENCRYPTED_VALUE": ("subtype", "entityId", "encryptedValue"),
}
#: Optional string members (Zod: ``z.string().optional()``).
OPTIONAL_STRINGS: dict[str, tuple[str, ...]] = {
    "RUN_STARTED": ("parentRunId",),
    "RUN_ERROR": ("code",),
    "TEXT_MESSAGE_START": ("name",),
    "TOOL_CALL_START": ("parentMessageId",),
}
KNOWN_TYPES = frozenset(REQUIRED_STRINGS) | {"RAW", "STATE_SNAPSHOT", "STATE_DELTA",
                                              "MESSAGES_SNAPSHOT"}
TEXT_ROLES = frozenset({"developer", "system", "assistant", "user"})
NULLABLE = {"CUSTOM": "/value", "RAW": "/event", "STATE_SNAPSHOT": "/snapshot"}
OUTCOME_TYPES = frozenset({"success", "interrupt", "cancelled"})


class StreamError(AssertionError):
    """The stream breaks a rule; the message names the event index and the rule."""


def _nulls(value: Any, path: str, *, deep: bool = True) -> list[str]:
    if value is None:
        return [path]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if item is None:
                found.append(f"{path}/{key}")
            elif deep and key not in FREE_FORM:
                found += _nulls(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _nulls(item, f"{path}/{index}")
    return found


def _check_shape(index: int, event: dict[str, Any]) -> str:
    kind = event.get("type")
    if not isinstance(kind, str) or not kind:
        raise StreamError(f"#{index}: event without a string type: {event!r}")
    # Unknown types are dropped by the client: only their top level must be null-free.
    nulls = _nulls(event, "", deep=kind in KNOWN_TYPES)
    # A required member typed "any" may be null (CUSTOM.value, RAW.event, STATE_SNAPSHOT).
    nulls = [n for n in nulls if n != NULLABLE.get(kind)]
    if nulls:
        raise StreamError(f"#{index} {kind}: null members {nulls}")
    stamp = event.get("timestamp")
    if stamp is not None and (type(stamp) is not int):
        raise StreamError(f"#{index} {kind}: timestamp must be an integer, got {stamp!r}")
    for name in REQUIRED_STRINGS.get(kind, ()):
        if not isinstance(event.get(name), str):
            raise StreamError(f"#{index} {kind}: {name} must be a string: {event!r}")
    for name in OPTIONAL_STRINGS.get(kind, ()):
        if name in event and not isinstance(event[name], str):
            raise StreamError(f"#{index} {kind}: {name} must be a string: {event!r}")
    if kind == "TEXT_MESSAGE_START" and event.get("role", "assistant") not in TEXT_ROLES:
        raise StreamError(f"#{index} {kind}: bad role {event.get('role')!r}")
    if kind == "REASONING_MESSAGE_START" and event.get("role") != "reasoning":
        raise StreamError(f"#{index} {kind}: role must be 'reasoning'")
    if kind == "REASONING_ENCRYPTED_VALUE" and event["subtype"] not in ("tool-call", "message"):
        raise StreamError(f"#{index} {kind}: subtype must be 'tool-call' or 'message'")
    if "metadata" in event and not isinstance(event["metadata"], dict):
        raise StreamError(f"#{index} {kind}: metadata must be an object")
    if kind == "TOOL_CALL_RESULT":
        if not isinstance(event.get("content"), (str, list)):
            raise StreamError(f"#{index} {kind}: content must be text or parts")
        if event.get("role", "tool") != "tool":
            raise StreamError(f"#{index} {kind}: role must be 'tool'")
    if kind == "RUN_FINISHED" and "outcome" in event:
        outcome = event["outcome"]
        if not isinstance(outcome, dict) or outcome.get("type") not in OUTCOME_TYPES:
            raise StreamError(f"#{index} {kind}: bad outcome {outcome!r}")
    return kind


class _Run:
    """Open things of one run, as ``verifyEvents`` tracks them."""

    def __init__(self) -> None:
        self.texts: set[str] = set()
        self.calls: dict[str, list[str]] = {}
        self.started_calls: set[str] = set()
        self.closed_calls: set[str] = set()
        self.answered_calls: set[str] = set()
        self.steps: set[str] = set()
        self.reasoning_messages: set[str] = set()
        self.reasoning_spans: set[str] = set()
        self.subagents: set[str] = set()
        self.ended_subagents: set[str] = set()

    def still_open(self) -> list[str]:
        groups = {
            "steps": self.steps,
            "text messages": self.texts,
            "reasoning messages": self.reasoning_messages,
            "reasoning spans": self.reasoning_spans,
            "tool calls": set(self.calls),
            "subagents": self.subagents,
        }
        return [f"{name}: {sorted(ids)}" for name, ids in groups.items() if ids]


def verify_events(
    events: list[dict[str, Any]],
    *,
    thread_id: str | None = None,
    run_id: str | None = None,
    earlier_calls: Collection[str] = (),
) -> None:
    """Raise ``StreamError`` unless ``events`` is one valid, terminated io/AG-UI run.

    ``earlier_calls``: tool calls an earlier run of the thread announced and left open, which
    this run may answer with a TOOL_CALL_RESULT alone (the client files it after the call
    it holds; AG-UI 1.0 ``defaultApplyEvents``).
    """
    if not events:
        raise StreamError("empty stream")
    run = _Run()
    run.closed_calls.update(earlier_calls)
    terminal_at: int | None = None
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise StreamError(f"#{index}: not a JSON object: {event!r}")
        kind = _check_shape(index, event)
        if terminal_at is not None:
            raise StreamError(f"#{index} {kind}: event after the terminal #{terminal_at}")
        if index == 0:
            if kind != "RUN_STARTED":
                raise StreamError(f"first event must be RUN_STARTED, got {kind}")
            for key, want in (("threadId", thread_id), ("runId", run_id)):
                if want is not None and event[key] != want:
                    raise StreamError(f"RUN_STARTED.{key} {event[key]!r} != {want!r}")
            continue
        _step(run, index, kind, event)
        if kind in TERMINALS:
            terminal_at = index
            if kind == "RUN_FINISHED":
                for key, value in (("threadId", events[0]["threadId"]),
                                   ("runId", events[0]["runId"])):
                    if event[key] != value:
                        raise StreamError(f"#{index} RUN_FINISHED.{key} does not echo RUN_STARTED")
    if terminal_at is None:
        raise StreamError(f"stream ended without RUN_FINISHED/RUN_ERROR (last {events[-1]})")


def _step(run: _Run, index: int, kind: str, event: dict[str, Any]) -> None:
    where = f"#{index} {kind}"
    if kind == "RUN_STARTED":
        raise StreamError(f"{where}: RUN_STARTED while the run is active")
    if kind in TERMINALS:
        still_open = run.still_open()
        if still_open:
            raise StreamError(f"{where} while still open: {'; '.join(still_open)}")
        if kind == "RUN_ERROR" and not event["message"]:
            raise StreamError(f"{where}: empty message")
        return
    if kind == "TEXT_MESSAGE_START":
        if event["messageId"] in run.texts:
            raise StreamError(f"{where}: message {event['messageId']!r} already in progress")
        run.texts.add(event["messageId"])
    elif kind == "TEXT_MESSAGE_CONTENT":
        if event["messageId"] not in run.texts:
            raise StreamError(f"{where}: no active text message {event['messageId']!r}")
        if not event["delta"]:
            raise StreamError(f"{where}: empty delta")
    elif kind == "TEXT_MESSAGE_END":
        if event["messageId"] not in run.texts:
            raise StreamError(f"{where}: no active text message {event['messageId']!r}")
        run.texts.discard(event["messageId"])
    elif kind == "TOOL_CALL_START":
        call_id = event["toolCallId"]
        if call_id in run.started_calls:
            raise StreamError(f"{where}: tool call id {call_id!r} used twice in the run")
        if not event["toolCallName"]:
            raise StreamError(f"{where}: empty toolCallName")
        run.started_calls.add(call_id)
        run.calls[call_id] = []
    elif kind == "TOOL_CALL_ARGS":
        if event["toolCallId"] not in run.calls:
            raise StreamError(f"{where}: no active tool call {event['toolCallId']!r}")
        run.calls[event["toolCallId"]].append(event["delta"])
    elif kind == "TOOL_CALL_END":
        call_id = event["toolCallId"]
        if call_id not in run.calls:
            raise StreamError(f"{where}: no active tool call {call_id!r}")
        text = "".join(run.calls.pop(call_id))
        try:
            json.loads(text)
        except ValueError as exc:
            raise StreamError(f"{where}: arguments {text!r} are not JSON") from exc
        run.closed_calls.add(call_id)
    elif kind == "TOOL_CALL_RESULT":
        call_id = event["toolCallId"]
        if call_id not in run.closed_calls:
            raise StreamError(f"{where}: result for {call_id!r}, which is not a closed call")
        if call_id in run.answered_calls:
            raise StreamError(f"{where}: second result for {call_id!r}")
        run.answered_calls.add(call_id)
    elif kind == "STEP_STARTED":
        # Step names are per agent: a subagent's steps are its own (1.0 client).
        step = f"{event.get('subagentRunId', '')}/{event['stepName']}"
        if step in run.steps:
            raise StreamError(f"{where}: step {event['stepName']!r} already active")
        run.steps.add(step)
    elif kind == "STEP_FINISHED":
        step = f"{event.get('subagentRunId', '')}/{event['stepName']}"
        if step not in run.steps:
            raise StreamError(f"{where}: step {event['stepName']!r} was not started")
        run.steps.discard(step)
    elif kind in ("REASONING_START", "REASONING_MESSAGE_START"):
        opened = run.reasoning_spans if kind == "REASONING_START" else run.reasoning_messages
        if event["messageId"] in opened:
            raise StreamError(f"{where}: {event['messageId']!r} already in progress")
        opened.add(event["messageId"])
    elif kind in ("REASONING_END", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END"):
        opened = run.reasoning_spans if kind == "REASONING_END" else run.reasoning_messages
        if event["messageId"] not in opened:
            raise StreamError(f"{where}: {event['messageId']!r} is not active")
        if kind == "REASONING_MESSAGE_CONTENT" and not event["delta"]:
            raise StreamError(f"{where}: empty delta")
        if kind != "REASONING_MESSAGE_CONTENT":
            opened.discard(event["messageId"])
    elif kind == "SUBAGENT_STARTED":
        sub = event["subagentRunId"]
        if sub in run.subagents or sub in run.ended_subagents:
            raise StreamError(f"{where}: subagent id {sub!r} used twice in the run")
        parent = event.get("parentSubagentRunId")
        if parent is not None and parent not in run.subagents | run.ended_subagents:
            raise StreamError(f"{where}: parent subagent {parent!r} was not started")
        run.subagents.add(sub)
    elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
        if event["subagentRunId"] not in run.subagents:
            raise StreamError(f"{where}: no active subagent {event['subagentRunId']!r}")
        run.subagents.discard(event["subagentRunId"])
        run.ended_subagents.add(event["subagentRunId"])


def parse_sse(body: bytes | str) -> list[dict[str, Any]]:
    """The events of an SSE body, checking our framing on the way.

    LF only; frames separated by a blank line; comment frames (``: ping``) allowed; every
    event frame is exactly ``id: <n>`` then one ``data: <JSON object>`` line, ids 1, 2, 3...
    (a durable run's id may go on with ``~`` and what the client has open: printable ASCII,
    ``docs/http-api.md``, "Event ids of durable runs").
    """
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    if "\r" in text:
        raise StreamError("CR in the SSE body (the framing must be LF only)")
    if text and not text.endswith("\n\n"):
        raise StreamError(f"SSE body does not end with a blank line: {text[-80:]!r}")
    events: list[dict[str, Any]] = []
    for frame in text.split("\n\n")[:-1]:
        lines = frame.split("\n")
        if all(line.startswith(":") for line in lines):
            continue
        want = f"id: {len(events) + 1}"
        number, _, state = lines[0].partition("~")
        if state and (not state.isascii() or not state.isprintable() or " " in state):
            raise StreamError(f"an id's open state is not printable ASCII: {frame[:200]!r}")
        if len(lines) != 2 or number != want or not lines[1].startswith("data: "):
            raise StreamError(f"frame is not '{want}' + one data line: {frame[:200]!r}")
        event = json.loads(lines[1][len("data: "):])
        if not isinstance(event, dict):
            raise StreamError(f"data is not a JSON object: {frame[:200]!r}")
        events.append(event)
    return events
