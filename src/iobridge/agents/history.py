"""AG-UI history and context as pydantic-ai input.

``RunContext.messages`` (AG-UI dicts, already without activity/reasoning) become pydantic-ai
messages: user/system/developer/assistant text, assistant ``toolCalls`` as ``ToolCallPart``
paired with ``tool`` messages as ``ToolReturnPart`` (failed when the message has ``error``).
Calls without a result, and results without a call, are dropped, since providers reject
unpaired ones. A result pairs with the nearest earlier unanswered call of its id, and an id
that a thread holds more than once (stored before the bridge minted its own, or sent so by
a client) reaches the provider renamed (``c1``, ``c1-2``, ...): providers refuse a history
with one id twice. Multimodal parts become file parts, or a text placeholder.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
    VideoUrl,
)

logger = logging.getLogger(__name__)


def context_instructions(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """``RunAgentInput.context`` entries as an instructions paragraph for the model."""
    lines = []
    for entry in entries:
        description = str(entry.get("description", "")).strip()
        value = entry.get("value", "")
        value = value if isinstance(value, str) else str(value)
        lines.append(f"- {description}: {value}" if description else f"- {value}")
    if not lines:
        return None
    return "Context provided by the application:\n" + "\n".join(lines)


# --- AG-UI history -> pydantic-ai messages -------------------------------------------------

_URL_KINDS: dict[str, type[ImageUrl | AudioUrl | VideoUrl | DocumentUrl]] = {
    "image": ImageUrl,
    "audio": AudioUrl,
    "video": VideoUrl,
    "document": DocumentUrl,
}


def _url_kind(mime: str | None) -> str:
    major = (mime or "").partition("/")[0]
    return major if major in ("image", "audio", "video") else "document"


def _file_part(kind: str, source: str, value: Any, mime: Any) -> UserContent | None:
    """A URL or inline-data part, or ``None`` when the model cannot be given it."""
    if not isinstance(value, str) or not value:
        return None
    mime = mime if isinstance(mime, str) and mime else None
    if source == "url":
        return _URL_KINDS[kind](url=value, media_type=mime)
    if source == "data" and mime is not None:
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return BinaryContent(data=data, media_type=mime)
    return None


def _content_item(item: Any) -> UserContent:
    """One AG-UI input content part as pydantic-ai user content (a placeholder if unusable)."""
    if not isinstance(item, Mapping):
        return "[unsupported content]"
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        return text if isinstance(text, str) else ""
    if kind in _URL_KINDS:
        source = item.get("source")
        if isinstance(source, Mapping):
            part = _file_part(kind, source.get("type", ""), source.get("value"),
                              source.get("mimeType"))
            if part is not None:
                return part
        return f"[{kind} attachment not available to the model]"
    if kind == "binary":  # deprecated 0.x form
        mime = item.get("mimeType")
        url_kind = _url_kind(mime if isinstance(mime, str) else None)
        part = _file_part(url_kind, "url", item.get("url"), mime) or _file_part(
            url_kind, "data", item.get("data"), mime
        )
        if part is not None:
            return part
        name = item.get("filename") or item.get("id") or "file"
        return f"[attachment {name} not available to the model]"
    return f"[unsupported content: {kind}]"


def _text_of(content: Any) -> str:
    """Tool or assistant content as text (content-part lists keep their text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, Mapping)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return "" if content is None else str(content)


def _pair_calls(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[dict[tuple[int, int], str], dict[int, str]]:
    """The provider id of every paired call (by message and call index) and of every paired
    result (by message index): each result takes the nearest earlier unanswered call of its
    id (of one message, the first); the second call of one id is ``<id>-2`` (a free name),
    and so on."""
    taken = {
        tc.get("id")
        for m in messages
        if m.get("role") == "assistant"
        for tc in (m.get("toolCalls") or [])
        if isinstance(tc, Mapping)
    }
    uses: dict[str, int] = {}
    waiting: dict[str, list[tuple[int, int, str]]] = {}
    calls: dict[tuple[int, int], str] = {}
    results: dict[int, str] = {}
    for index, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            for number, call in enumerate(msg.get("toolCalls") or []):
                call_id = call.get("id") if isinstance(call, Mapping) else None
                if not isinstance(call_id, str):
                    continue
                uses[call_id] = uses.get(call_id, 0) + 1
                name = call_id
                if uses[call_id] > 1:
                    suffix = uses[call_id]
                    while f"{call_id}-{suffix}" in taken:
                        suffix += 1
                    name = f"{call_id}-{suffix}"
                    taken.add(name)
                waiting.setdefault(call_id, []).append((index, number, name))
        elif role == "tool":
            call_id = msg.get("toolCallId")
            pending = waiting.get(call_id) if isinstance(call_id, str) else None
            if pending:
                # The latest message's calls of this id, in the order it made them.
                latest = pending[-1][0]
                first = next(i for i, entry in enumerate(pending) if entry[0] == latest)
                at, number, name = pending.pop(first)
                calls[(at, number)] = results[index] = name
    return calls, results


def to_model_messages(messages: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """AG-UI message dicts as pydantic-ai message history (see the module docstring)."""
    paired, answers = _pair_calls(messages)
    names: dict[str, str] = {}
    groups: list[tuple[bool, list[Any]]] = []  # (is_response, parts)

    def add(part: ModelRequestPart | ModelResponsePart, response: bool) -> None:
        if groups and groups[-1][0] is response:
            groups[-1][1].append(part)
        else:
            groups.append((response, [part]))

    for index, msg in enumerate(messages):
        role = msg.get("role")
        if role == "user":
            content = msg.get("content")
            if isinstance(content, list):
                items = [_content_item(c) for c in content]
                add(UserPromptPart(content=items), False)
            else:
                add(UserPromptPart(content=_text_of(content)), False)
        elif role in ("system", "developer"):
            add(SystemPromptPart(content=_text_of(msg.get("content"))), False)
        elif role == "assistant":
            text = _text_of(msg.get("content"))
            if text:
                add(TextPart(content=text), True)
            for number, call in enumerate(msg.get("toolCalls") or []):
                call_id = paired.get((index, number))
                if call_id is None:
                    logger.info("dropping tool call %r without a result from history",
                                call.get("id") if isinstance(call, Mapping) else None)
                    continue
                function = call.get("function") or {}
                names[call_id] = str(function.get("name", ""))
                add(ToolCallPart(tool_name=names[call_id], args=function.get("arguments") or "{}",
                                 tool_call_id=call_id), True)
        elif role == "tool":
            call_id = answers.get(index)
            if call_id is None or call_id not in names:
                logger.info("dropping tool result %r without a call from history",
                            msg.get("toolCallId"))
                continue
            error = msg.get("error")
            content = _text_of(msg.get("content"))
            if error:
                add(ToolReturnPart(tool_name=names[call_id], content=content or str(error),
                                   tool_call_id=call_id, outcome="failed"), False)
            else:
                add(ToolReturnPart(tool_name=names[call_id], content=content,
                                   tool_call_id=call_id), False)
    return [
        ModelResponse(parts=parts) if is_response else ModelRequest(parts=parts)
        for is_response, parts in groups
    ]
