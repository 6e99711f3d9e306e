"""Stored AG-UI messages as the io.Intelligence frontends read them: Mastra message format v2.

io.Assist (through ``@interopio/ai-web``) renders history from ``content.parts`` of Mastra's
v2 messages, the shape of the reference backend (the Mastra bridge)::

    {id, role, createdAt, threadId, resourceId, type: "v2",
     content: {format: 2, parts: [...], content?: "<the text>"}}

Folding rules (pure, no I/O; the caller passes each message with its ISO ``createdAt``):

* ``user`` → a user message; text becomes ``{type: "text"}`` parts, and every media part
  (AG-UI 1.0 ``image``, ``audio``, ``video``, ``document``, and the 0.x ``binary`` part)
  becomes the file part Mastra stores for images and files alike (AI SDK v4, which format 2
  is): ``{type: "file", mimeType, mediaType, data, url?, filename?}``. ``data`` is what a
  renderer shows: a ``data:`` URL for inline data, the URL for a URL source, the provider's
  handle for a provider file. ``mediaType`` repeats ``mimeType`` under the AI SDK v5 name
  Mastra also reads; ``url`` (v5) is given for URL sources only, so inline data is sent
  once; ``filename`` comes from the part's ``metadata.filename``. A missing MIME type is
  guessed from the URL's extension, else ``application/octet-stream``.
* ``system``/``developer`` → a ``system`` message with text parts.
* Consecutive ``assistant``, ``reasoning`` and ``tool`` messages fold into **one** assistant
  message (the id of its first ``assistant`` message, the ``createdAt`` of its first
  message). Reasoning becomes ``{type: "reasoning", reasoning, details}``; each tool call
  becomes ``{type: "tool-invocation", toolInvocation: {state, toolCallId, toolName, args,
  result?}}`` with state ``result`` once its ``tool`` message exists (the result is parsed
  JSON when the content is JSON, else the text), ``call`` while it has none. A
  ``{type: "step-start"}`` part separates the steps: it precedes whatever follows an
  assistant message that made tool calls.
* A failed tool (a ``tool`` message with ``error``) is ``state: "result"`` with
  ``isError: true`` and ``result: {"error": "<message>"}`` (AI SDK v4, which format 2 is,
  has no error state; an object with ``error`` is how Mastra tools report failure).
* A ``tool`` message whose call appears nowhere before it keeps its result, as an invocation
  with an empty ``toolName``; ``activity`` messages (frontend UI state) and unknown roles
  are left out (``format=agui`` returns them).
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any

from iobridge.errors import InputError
from iobridge.protocol.json_limits import MAX_JSON_DEPTH_SETTING, loads

__all__ = ["MASTRA_MESSAGE_TYPE", "to_mastra"]

#: Mastra's ``type`` for messages in format 2.
MASTRA_MESSAGE_TYPE = "v2"

Message = Mapping[str, Any]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"]
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


_MEDIA = frozenset({"image", "audio", "video", "document"})
_OCTETS = "application/octet-stream"


def _file_part(
    origin: Any, value: Any, mime: Any, metadata: Any = None
) -> dict[str, Any] | None:
    """A Mastra file part for one media source (``None``: nothing to show)."""
    if not isinstance(value, str) or not value:
        return None
    if not isinstance(mime, str) or not mime:
        guessed = mimetypes.guess_type(value)[0] if origin == "url" else None
        mime = guessed or _OCTETS
    part: dict[str, Any] = {"type": "file", "mimeType": mime, "mediaType": mime}
    if origin == "data":
        part["data"] = f"data:{mime};base64,{value}"
    else:
        part["data"] = value
        if origin == "url":
            part["url"] = value
    if isinstance(metadata, Mapping) and isinstance(metadata.get("filename"), str):
        part["filename"] = metadata["filename"]
    return part


def _media_part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    if part.get("type") == "binary":  # the 0.x part: inline data, else its URL, else its id
        data, url = part.get("data"), part.get("url")
        if data:
            file = _file_part("data", data, part.get("mimeType"))
        else:
            file = _file_part("url" if url else "file", url or part.get("id"),
                              part.get("mimeType"))
        if file is not None and isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return file
    source = part.get("source")
    if not isinstance(source, Mapping):
        return None
    return _file_part(source.get("type"), source.get("value"), source.get("mimeType"),
                      part.get("metadata"))


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif part.get("type") in _MEDIA or part.get("type") == "binary":
            file = _media_part(part)
            if file is not None:
                parts.append(file)
    return parts


def _parse(content: Any) -> Any:
    """JSON text as its value; text that is not JSON within the limits (a deep nest stored
    before they applied, an integer beyond 64 bits) stays text, so the view always encodes."""
    if not isinstance(content, str):
        return content
    try:
        return loads(content, max_depth=MAX_JSON_DEPTH_SETTING)
    except InputError:
        return content


def _result(tool: Message) -> tuple[Any, bool]:
    """A tool message's result value, and whether it is an error."""
    value = _parse(tool.get("content", ""))
    error = tool.get("error")
    if error is None:
        return value, False
    if isinstance(value, Mapping) and "error" in value:
        return dict(value), True
    return {"error": error}, True


