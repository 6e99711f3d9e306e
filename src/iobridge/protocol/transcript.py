"""Fold a run's AG-UI events into the AG-UI messages it produced (for thread memory).

The same rules a client applies: text messages become assistant messages, tool calls attach
to the assistant message named by ``parentMessageId``, TOOL_CALL_RESULT becomes a ``tool``
message, reasoning becomes a ``reasoning`` message. A message a subagent produced keeps its
``subagentRunId`` (AG-UI 1.0), as the client's copy does. ``seal`` ends the fold; on failure the
messages still open at that moment are dropped, so a failed run never stores half a message.
"""

from __future__ import annotations

import io
from typing import Any

import orjson

from iobridge.protocol import events as ev
from iobridge.protocol.events import Event


class Transcript:
    """Messages produced by one run, in order of first appearance."""

    def __init__(self) -> None:
        self._messages: dict[str, dict[str, Any]] = {}
        self._open: set[str] = set()
        self._calls: dict[str, dict[str, Any]] = {}
        #: Text per message, written as it streams: a buffer holds the text once (a list of
        #: fragments costs ~60 bytes of objects per fragment, 100 MiB for a 3.6 MiB reply
        #: streamed word by word), and appending to a growing str would be quadratic.
        self._parts: dict[str, io.StringIO] = {}
        self._args: dict[str, list[str]] = {}
        self._sealed = False

    def apply(self, event: Event) -> None:
        """Fold one emitted event in (ignored once sealed)."""
        if self._sealed:
            return
        kind = event["type"]
        if kind in (ev.TEXT_MESSAGE_CONTENT, ev.REASONING_MESSAGE_CONTENT):
            buffer = self._parts.get(event["messageId"])
            if buffer is None:
                buffer = self._parts[event["messageId"]] = io.StringIO()
            buffer.write(event["delta"])
        elif kind == ev.TEXT_MESSAGE_START:
            self._assistant(event["messageId"], event.get("subagentRunId"))
            self._parts.setdefault(event["messageId"], io.StringIO())
            self._open.add(event["messageId"])
        elif kind in (ev.TEXT_MESSAGE_END, ev.REASONING_MESSAGE_END):
            self._open.discard(event["messageId"])
        elif kind == ev.TOOL_CALL_START:
            parent = self._assistant(
                event.get("parentMessageId") or event["toolCallId"], event.get("subagentRunId")
            )
            call = {
                "id": event["toolCallId"],
                "type": "function",
                "function": {"name": event["toolCallName"], "arguments": ""},
            }
            parent.setdefault("toolCalls", []).append(call)
            self._calls[event["toolCallId"]] = call
            self._args[event["toolCallId"]] = []
        elif kind == ev.TOOL_CALL_ARGS:
            self._args[event["toolCallId"]].append(event["delta"])
        elif kind == ev.TOOL_CALL_RESULT:
            self._messages[event["messageId"]] = {
                "id": event["messageId"],
                "role": "tool",
                "toolCallId": event["toolCallId"],
                "content": event["content"],
                **_attribution(event),
            }
        elif kind == ev.REASONING_MESSAGE_START:
            self._messages[event["messageId"]] = {
                "id": event["messageId"], "role": "reasoning", **_attribution(event),
            }
            self._parts[event["messageId"]] = io.StringIO()
            self._open.add(event["messageId"])
        elif kind == ev.REASONING_ENCRYPTED_VALUE:
            self._encrypted_value(event)

    def _encrypted_value(self, event: Event) -> None:
        """``encryptedValue`` on the message or tool call it names (AG-UI 1.0), with the
        event's metadata on a message (who produced the value); unknown ids are ignored."""
        entity = event.get("entityId")
        value = event.get("encryptedValue")
        if not isinstance(entity, str) or not isinstance(value, str):
            return
        target = (self._calls if event.get("subtype") == "tool-call" else self._messages).get(
            entity
        )
        if target is None:
            return
        target["encryptedValue"] = value
        metadata = event.get("metadata")
        if event.get("subtype") != "tool-call" and isinstance(metadata, dict):
            target["metadata"] = {**target.get("metadata", {}), **metadata}

    def restore(self, messages: list[dict[str, Any]]) -> None:
        """Start from ``messages`` (what ``messages`` gave at a durable point, where nothing
        was open): a run continued in another process goes on from them."""
        for stored in messages:
            message = dict(stored)
            message_id = message["id"]
            content = message.get("content")
            if message.get("role") != "tool" and isinstance(content, str):
                del message["content"]
                buffer = self._parts[message_id] = io.StringIO()
                buffer.write(content)  # at its end: what is streamed next follows it
            calls = message.get("toolCalls")
            if calls:
                message["toolCalls"] = []
                for call in calls:
                    kept = {**call, "function": {**call["function"], "arguments": ""}}
                    message["toolCalls"].append(kept)
                    self._calls[call["id"]] = kept
                    self._args[call["id"]] = [call["function"].get("arguments", "")]
            self._messages[message_id] = message

    def mark_error(self, tool_call_id: str, error: str | None) -> None:
        """Record the error text of a tool result (``ToolMessage.error``)."""
        if error is None:
            return
        for message in reversed(self._messages.values()):
            if message.get("role") == "tool" and message.get("toolCallId") == tool_call_id:
                message["error"] = error
                return

    def unanswered_calls(self) -> list[str]:
        """Ids of the tool calls issued in this run that have no result message."""
        answered = {m.get("toolCallId") for m in self._messages.values() if m["role"] == "tool"}
        return [call_id for call_id in self._calls if call_id not in answered]

    def add_error_result(self, message_id: str, tool_call_id: str, error: str) -> None:
        """Close an unanswered call with a failed ``tool`` message (stored history must pair
        every call with a result, or it cannot be replayed to a model)."""
        content = orjson.dumps({"error": error}).decode()
        self._messages[message_id] = {
            "id": message_id,
            "role": "tool",
            "toolCallId": tool_call_id,
            "content": content,
            "error": error,
        }

    def seal(self, *, complete: bool) -> None:
        """Stop folding; when the run did not complete, drop messages still open."""
        if self._sealed:
            return
        self._sealed = True
        if not complete:
            for message_id in self._open:
                message = self._messages.get(message_id)
                if message is None:
                    continue
                if message.get("toolCalls"):
                    self._parts.pop(message_id, None)
                else:
                    del self._messages[message_id]
        self._open.clear()

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The produced messages (assistant messages without text carry no ``content``)."""
        result = []
        for message_id, message in self._messages.items():
            message = dict(message)
            buffer = self._parts.get(message_id)
            text = buffer.getvalue() if buffer is not None else ""
            if text or message["role"] == "reasoning":
                message["content"] = text
            if "toolCalls" in message:
                message["toolCalls"] = [
                    {**call, "function": {**call["function"],
                                          "arguments": "".join(self._args[call["id"]])}}
                    for call in message["toolCalls"]
                ]
            result.append(message)
        return result

    def _assistant(self, message_id: str, subagent: str | None = None) -> dict[str, Any]:
        message = self._messages.get(message_id)
        if message is None:
            message = self._messages[message_id] = {"id": message_id, "role": "assistant"}
            if subagent is not None:
                message["subagentRunId"] = subagent
        return message


def _attribution(event: Event) -> dict[str, Any]:
    """``{"subagentRunId": ...}`` when a subagent produced ``event``, else nothing."""
    subagent = event.get("subagentRunId")
    return {"subagentRunId": subagent} if subagent is not None else {}
