"""Subagents: catalog agents another agent runs inside its own run (AG-UI 1.0).

An ``[[agents]]`` entry with ``subagents = ["helper", ...]`` gets one ``SubagentTool`` per
subagent, named after its id and described by its description; the model calls it with a
``task`` and gets the subagent's answer as the tool result. A Python agent calls
``await ctx.subagent(agent_id, messages)`` instead. Either way the runtime runs the subagent
within the run (``iobridge.runtime.delegation``): its events stream between
SUBAGENT_STARTED and SUBAGENT_FINISHED (or SUBAGENT_ERROR), each attributed to the
invocation's ``subagentRunId``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iobridge.agents.tools import ServerTool
from iobridge.errors import InputError

if TYPE_CHECKING:
    from iobridge.agents.base import Agent

__all__ = ["SubagentTool", "multi_agent_capabilities", "subagent_tool", "task_messages"]

#: Most characters of the ``task`` a model hands a subagent.
MAX_TASK_CHARS = 32 * 1024


@dataclass(frozen=True, kw_only=True)
class SubagentTool(ServerTool):
    """The tool that runs the catalog agent ``agent_id`` as a subagent of the run."""

    agent_id: str

    async def invoke(self, args: Mapping[str, Any]) -> Any:
        """Never called: the runtime runs subagent tools itself (``AgentSession``)."""
        raise InputError(f"tool {self.name!r} runs a subagent", code="SUBAGENT_TOOL")


def _unused(**_: Any) -> None:
    """The function of a subagent tool (the runtime never calls it)."""


def subagent_tool(agent: Agent) -> SubagentTool:
    """A subagent tool for ``agent``: named after its id, described by its description."""
    description = agent.description or f"Ask the agent {agent.name!r} to do a task."
    return SubagentTool(
        name=agent.id,
        description=description,
        parameters={
            "type": "object",
            "properties": {"task": {
                "type": "string",
                "description": "What the agent should do, with everything it needs to know.",
            }},
            "required": ["task"],
        },
        func=_unused,
        agent_id=agent.id,
    )


def task_messages(args: Mapping[str, Any], new_id: str) -> list[dict[str, Any]]:
    """The subagent's conversation from a model's call: one user message holding ``task``.

    Raises:
        InputError: ``task`` is missing, not a non-empty string, or longer than
            ``MAX_TASK_CHARS`` (``INVALID_TOOL_ARGS``).
    """
    task = args.get("task")
    if not isinstance(task, str) or not task.strip():
        raise InputError("a subagent call needs a non-empty 'task' string",
                         code="INVALID_TOOL_ARGS")
    if len(task) > MAX_TASK_CHARS:
        raise InputError(f"a subagent's task is limited to {MAX_TASK_CHARS} characters",
                         code="INVALID_TOOL_ARGS")
    return [{"id": new_id, "role": "user", "content": task}]


def multi_agent_capabilities(tools: Sequence[ServerTool]) -> dict[str, Any]:
    """``multiAgent`` of an agent whose ``tools`` include subagent tools (none: ``{}``)."""
    subagents = [t for t in tools if isinstance(t, SubagentTool)]
    if not subagents:
        return {}
    return {"multiAgent": {
        "supported": True,
        "delegation": True,
        "subagents": [{"name": t.agent_id, "description": t.description} for t in subagents],
    }}
