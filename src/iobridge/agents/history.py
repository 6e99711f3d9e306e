"""AG-UI history and context as pydantic-ai input.

``RunContext.messages`` (AG-UI dicts, already without activity/reasoning) become pydantic-ai
messages: user/system/developer/assistant text, assistant ``toolCalls`` as ``ToolCallPart``
paired with ``tool`` messages as ``ToolReturnPart`` (failed when the message has ``error``).
Calls without a result, and results without a call, are dropped, since providers reject
unpaired ones. A result pairs with the nearest earlier unanswered call of its id, and an id
that a thread holds more than once (stored before the bridge minted its own, or sent so by
a client) reaches the provider renamed (``c1``, ``c1-2``, ...): providers refuse a history
with one id twice.

Media parts (AG-UI 1.0 ``image``/``audio``/``video``/``document``, in user messages and in
tool results) become pydantic-ai's native content: a ``url`` source an ``ImageUrl``,
``AudioUrl``, ``VideoUrl`` or ``DocumentUrl``; inline ``data`` a ``BinaryContent``; a
provider ``file`` handle an ``UploadedFile``, but only for the provider that issued it (the
run's model, when the handle names none). Anything else becomes a short text placeholder in a
user message, and is left out of a tool result.

Reasoning reaches the model only as its provider's own artefact: a ``reasoning`` message with
an ``encryptedValue`` becomes a ``ThinkingPart`` with that signature, for the provider and
model that produced it (``metadata.iobridge``, written when it was streamed), and is left out
for any other.
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
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
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


def _file_part(
    kind: str, source: Mapping[str, Any], provider: str | None
) -> UserContent | None:
    """A URL, inline-data or provider-file part, or ``None`` when the model cannot be given
    it (no value, bad base64, a handle of another provider)."""
    value = source.get("value")
    if not isinstance(value, str) or not value:
        return None
    mime = source.get("mimeType")
    mime = mime if isinstance(mime, str) and mime else None
    origin = source.get("type")
    if origin == "url":
        return _URL_KINDS[kind](url=value, media_type=mime)
    if origin == "data" and mime is not None:
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return BinaryContent(data=data, media_type=mime)
    if origin == "file" and provider is not None:
        issuer = source.get("provider")
        if issuer is not None and issuer != provider:
            logger.info("a %s file of provider %r is not sent to %r", kind, issuer, provider)
            return None
        return UploadedFile(file_id=value, provider_name=provider,  # type: ignore[arg-type]
                            media_type=mime)
    return None


def _media(item: Any, provider: str | None) -> UserContent | None:
    """One AG-UI content part as pydantic-ai content (``None``: the model cannot take it)."""
    if not isinstance(item, Mapping):
        return None
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        return text if isinstance(text, str) else ""
    if kind in _URL_KINDS:
        source = item.get("source")
        return _file_part(kind, source, provider) if isinstance(source, Mapping) else None
    if kind == "binary":  # deprecated 0.x form
        mime = item.get("mimeType")
        url_kind = _url_kind(mime if isinstance(mime, str) else None)
        return _file_part(url_kind, {"type": "url", "value": item.get("url"), "mimeType": mime},
                          provider) or _file_part(
            url_kind, {"type": "data", "value": item.get("data"), "mimeType": mime}, provider
        )
    return None


def _content_item(item: Any, provider: str | None) -> UserContent:
    """One part of a user message (a placeholder names what the model cannot be given)."""
    part = _media(item, provider)
    if part is not None:
        return part
    kind = item.get("type") if isinstance(item, Mapping) else None
    if kind in _URL_KINDS:
        return f"[{kind} attachment not available to the model]"
    if kind == "binary":
        name = item.get("filename") or item.get("id") or "file"
        return f"[attachment {name} not available to the model]"
    return f"[unsupported content: {kind}]" if kind else "[unsupported content]"


def tool_return_content(content: Any, provider: str | None) -> Any:
    """A tool message's content for ``ToolReturnPart``: its text, or its parts when it has
    media (text parts and what the model can take; the rest is left out)."""
    if not isinstance(content, list) or not any(
        isinstance(p, Mapping) and p.get("type") != "text" for p in content
    ):
        return _text_of(content)
    parts = [part for part in (_media(p, provider) for p in content) if part]
    return parts or ""


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


#: The ``metadata`` key under which iobridge records who produced a reasoning artefact.
PRODUCER_KEY = "iobridge"


def producer_metadata(**fields: Any) -> dict[str, Any]:
    """``metadata`` naming the producer of an encrypted value (``None`` fields left out)."""
    return {PRODUCER_KEY: {k: v for k, v in fields.items() if v is not None}}


def _thinking(message: Mapping[str, Any], provider: str | None,
              model_name: str | None) -> ThinkingPart | None:
    """A stored reasoning message as the ``ThinkingPart`` its model sent (``None``: another
    model's, or no artefact)."""
    value = message.get("encryptedValue")
    metadata = message.get("metadata")
    producer = metadata.get(PRODUCER_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(value, str) or not isinstance(producer, Mapping) or provider is None:
        return None
    if producer.get("provider") != provider or producer.get("model") != model_name:
        return None
    details = producer.get("details")
    part_id = producer.get("id")
    return ThinkingPart(
        content=_text_of(message.get("content")),
        signature=value,
        provider_name=provider,
        id=part_id if isinstance(part_id, str) else None,
        provider_details=dict(details) if isinstance(details, Mapping) else None,
    )


def to_model_messages(
    messages: Sequence[Mapping[str, Any]], *, provider: str | None = None,
    model_name: str | None = None,
) -> list[ModelMessage]:
    """AG-UI message dicts as pydantic-ai message history (see the module docstring).

    ``provider`` and ``model_name`` are the run's model (``Model.system``,
    ``Model.model_name``): provider file handles are only given to its provider, reasoning
    artefacts only to the model that produced them.
    """
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
                items = [_content_item(c, provider) for c in content]
                add(UserPromptPart(content=items), False)
            else:
                add(UserPromptPart(content=_text_of(content)), False)
        elif role in ("system", "developer"):
            add(SystemPromptPart(content=_text_of(msg.get("content"))), False)
        elif role == "reasoning":
            thinking = _thinking(msg, provider, model_name)
            if thinking is not None:
                add(thinking, True)
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
            if error:
                text = _text_of(msg.get("content"))
                add(ToolReturnPart(tool_name=names[call_id], content=text or str(error),
                                   tool_call_id=call_id, outcome="failed"), False)
            else:
                add(ToolReturnPart(tool_name=names[call_id],
                                   content=tool_return_content(msg.get("content"), provider),
                                   tool_call_id=call_id), False)
    return [
        ModelResponse(parts=parts) if is_response else ModelRequest(parts=parts)
        for is_response, parts in groups
    ]
