"""The body of a frontend tool result, as the io protocol's result route takes it.

Shared by HTTP (``POST /runs/{runId}/tool-calls/{toolCallId}/result``) and the same route
carried opaquely over N-PAMP.
"""

from __future__ import annotations

import json
from typing import Any

from iobridge.agents.context import ToolResult
from iobridge.errors import InputError
from iobridge.protocol.media import content_problems

__all__ = ["parse_tool_result"]


def parse_tool_result(data: dict[str, Any]) -> ToolResult:
    """Read ``{"result"|"content"|"output": ..., "isError"?, "error"?}``.

    ``content`` is text, or (AG-UI 1.0) a list of content parts (text, image, audio, video,
    document), checked like a message's.

    Raises:
        InputError: none of the result keys, keys of the wrong type, or malformed parts.
    """
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
