"""Pure functions over AG-UI message lists: merging a run's input, windows, the model's view.

No I/O: the run engine loads the stored thread, calls these, and stores or forwards the
result. Messages are AG-UI message dicts (camelCase); they are never mutated here.

Decisions (see ``docs/persistence.md``):

* A client may send its whole history (stock ``@ag-ui/client``) or only the new message
  (io.Assist). ``new_messages`` accepts both: whatever is already stored, by message id, is
  skipped, and so is a ``tool`` result for a call the thread has already answered.
* ``activity`` messages sent *by a client* are not stored: they are frontend-only UI state
  that the client owns (``@ag-ui/client`` strips them before sending anyway). Activity the
  server itself produces during a run is stored by the run engine, so history replays it.
* ``reasoning`` messages are stored (history replays them) but, like ``activity``, never
  reach the model: ``model_view`` drops both. The exception is a reasoning message that
  carries a provider's ``encryptedValue`` (a thinking signature, encrypted reasoning): the
  model that produced it needs it back on the next turn (the agent sends it only there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "HIDDEN_FROM_MODEL",
    "NOT_STORED_FROM_CLIENT",
    "answered_call",
    "call_ids",
    "merge_incoming",
    "model_view",
    "new_messages",
    "window",
]

Message = Mapping[str, Any]

#: Roles kept in history for replay but never forwarded to the model (io protocol, roles).
HIDDEN_FROM_MODEL = frozenset({"activity", "reasoning"})
#: Roles a client may send that are not stored as conversation.
NOT_STORED_FROM_CLIENT = frozenset({"activity"})


def call_ids(message: Message) -> list[str]:
    """The tool-call ids an assistant message issues (empty for other roles)."""
    if message.get("role") != "assistant":
        return []
    calls = message.get("toolCalls")
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str)]


def answered_call(message: Message) -> str | None:
    """The tool-call id a ``tool`` message answers (``None`` for other roles)."""
    if message.get("role") != "tool":
        return None
    value = message.get("toolCallId")
    return value if isinstance(value, str) else None


def new_messages(stored: Iterable[Message], incoming: Iterable[Message]) -> list[dict[str, Any]]:
    """The incoming messages to append to a thread that already holds ``stored``.

    Skips messages whose id is stored (or repeated in ``incoming``), client ``activity``
    messages, and ``tool`` messages whose ``toolCallId`` is already answered; keeps order.
    Messages without a string id are skipped too: they cannot be deduplicated.
    """
    seen: set[str] = set()
    answered: set[str] = set()
    for message in stored:
        if isinstance(message.get("id"), str):
            seen.add(message["id"])
        tool_call = answered_call(message)
        if tool_call is not None:
            answered.add(tool_call)
    return merge_incoming(seen, answered, incoming)


def merge_incoming(
    stored_ids: Iterable[str], answered: Iterable[str], incoming: Iterable[Message]
) -> list[dict[str, Any]]:
    """``new_messages`` given only what it needs of the thread: which of the incoming ids are
    stored, and which of the incoming tool results' calls the thread has already answered
    (a store answers both with indexed lookups, whatever the thread's length).
    """
    seen = set(stored_ids)
    answered = set(answered)
    out: list[dict[str, Any]] = []
    for message in incoming:
        message_id = message.get("id")
        if not isinstance(message_id, str) or message_id in seen:
            continue
        if message.get("role") in NOT_STORED_FROM_CLIENT:
            continue
        tool_call = answered_call(message)
        if tool_call is not None:
            if tool_call in answered:
                continue
            answered.add(tool_call)
        seen.add(message_id)
        out.append(dict(message))
    return out


def window(messages: Sequence[Message], last_n: int) -> list[Message]:
    """The last ``last_n`` messages, without splitting a tool call from its results.

    The start moves back to the assistant message that issued any call answered inside the
    window, so the window may hold more than ``last_n`` messages. Tool results at the start
    whose call appears nowhere before them (orphans) are dropped.
    """
    if last_n <= 0 or not messages:
        return []
    issued_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call in call_ids(message):
            issued_at.setdefault(call, index)
    start = max(0, len(messages) - last_n)
    while True:
        earliest = start
        for message in messages[start:]:
            tool_call = answered_call(message)
            if tool_call is not None and issued_at.get(tool_call, start) < earliest:
                earliest = issued_at[tool_call]
        if earliest == start:
            break
        start = earliest
    # A tool result still leading the window has no call before it: an orphan.
    while start < len(messages) and messages[start].get("role") == "tool":
        start += 1
    return list(messages[start:])


def model_view(messages: Sequence[Message]) -> list[Message]:
    """The history as the model must see it.

    Drops ``activity`` and ``reasoning`` messages (but keeps reasoning with an
    ``encryptedValue``, for the model that made it) and what a subagent said inside a run
    (``subagentRunId``: the model sees the subagent's answer as its tool result); places
    each tool result right after the assistant message that issued its call (providers
    require that order); drops tool results whose call is missing or already answered; and
    removes unanswered calls from assistant messages, except in the last turn (calls still
    waiting for their results).
    """
    visible = [
        m for m in messages
        if (m.get("role") not in HIDDEN_FROM_MODEL or _returned(m)) and "subagentRunId" not in m
    ]
    issued: set[str] = set()
    results: dict[str, Message] = {}
    for message in visible:
        issued.update(call_ids(message))
        tool_call = answered_call(message)
        if tool_call is not None and tool_call in issued and tool_call not in results:
            results[tool_call] = message
    last_turn = max((i for i, m in enumerate(visible) if m.get("role") != "tool"), default=-1)
    out: list[Message] = []
    for index, message in enumerate(visible):
        if message.get("role") == "tool":
            continue
        calls = call_ids(message)
        if not calls:
            out.append(message)
            continue
        if index != last_turn and any(c not in results for c in calls):
            trimmed = _without_unanswered(message, results)
            if trimmed is None:
                continue
            message = trimmed
        out.append(message)
        out.extend(results[c] for c in call_ids(message) if c in results)
    return out


def _returned(message: Message) -> bool:
    """A reasoning message whose provider artefact goes back to the model that produced it."""
    value = message.get("encryptedValue")
    return message.get("role") == "reasoning" and isinstance(value, str) and bool(value)


def _without_unanswered(message: Message, results: Mapping[str, Message]) -> Message | None:
    kept = [c for c in message["toolCalls"] if isinstance(c, Mapping) and c.get("id") in results]
    trimmed = {k: v for k, v in message.items() if k != "toolCalls"}
    if kept:
        trimmed["toolCalls"] = kept
    elif not trimmed.get("content"):
        return None
    return trimmed
