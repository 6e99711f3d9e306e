"""One upstream AG-UI run's events as outputs and tool calls of the client's run.

``UpstreamRound`` reads the events of one upstream run and acts on the client's run through
its ``RunContext``, so the runtime's session and guard decide ids and lifecycle:

- Text and reasoning become ``TextDelta``/``TextEnd`` and ``ReasoningDelta``/``ReasoningEnd``
  (iobridge's message ids; a message opened and closed without content shows nothing).
- Tool calls are announced with ``ctx.start_tool_call`` under an id the bridge mints: an
  upstream (a small model behind it) may reuse ``c1`` in every run, and one id twice in a
  thread pairs calls with the wrong results. The upstream's own ids stay in ``conversation``,
  what its follow-up run receives. A call the upstream answers with TOOL_CALL_RESULT is
  completed as a server tool call; a call of a client tool is kept for the agent to await
  (``frontend_calls``).
- Steps, state snapshots and deltas, CUSTOM become their outputs; RAW and other types go to
  the guard as they are (it drops malformed ones and wraps unknown types in RAW).
- RUN_STARTED is dropped (the guard emits its own); RUN_FINISHED ends the round, its
  ``result``, ``outcome`` (interrupt, cancelled) and ``usage`` kept for the agent; RUN_ERROR
  fails the run (its usage counted). MESSAGES_SNAPSHOT is dropped: it names the upstream's
  message ids, which the client never sees, and iobridge's thread memory owns the history.
- REASONING_ENCRYPTED_VALUE on one of the upstream's reasoning messages goes onto the
  client's reasoning message (marked as this agent's, so only it gets the value back), on a
  tool call onto that call; on anything else it is dropped.
- Each event's ``metadata`` passes through onto the events it becomes (``ctx.annotate``),
  without the ``ag-ui`` key, which is the protocol's own: what an upstream's protocol layer
  put there describes its stream, not the translated one.
- A TOOL_CALL_RESULT for a call of an earlier run that the run's ``resume`` answers (an
  interrupted approval) is that call's result: the client already holds the call, so it is
  not announced again (``ctx.answer_earlier_call``).

The round also folds what it announced into AG-UI messages in the upstream's ids
(``conversation``), which a follow-up upstream run receives after the tool results. What the
round keeps (text, arguments, results, ids) counts against ``max_round_bytes``; beyond it the
run ends with ``UPSTREAM_TOO_LARGE``, so an endless upstream cannot grow it without bound.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from iobridge.agents import outputs as out
from iobridge.agents.context import ToolResult
from iobridge.errors import AgentError
from iobridge.protocol import events as ev
from iobridge.protocol.media import content_problems
from iobridge.protocol.run_limits import DEFAULT_MAX_UPSTREAM_ROUND_BYTES
from iobridge.protocol.text import is_id

if TYPE_CHECKING:
    from iobridge.agents.context import RunContext, ToolCallHandle

logger = logging.getLogger(__name__)

_DROPPED = frozenset({ev.RUN_STARTED, ev.MESSAGES_SNAPSHOT})
#: The ``metadata`` key reserved for AG-UI's own use (``ag_ui.core.AGUI_METADATA_KEY``).
AGUI_METADATA_KEY = "ag-ui"
#: What one entry (a message, a call, an id in a table) costs beyond its text.
_ENTRY_COST = 64
UPSTREAM_TOO_LARGE = "UPSTREAM_TOO_LARGE"


@dataclass(slots=True, eq=False)
class UpstreamCall:
    """A tool call the upstream announced."""

    handle: ToolCallHandle
    #: The call as the upstream's history holds it (arguments filled in at its end).
    entry: dict[str, Any]
    frontend: bool
    fragments: io.StringIO = field(default_factory=io.StringIO)
    ended: bool = False
    answered: bool = False


class UpstreamRound:
    """The events of one upstream run, applied to the client's run.

    Args:
        ctx: The client's run.
        max_round_bytes: Most bytes the round may keep (see the module docstring).
        used_ids: Tool call ids taken in the thread and this run (updated as calls start).
        agent_id: The agent the round runs for (its reasoning values are marked with it).
        resumed: Calls of earlier runs that this run's ``resume`` answers: id -> the call
            as the history holds it (``{id, function: {name, arguments}}``).
    """

    def __init__(
        self, ctx: RunContext, max_round_bytes: int = DEFAULT_MAX_UPSTREAM_ROUND_BYTES, *,
        used_ids: set[str] | None = None, agent_id: str = "",
        resumed: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.used_ids = used_ids if used_ids is not None else set()
        self.max_round_bytes = max_round_bytes
        #: Bytes kept so far (text, arguments, results, ids).
        self.kept_bytes = 0
        self.agent_id = agent_id
        self.resumed = dict(resumed or {})
        #: The upstream ended its run (RUN_FINISHED); nothing after it is read.
        self.finished = False
        #: ``RUN_FINISHED.result``, when the upstream gave one.
        self.result: Any = None
        #: ``RUN_FINISHED.outcome`` when it was an interrupt or a cancellation.
        self.outcome: dict[str, Any] | None = None
        #: The upstream's last STATE_SNAPSHOT (``has_state``), for its follow-up run.
        self.state: Any = None
        self.has_state = False
        #: Client tool calls, in order, for the agent to await after the round.
        self.frontend_calls: list[UpstreamCall] = []
        self._calls: dict[str, UpstreamCall] = {}
        self._messages: list[dict[str, Any]] = []
        self._assistant: dict[str, Any] | None = None
        self._text: str | None = None
        self._closed_texts: set[str] = set()
        self._reasoning: str | None = None
        #: The upstream's reasoning message ids seen in this round.
        self._reasoning_ids: set[str] = set()
        self._chunk_call: str | None = None

    def feed(self, event: dict[str, Any]) -> None:
        """Apply one upstream event (an object with a string ``type``).

        Raises:
            AgentError: the upstream sent RUN_ERROR (``UPSTREAM_RUN_ERROR``).
        """
        kind = event["type"]
        metadata = passed_metadata(event)
        if metadata is not None:
            self.ctx.annotate(metadata)
        try:
            if self._chunk_call is not None and kind != ev.TOOL_CALL_CHUNK:
                self._end_call(self._chunk_call)
                self._chunk_call = None
            handler = _HANDLERS.get(kind)
            if handler is not None:
                handler(self, event)
            elif kind not in _DROPPED:
                raw = {k: v for k, v in event.items() if k != "metadata"}
                self.ctx.emit(out.RawEvent(event=raw))
        finally:
            if metadata is not None:
                self.ctx.annotate(None)

    def close(self) -> None:
        """End the round: close its open call chunk, text and reasoning."""
        if self._chunk_call is not None:
            self._end_call(self._chunk_call)
            self._chunk_call = None
        if self._text is not None:
            self.ctx.emit(out.TextEnd())
            self._text = None
        if self._reasoning is not None:
            self.ctx.emit(out.ReasoningEnd())
            self._reasoning = None

    def conversation(self, answers: Sequence[ToolResult]) -> list[dict[str, Any]]:
        """What this round adds to the upstream's history: its assistant messages and tool
        results, then ``answers`` (the results of ``frontend_calls``, in order).

        Calls that never ended, and non-client calls the upstream did not answer, are left
        out: a history with an unpaired call is refused by most model providers.
        """
        kept = {
            id(call.entry) for call in self._calls.values()
            if call.ended and (call.answered or call.frontend)
        }
        messages = []
        for message in self._messages:
            message = dict(message)
            if isinstance(message.get("content"), io.StringIO):
                message["content"] = message["content"].getvalue()
            calls = [c for c in message.pop("toolCalls", []) if id(c) in kept]
            if calls:
                message["toolCalls"] = calls
            if message["role"] != "assistant" or "content" in message or calls:
                messages.append(message)
        for call, answer in zip(self.frontend_calls, answers, strict=True):
            messages.append(_tool_message(call.entry["id"], answer.content))
        return messages

    def _keep(self, text: str | None, entries: int = 0) -> None:
        """Count what the round keeps.

        Raises:
            AgentError: past ``max_round_bytes`` (``UPSTREAM_TOO_LARGE``).
        """
        self.kept_bytes += (len(text) if text else 0) + entries * _ENTRY_COST
        if self.kept_bytes > self.max_round_bytes:
            logger.warning("the upstream run kept more than %d bytes", self.max_round_bytes)
            raise AgentError(
                "The upstream agent sent more than this server keeps for one run.",
                code=UPSTREAM_TOO_LARGE,
            )

    # -- run lifecycle ---------------------------------------------------------------

    def _on_run_finished(self, event: dict[str, Any]) -> None:
        self.finished = True
        self.result = event.get("result")
        self._add_usage(event.get("usage"))
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") in ("interrupt", "cancelled"):
            self.outcome = outcome

    def _on_run_error(self, event: dict[str, Any]) -> None:
        self._add_usage(event.get("usage"))
        logger.warning("the upstream agent failed: %r (code %r)",
                       str(event.get("message"))[:300], str(event.get("code"))[:64])
        raise AgentError("The upstream agent reported an error.", code="UPSTREAM_RUN_ERROR")

    def _add_usage(self, usage: Any) -> None:
        """The upstream's token counts, summed into the run's (``ctx.add_usage`` keeps only
        non-negative integer counts)."""
        for entry in usage if isinstance(usage, list) else []:
            if not isinstance(entry, dict):
                continue
            provider, model = entry.get("provider"), entry.get("model")
            self.ctx.add_usage(provider if isinstance(provider, str) else None,
                               model if isinstance(model, str) else None, entry)

    def local_call_id(self, upstream_id: str) -> str | None:
        """The client's id of a call the upstream announced in this round (``None``: none)."""
        call = self._calls.get(upstream_id)
        return call.handle.tool_call_id if call is not None else None

    # -- text and reasoning ----------------------------------------------------------

    def _on_text_content(self, event: dict[str, Any]) -> None:
        message_id = event.get("messageId")
        delta = event.get("delta")
        if not isinstance(message_id, str) or not isinstance(delta, str) or not delta:
            return
        if message_id in self._closed_texts:
            return
        self._keep(delta)
        if message_id != self._text:
            if self._text is not None:
                self.ctx.emit(out.TextEnd())
            self._text = message_id
            self.ctx.emit(out.TextDelta(delta=delta))
        else:
            self.ctx.emit(delta)
        assistant = self._assistant_message()
        buffer = assistant.get("content")
        if buffer is None:
            buffer = assistant["content"] = io.StringIO()
        buffer.write(delta)

    def _on_text_end(self, event: dict[str, Any]) -> None:
        message_id = event.get("messageId")
        if not isinstance(message_id, str):
            return
        if message_id == self._text:
            self.ctx.emit(out.TextEnd())
            self._text = None
        if message_id not in self._closed_texts:
            self._keep(message_id, entries=1)
            self._closed_texts.add(message_id)

    def _on_text_chunk(self, event: dict[str, Any]) -> None:
        message_id = event.get("messageId")
        if not isinstance(message_id, str):
            message_id = self._text or "chunk"
        self._on_text_content({"messageId": message_id, "delta": event.get("delta")})

    def _on_reasoning_start(self, event: dict[str, Any]) -> None:
        message_id = event.get("messageId")
        if isinstance(message_id, str):
            self._reasoning_ids.add(message_id)

    def _on_reasoning_content(self, event: dict[str, Any]) -> None:
        message_id = event.get("messageId")
        message_id = message_id if isinstance(message_id, str) else self._reasoning or "thinking"
        self._reasoning_ids.add(message_id)
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        if self._reasoning is not None and message_id != self._reasoning:
            self.ctx.emit(out.ReasoningEnd())
        self._reasoning = message_id
        self.ctx.emit(out.ReasoningDelta(delta=delta))

    def _on_reasoning_end(self, event: dict[str, Any]) -> None:
        if self._reasoning is not None:
            self.ctx.emit(out.ReasoningEnd())
            self._reasoning = None

    def _on_encrypted_value(self, event: dict[str, Any]) -> None:
        entity, value = event.get("entityId"), event.get("encryptedValue")
        if not isinstance(entity, str) or not isinstance(value, str) or not value:
            return
        if event.get("subtype") == "tool-call" and entity in self._calls:
            call = self._calls[entity]
            call.entry["encryptedValue"] = value  # the upstream's follow-up runs get it back
            self.ctx.emit(out.ReasoningEncryptedValue(value=value,
                                                      tool_call_id=call.handle.tool_call_id))
        elif event.get("subtype") == "message" and entity in self._reasoning_ids:
            self.ctx.emit(out.ReasoningEncryptedValue(
                value=value, metadata={"iobridge": {"agent": self.agent_id}}
            ))
        else:
            logger.info("dropping an upstream encrypted value for %r", entity[:64])

    # -- tool calls ------------------------------------------------------------------

    def _on_tool_start(self, event: dict[str, Any]) -> None:
        upstream_id = event.get("toolCallId")
        name = event.get("toolCallName")
        if (
            not isinstance(upstream_id, str) or not upstream_id
            or not isinstance(name, str) or not name
            or upstream_id in self._calls
            or upstream_id in self.resumed  # the client holds it: only its result is new
        ):
            return
        self._keep(upstream_id + name, entries=2)
        handle = self.ctx.start_tool_call(name, tool_call_id=self._local_id(upstream_id))
        self.used_ids.add(handle.tool_call_id)
        entry = {"id": upstream_id, "type": "function",
                 "function": {"name": name, "arguments": "{}"}}
        self._assistant_message().setdefault("toolCalls", []).append(entry)
        self._calls[upstream_id] = UpstreamCall(
            handle=handle, entry=entry, frontend=self.ctx.session.is_frontend_tool(name)
        )

    def _local_id(self, upstream_id: str) -> str | None:
        """The upstream's id when the client's run can use it: its later runs see the ids
        it made; one the thread or this run already holds, or no valid id, is minted anew
        (``None``)."""
        if not is_id(upstream_id):
            return None
        return None if upstream_id in self.used_ids else upstream_id

    def _on_tool_args(self, event: dict[str, Any]) -> None:
        upstream_id = event.get("toolCallId")
        call = self._calls.get(upstream_id) if isinstance(upstream_id, str) else None
        delta = event.get("delta")
        if call is not None and not call.ended and isinstance(delta, str) and delta:
            self._keep(delta)
            call.fragments.write(delta)
            call.handle.add_args(delta)

    def _on_tool_end(self, event: dict[str, Any]) -> None:
        upstream_id = event.get("toolCallId")
        if isinstance(upstream_id, str):
            self._end_call(upstream_id)

    def _end_call(self, upstream_id: str) -> None:
        call = self._calls.get(upstream_id)
        if call is None or call.ended:
            return
        call.ended = True
        call.entry["function"]["arguments"] = call.fragments.getvalue() or "{}"
        call.handle.end()
        if call.frontend:
            self.frontend_calls.append(call)

    def _on_tool_chunk(self, event: dict[str, Any]) -> None:
        upstream_id = event.get("toolCallId")
        if isinstance(upstream_id, str) and upstream_id != self._chunk_call:
            if self._chunk_call is not None:
                self._end_call(self._chunk_call)
            self._on_tool_start(
                {"toolCallId": upstream_id, "toolCallName": event.get("toolCallName")}
            )
            self._chunk_call = upstream_id if upstream_id in self._calls else None
        if self._chunk_call is not None:
            self._on_tool_args({"toolCallId": self._chunk_call, "delta": event.get("delta")})

    def _on_tool_result(self, event: dict[str, Any]) -> None:
        upstream_id = event.get("toolCallId")
        if isinstance(upstream_id, str) and upstream_id in self.resumed:
            del self.resumed[upstream_id]
            result = _result(event.get("content"))
            self.ctx.answer_earlier_call(upstream_id, result)
            self._messages.append(_tool_message(upstream_id, result.parts or result.content))
            self._assistant = None
            return
        call = self._calls.get(upstream_id) if isinstance(upstream_id, str) else None
        if call is None or call.frontend or call.answered:
            return  # the client answers its own tools; a second result is dropped
        self._end_call(upstream_id)  # type: ignore[arg-type]
        result = _result(event.get("content"))
        kept = result.content if result.parts is None else orjson.dumps(result.parts).decode()
        self._keep(kept, entries=1)
        call.answered = True
        call.handle.complete(result)
        self._messages.append(_tool_message(call.entry["id"], result.parts or result.content))
        self._assistant = None

    # -- steps, state, custom --------------------------------------------------------

    def _on_step_started(self, event: dict[str, Any]) -> None:
        name = event.get("stepName")
        if isinstance(name, str) and name:
            self.ctx.emit(out.StepStarted(name=name))

    def _on_step_finished(self, event: dict[str, Any]) -> None:
        name = event.get("stepName")
        if isinstance(name, str) and name:
            self.ctx.emit(out.StepFinished(name=name))

    def _on_state_snapshot(self, event: dict[str, Any]) -> None:
        self.state, self.has_state = event.get("snapshot"), True
        self.ctx.emit(out.StateSnapshot(snapshot=self.state))

    def _on_state_delta(self, event: dict[str, Any]) -> None:
        patch = event.get("delta")
        if isinstance(patch, list):
            self.ctx.emit(out.StateDelta(patch=patch))

    def _on_custom(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        if isinstance(name, str) and name:
            self.ctx.emit(out.CustomEvent(name=name, value=event.get("value")))

    # -- helpers ---------------------------------------------------------------------

    def _assistant_message(self) -> dict[str, Any]:
        """The assistant message the round's text and calls go to (a new one after a result)."""
        if self._assistant is None:
            self._keep(None, entries=1)
            self._assistant = {"id": uuid.uuid4().hex, "role": "assistant"}
            self._messages.append(self._assistant)
        return self._assistant


def _result(content: Any) -> ToolResult:
    """An upstream TOOL_CALL_RESULT's content as a result: AG-UI 1.0 content parts (an image
    a tool made, say) stay parts; anything but text becomes JSON text."""
    if isinstance(content, list) and content and not content_problems(content, ()):
        text = "".join(p["text"] for p in content if p.get("type") == "text")
        return ToolResult(content=text, value=content, parts=content)
    if not isinstance(content, str):
        content = orjson.dumps(content, default=str).decode()
    return ToolResult(content=content)


def passed_metadata(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """An upstream event's ``metadata`` as it passes through: an object, without the key
    AG-UI reserves for itself (``None``: nothing to pass)."""
    metadata = event.get("metadata")
    if not isinstance(metadata, dict):
        return None
    passed = {k: v for k, v in metadata.items() if k != AGUI_METADATA_KEY}
    return passed or None


def _tool_message(tool_call_id: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "tool", "toolCallId": tool_call_id,
            "content": content}


def _skip(upstream: UpstreamRound, event: dict[str, Any]) -> None:
    """Events whose effect comes with the next one (a message opens with its content)."""


_Handler = Callable[[UpstreamRound, dict[str, Any]], None]
_HANDLERS: dict[str, _Handler] = {
    ev.RUN_FINISHED: UpstreamRound._on_run_finished,
    ev.RUN_ERROR: UpstreamRound._on_run_error,
    ev.TEXT_MESSAGE_START: _skip,  # opened by its first content
    ev.TEXT_MESSAGE_CONTENT: UpstreamRound._on_text_content,
    ev.TEXT_MESSAGE_END: UpstreamRound._on_text_end,
    ev.TEXT_MESSAGE_CHUNK: UpstreamRound._on_text_chunk,
    ev.REASONING_START: _skip,
    ev.REASONING_MESSAGE_START: UpstreamRound._on_reasoning_start,
    ev.REASONING_ENCRYPTED_VALUE: UpstreamRound._on_encrypted_value,
    ev.REASONING_MESSAGE_CONTENT: UpstreamRound._on_reasoning_content,
    ev.REASONING_MESSAGE_CHUNK: UpstreamRound._on_reasoning_content,
    ev.REASONING_MESSAGE_END: UpstreamRound._on_reasoning_end,
    ev.REASONING_END: UpstreamRound._on_reasoning_end,
    # The deprecated THINKING_* family of AG-UI 0.x, still sent by older servers.
    "THINKING_START": _skip,
    "THINKING_TEXT_MESSAGE_START": _skip,
    "THINKING_TEXT_MESSAGE_CONTENT": UpstreamRound._on_reasoning_content,
    "THINKING_TEXT_MESSAGE_END": UpstreamRound._on_reasoning_end,
    "THINKING_END": UpstreamRound._on_reasoning_end,
    ev.TOOL_CALL_START: UpstreamRound._on_tool_start,
    ev.TOOL_CALL_ARGS: UpstreamRound._on_tool_args,
    ev.TOOL_CALL_END: UpstreamRound._on_tool_end,
    ev.TOOL_CALL_CHUNK: UpstreamRound._on_tool_chunk,
    ev.TOOL_CALL_RESULT: UpstreamRound._on_tool_result,
    ev.STEP_STARTED: UpstreamRound._on_step_started,
    ev.STEP_FINISHED: UpstreamRound._on_step_finished,
    ev.STATE_SNAPSHOT: UpstreamRound._on_state_snapshot,
    ev.STATE_DELTA: UpstreamRound._on_state_delta,
    ev.CUSTOM: UpstreamRound._on_custom,
}
