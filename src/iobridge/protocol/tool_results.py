"""A frontend tool's result: what an agent sees, and the body of the io protocol's result
route (``POST /runs/{runId}/tool-calls/{toolCallId}/result``, over HTTP or carried opaquely
over N-PAMP)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from iobridge.errors import InputError
from iobridge.protocol.bodies import Body, parse_json_object
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH
from iobridge.protocol.media import content_problems

__all__ = ["ToolResult", "parse_tool_result"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The outcome of one tool call as the agent (and the model) sees it."""

    #: The result as text: JSON for structured values, as carried in TOOL_CALL_RESULT.
    content: str
    is_error: bool = False
    #: The structured value when there is one (server tools, posted ``result``).
    value: Any = None
    #: True when the call was handed to the client and its result arrives in a later run.
    deferred: bool = False
    #: The result as AG-UI content parts (text and media: ``{"content": [...]}`` posted by a
    #: frontend, a tool message's parts, an upstream's): TOOL_CALL_RESULT and the stored tool
    #: message carry them, the model gets them as its native content; ``content`` holds
    #: their text for whoever reads only text.
    parts: list[dict[str, Any]] | None = None


def parse_tool_result(body: Body, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ToolResult:
    """Read ``{"result"|"content"|"output": ..., "isError"?, "error"?}``.

    ``content`` is text, or (AG-UI 1.0) a list of content parts (text, image, audio, video,
    document), checked like a message's (their sizes: ``media.check_result_media``).

    Raises:
        InputError: not a JSON object, none of the result keys, keys of the wrong type, or
            malformed parts.
    """
    data = parse_json_object(body, max_depth)
    is_error = data.get("isError", False)
    if not isinstance(is_error, bool):
        raise InputError("isError must be a boolean")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise InputError("error must be a string")
    if "content" in data:
        content = data["content"]
        if isinstance(content, list):
            problems = content_problems(content, ["content"])
            if problems:
                raise InputError("content must be text or a list of content parts",
                                 details=problems)
            text = "".join(p["text"] for p in content if p.get("type") == "text"
                           and isinstance(p.get("text"), str))
            return ToolResult(content=text, value=content, parts=content,
                              is_error=is_error or error is not None)
        if not isinstance(content, str):
            raise InputError("content must be a string or a list of content parts")
        value: Any = content
    elif "result" in data:
        value = data["result"]
    elif "output" in data:
        value = data["output"]
    elif error is not None:
        value = {"error": error}
    else:
        raise InputError("body must carry one of: result, content, output, error")
    content = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return ToolResult(content=content, value=value, is_error=is_error or error is not None)
