"""The ``Agent`` interface every agent implements, and its discovery description."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from iobridge.agents.capabilities import (
    bridge_capabilities,
    merge_capabilities,
    validate_capabilities,
)
from iobridge.agents.subagents import multi_agent_capabilities

if TYPE_CHECKING:
    from iobridge.agents.context import RunContext
    from iobridge.agents.outputs import AgentOutput
    from iobridge.agents.tools import ServerTool
    from iobridge.protocol.options import MultitaskStrategy, ToolResultMode


class Agent(ABC):
    """An agent the bridge can run.

    ``run`` is an async generator of outputs (see ``iobridge.agents.outputs``); it calls tools
    through ``ctx.call_tool``. It may raise ``iobridge.errors.AgentError`` to end the run with
    a RUN_ERROR of that code; any other exception ends it with a generic RUN_ERROR.
    """

    #: Stable identifier, selected by ``forwardedProps.agentId``.
    id: str
    name: str
    description: str = ""
    #: Model identifier for discovery (``provider:model``); discovery shows the agent id when
    #: there is none (io.Assist shows ``modelId`` for every agent).
    model_id: str | None = None
    #: Other ids this agent answers to (``forwardedProps.agentId``, routes, thread filters).
    aliases: Sequence[str] = ()
    #: Tools this agent executes on the server.
    tools: Sequence[ServerTool] = ()
    #: How frontend tool results reach this agent; ``None`` leaves it to the request, then
    #: the transport, then the server setting.
    tool_result_mode: ToolResultMode | None = None
    #: The operator's corrections to what the agent declares (``set_capabilities``).
    capability_overrides: Mapping[str, Any] | None = None
    #: ``identity.type`` of the declaration: what kind of agent this is.
    agent_type: str = "iobridge"
    #: Whether a run of this agent may be re-executed from its last durable point in another
    #: process: ``run`` called again with ``ctx.messages`` holding the history plus what the
    #: run produced so far (so a step may run twice). See ``docs/deployment.md``.
    durable: bool = False
    #: What a run of this agent does when its thread is busy; ``None`` leaves it to the
    #: request, then the server setting (``multitask_strategy``).
    multitask_strategy: MultitaskStrategy | None = None
    #: Ids of the catalog agents this one may run as subagents (``subagents = [...]``): the
    #: catalog gives it one tool per subagent (``iobridge.agents.subagents``).
    subagent_ids: Sequence[str] = ()

    def describe(self) -> dict[str, Any]:
        """Discovery data: ``{id, name, description, modelId, aliases?, status, tools,
        capabilities}``."""
        data: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "modelId": self.model_id or self.id,
        }
        if self.aliases:
            data["aliases"] = list(self.aliases)
        data["status"] = "available"
        data["tools"] = [t.describe() for t in self.tools]
        data["capabilities"] = self.capabilities()
        return data

    def capabilities(self) -> dict[str, Any]:
        """What the agent declares (AG-UI ``AgentCapabilities``, camelCase): what it reports
        itself (``own_capabilities``) with the operator's overrides laid over it."""
        declared = merge_capabilities(
            bridge_capabilities(name=self.name, description=self.description,
                                kind=self.agent_type, durable=self.durable),
            self.own_capabilities(),
        )
        declared = merge_capabilities(declared, multi_agent_capabilities(self.tools))
        if self.capability_overrides:
            declared = merge_capabilities(declared, self.capability_overrides)
        return declared

    def own_capabilities(self) -> dict[str, Any]:
        """What this kind of agent knows it does (override in subclasses).

        The default knows only the agent's server tools; everything else is left undeclared,
        which means "unknown" (not "unsupported") to a client.
        """
        if not self.tools:
            return {}
        return {"tools": {"supported": True, "items": [t.as_declaration() for t in self.tools]}}

    def set_capabilities(self, overrides: Mapping[str, Any]) -> None:
        """Override parts of the declaration (``capabilities = {...}`` of an ``[[agents]]``
        table): groups and fields merge over what the agent reports.

        Raises:
            iobridge.agents.capabilities.CapabilityError: ``overrides`` is not a valid
                (partial) AG-UI ``AgentCapabilities`` object.
        """
        self.capability_overrides = validate_capabilities(overrides)

    async def title(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """A short thread title for ``messages`` (``memoryOptions.generateTitle``), or ``None``.

        Called once per untitled thread, after a run finished and before its terminal event
        is released, so keep it short; ``None`` (the default) or an exception makes thread
        memory fall back to the first user message's text.
        """
        return None

    def server_tool(self, name: str) -> ServerTool | None:
        """The server tool called ``name``, if this agent has one."""
        for t in self.tools:
            if t.name == name:
                return t
        return None

    @abstractmethod
    def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        """Produce the run's outputs."""
