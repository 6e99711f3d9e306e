"""The body of a frontend tool result, as the io protocol's result route takes it.

Shared by HTTP (``POST /runs/{runId}/tool-calls/{toolCallId}/result``) and the same route
carried opaquely over N-PAMP.
"""

from __future__ import annotations

import json
from typing import Any

from iobridge.agents.context import ToolResult
from iobridge.errors import InputError

__all__ = ["parse_tool_result"]


def parse_tool_result(data: dict[str, Any]) -> ToolResult:
    """Read ``{"result"|"content"|"output": ..., "isError"?, "error"?}``.

    Raises:
        InputError: none of the result keys, or keys of the wrong type.
    """
    is_error = data.get("isError", False)
    if not isinstance(is_error, bool):
        raise InputError("isError must be a boolean")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise InputError("error must be a string")
    if "content" in data:
        if not isinstance(data["content"], str):
            raise InputError("content must be a string")
        value: Any = data["content"]
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
