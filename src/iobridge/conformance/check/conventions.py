"""How the checker makes an arbitrary agent call tools (the spec gives no portable trigger).

A run declares :data:`ECHO_TOOL` and names it in the user message with its arguments as JSON;
iobridge's demo agent calls a frontend tool named that way, and an LLM agent is asked to.
``docs/check.md`` lists what a backend must offer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ECHO_TOOL", "SERVER_TOOL_PROMPT", "echo_prompt", "echo_tool"]

#: The frontend tool the checks declare; its result echoes the token it was given.
ECHO_TOOL = "iobridge_check_echo"
#: The default message asking for a server tool (the demo agent's ``current_time``).
SERVER_TOOL_PROMPT = "What is the current time? Use the current_time tool."


def echo_tool() -> dict[str, Any]:
    """The AG-UI tool declaration of :data:`ECHO_TOOL`."""
    return {
        "name": ECHO_TOOL,
        "description": "Echo the token back (used by iobridge check).",
        "parameters": {
            "type": "object",
            "properties": {"token": {"type": "string"}},
            "required": ["token"],
        },
    }


def echo_prompt(token: str) -> str:
    """The user message that asks for :data:`ECHO_TOOL` with ``token``."""
    return f'Call the tool {ECHO_TOOL} {{"token": "{token}"}} and report its result.'