def _invocation(call: Mapping[str, Any], tool: Message | None) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    arguments = function.get("arguments", "")
    args = _parse(arguments) if arguments else {}
    invocation: dict[str, Any] = {
        "state": "call",
        "toolCallId": call.get("id", ""),
        "toolName": function.get("name", ""),
        "args": args,
    }
    if tool is not None:
        invocation["state"] = "result"
        invocation["result"], failed = _result(tool)
        if failed:
            invocation["isError"] = True
    return {"type": "tool-invocation", "toolInvocation": invocation}


class _Folder:
    """Builds the Mastra messages; one assistant message is open at a time."""

    def __init__(self, thread_id: str, resource_id: str, results: Mapping[str, Message]):
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.results = results
        self.out: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.open_has_assistant_id = False
        self.step_done = False

    def message(self, id_: str, role: str, created_at: str, parts: list[dict[str, Any]]) -> None:
        self.close()
        self.out.append(self._new(id_, role, created_at, parts))

    def _new(
        self, id_: str, role: str, created_at: str, parts: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "id": id_,
            "role": role,
            "createdAt": created_at,
            "threadId": self.thread_id,
            "resourceId": self.resource_id,
            "type": MASTRA_MESSAGE_TYPE,
            "content": {"format": 2, "parts": parts},
        }

    def assistant_parts(self, message: Message, created_at: str) -> list[dict[str, Any]]:
        """The open assistant message's parts, opening one (and a new step) as needed."""
        if self.open is None:
            self.open = self._new(str(message["id"]), "assistant", created_at, [])
            self.open_has_assistant_id = message.get("role") == "assistant"
        elif message.get("role") == "assistant" and not self.open_has_assistant_id:
            self.open["id"] = str(message["id"])
            self.open_has_assistant_id = True
        parts: list[dict[str, Any]] = self.open["content"]["parts"]
        if self.step_done and message.get("role") != "tool":
            parts.append({"type": "step-start"})
            self.step_done = False
        return parts

    def close(self) -> None:
        if self.open is not None:
            self.out.append(self.open)
            self.open = None
            self.step_done = False


def to_mastra(
    messages: Sequence[tuple[Message, str]], *, thread_id: str, resource_id: str
) -> list[dict[str, Any]]:
    """Fold AG-UI messages (each with its ISO ``createdAt``) into Mastra v2 messages."""
    issued: set[str] = set()
    results: dict[str, Message] = {}
    for message, _ in messages:
        if message.get("role") == "tool" and isinstance(message.get("toolCallId"), str):
            results.setdefault(message["toolCallId"], message)
        elif message.get("role") == "assistant" and isinstance(message.get("toolCalls"), list):
            issued.update(str(c.get("id")) for c in message["toolCalls"] if isinstance(c, Mapping))
    folder = _Folder(thread_id, resource_id, results)
    for message, created_at in messages:
        role = message.get("role")
        message_id = str(message.get("id", ""))
        if role == "user":
            folder.message(message_id, "user", created_at, _user_parts(message.get("content")))
        elif role in ("system", "developer"):
            text = _text_of(message.get("content"))
            folder.message(message_id, "system", created_at, [{"type": "text", "text": text}])
        elif role == "reasoning":
            text = _text_of(message.get("content"))
            parts = folder.assistant_parts(message, created_at)
            details = [{"type": "text", "text": text}]
            parts.append({"type": "reasoning", "reasoning": text, "details": details})
        elif role == "assistant":
            parts = folder.assistant_parts(message, created_at)
            text = _text_of(message.get("content"))
            if text:
                parts.append({"type": "text", "text": text})
            calls = message.get("toolCalls")
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, Mapping):
                    parts.append(_invocation(call, results.get(str(call.get("id")))))
                    folder.step_done = True
        elif role == "tool":
            call_id = message.get("toolCallId")
            if str(call_id) in issued or results.get(str(call_id)) is not message:
                continue  # shown on its call's part (or a repeated answer)
            parts = folder.assistant_parts(message, created_at)
            parts.append(_invocation({"id": call_id, "function": {}}, message))
    folder.close()
    for item in folder.out:
        text = "".join(p["text"] for p in item["content"]["parts"] if p["type"] == "text")
        if text:
            item["content"]["content"] = text
    return folder.out
