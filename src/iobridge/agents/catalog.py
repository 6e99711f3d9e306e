"""The set of agents a server offers, and which one runs when none is named."""

from __future__ import annotations

from collections.abc import Iterable

from iobridge.agents.base import Agent
from iobridge.errors import NotFoundError


class AgentCatalog:
    """Agents by id; the first registered agent is the default unless one is named."""

    def __init__(self, agents: Iterable[Agent] = (), *, default_id: str | None = None) -> None:
        self._agents: dict[str, Agent] = {}
        self.default_id = default_id
        #: Agents from configuration that could not be built (id -> reason), for discovery.
        self.unavailable: dict[str, str] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent, *, default: bool = False) -> None:
        """Add ``agent`` (replacing one with the same id)."""
        self._agents[agent.id] = agent
        if default or self.default_id is None:
            self.default_id = agent.id

    def get(self, agent_id: str | None = None) -> Agent:
        """The agent called ``agent_id`` (the default when ``None``).

        Raises:
            NotFoundError: no such agent.
        """
        key = agent_id if agent_id is not None else self.default_id
        agent = self._agents.get(key) if key is not None else None
        if agent is None:
            raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
        return agent

    def list(self) -> list[Agent]:
        """All agents, in registration order."""
        return list(self._agents.values())
