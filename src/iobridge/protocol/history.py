"""What the model may see of a conversation.

``activity`` messages are frontend-only and ``reasoning`` messages are never forwarded to
the model (io protocol, Message Roles). Tool calls must stay paired with their results in
every provider's format, so unanswered calls and orphan results are dropped from the view.
"""

from __future__ import annotations

from typing import Any

MODEL_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def model_view(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages to show a model, with tool calls and results kept paired.

    An assistant tool call without a result is removed (and the assistant message too if
    nothing else is left in it); a tool result whose call is not in the view is removed.
    """
    visible = [m for m in messages if m.get("role") in MODEL_ROLES]
    answered = {m.get("toolCallId") for m in visible if m.get("role") == "tool"}
    called: set[str] = set()
    out: list[dict[str, Any]] = []
    for message in visible:
        role = message.get("role")
        if role == "assistant" and message.get("toolCalls"):
            calls = [c for c in message["toolCalls"] if c.get("id") in answered]
            if len(calls) != len(message["toolCalls"]):
                message = {**message, "toolCalls": calls}
                if not calls:
                    del message["toolCalls"]
                    if not message.get("content"):
                        continue
            called.update(c["id"] for c in calls)
        elif role == "tool" and message.get("toolCallId") not in called:
            continue
        out.append(message)
    return out
