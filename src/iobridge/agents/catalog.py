"""The set of agents a server offers, the names they answer to, and the default.

Frontends name agents in their own ways (io.Assist's Angular template matches ``id`` against
``"io-agent"`` and lists threads by the Mastra registry key ``"ioAgent"``), so an agent may
have ``aliases``: every route that takes an agent id resolves them, and threads store the
canonical id. A configured agent that cannot be built stays listed, ``"status":
"unavailable"`` with a reason naming what is missing; running it (or a default agent that is
unknown or unavailable) answers 503 ``AGENT_UNAVAILABLE``, never silently another agent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from iobridge.agents.base import Agent
from iobridge.agents.definitions import load_agents
from iobridge.agents.demo import DemoAgent
from iobridge.agents.subagents import subagent_tool
from iobridge.errors import NotFoundError, ServiceUnavailable

__all__ = ["AgentCatalog", "UnavailableAgent", "build_catalog"]

logger = logging.getLogger("iobridge.agents")


@dataclass(frozen=True, kw_only=True, slots=True)
class UnavailableAgent:
    """A configured agent that could not be built; ``reason`` is safe to show."""

    id: str
    reason: str
    name: str = ""
    description: str = ""
    model_id: str | None = None
    aliases: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """Discovery data, like ``Agent.describe`` plus ``status`` and ``reason``."""
        data: dict[str, Any] = {
            "id": self.id,
            "name": self.name or self.id,
            "description": self.description,
        }
        if self.model_id:
            data["modelId"] = self.model_id
        if self.aliases:
            data["aliases"] = list(self.aliases)
        data.update(status="unavailable", reason=self.reason, tools=[], capabilities={})
        return data


class AgentCatalog:
    """Agents by id and alias; the first registered agent is the default unless one is named."""

    def __init__(self, agents: Iterable[Agent] = (), *, default_id: str | None = None) -> None:
        self._agents: dict[str, Agent] = {}
        self._unavailable: dict[str, UnavailableAgent] = {}
        #: alias -> canonical id
        self._aliases: dict[str, str] = {}
        self.default_id = default_id
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent, *, default: bool = False) -> None:
        """Add ``agent`` (replacing one with the same id).

        Raises:
            ValueError: one of its aliases is another agent's id or alias.
        """
        self._claim(agent.id, agent.aliases)
        self._unavailable.pop(agent.id, None)
        self._agents[agent.id] = agent
        if default or self.default_id is None:
            self.default_id = agent.id

    def unregister(self, agent_id: str) -> None:
        """Remove the available agent ``agent_id`` and its aliases (it turned out unusable)."""
        self._agents.pop(agent_id, None)
        for alias, owner in list(self._aliases.items()):
            if owner == agent_id:
                del self._aliases[alias]

    def link_subagents(self) -> dict[str, str]:
        """Give each agent one tool per id of its ``subagent_ids`` (an agent of this catalog).

        Returns ``{id: reason}`` of the agents that cannot have their subagents (an unknown
        or unavailable one, a tool of the same name); they are removed, for the caller to
        list as unavailable.
        """
        problems: dict[str, str] = {}
        for agent in list(self._agents.values()):
            tools = []
            for subagent_id in agent.subagent_ids:
                key = self.canonical(subagent_id)
                if key is None or key not in self._agents:
                    state = "unavailable" if key is not None else "not an agent of this server"
                    problems[agent.id] = f"subagent {subagent_id!r} is {state}"
                    break
                if agent.server_tool(key) is not None:
                    problems[agent.id] = f"subagent {key!r} has the name of one of its tools"
                    break
                tools.append(subagent_tool(self._agents[key]))
            else:
                agent.tools = (*agent.tools, *tools)
        for agent_id in problems:
            self.unregister(agent_id)
        return problems

    def mark_unavailable(self, entry: UnavailableAgent) -> None:
        """List a configured agent that could not be built.

        Raises:
            ValueError: its id or an alias is already taken by another agent.
        """
        if entry.id in self._agents:
            raise ValueError(f"agent id {entry.id!r} is already registered")
        self._claim(entry.id, entry.aliases)
        self._unavailable[entry.id] = entry

    def _claim(self, agent_id: str, aliases: Sequence[str]) -> None:
        if agent_id in self._aliases:
            raise ValueError(f"agent id {agent_id!r} is already an alias")
        for alias in aliases:
            owner = self._aliases.get(alias, alias if alias in self._known() else None)
            if owner is not None and owner != agent_id:
                raise ValueError(f"alias {alias!r} is already taken by agent {owner!r}")
        for alias, owner in list(self._aliases.items()):
            if owner == agent_id:
                del self._aliases[alias]
        for alias in aliases:
            if alias != agent_id:
                self._aliases[alias] = agent_id

    def _known(self) -> set[str]:
        return set(self._agents) | set(self._unavailable)

    def canonical(self, agent_id: str) -> str | None:
        """The canonical id behind an id or alias (available or not), or ``None``."""
        if agent_id in self._agents or agent_id in self._unavailable:
            return agent_id
        return self._aliases.get(agent_id)

    def get(self, agent_id: str | None = None) -> Agent:
        """The agent called ``agent_id`` (an id or alias; the default when ``None``).

        Raises:
            NotFoundError: no such agent (``AGENT_NOT_FOUND``).
            ServiceUnavailable: it, or the default, cannot run (``AGENT_UNAVAILABLE``).
        """
        if agent_id is None:
            problem = self.default_problem()
            if problem is not None:
                raise ServiceUnavailable(problem, code="AGENT_UNAVAILABLE")
            agent_id = self.default_id
        key = self.canonical(agent_id) if agent_id is not None else None
        if key is None:
            raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
        if key in self._unavailable:
            reason = self._unavailable[key].reason
            raise ServiceUnavailable(f"agent {key!r} is unavailable: {reason}",
                                     code="AGENT_UNAVAILABLE")
        return self._agents[key]

    def describe(self, agent_id: str) -> dict[str, Any]:
        """Discovery data of one agent (an id or alias), available or not.

        Raises:
            NotFoundError: no such agent.
        """
        key = self.canonical(agent_id)
        if key is None:
            raise NotFoundError(f"unknown agent {agent_id!r}", code="AGENT_NOT_FOUND")
        if key in self._unavailable:
            return self._unavailable[key].describe()
        return self._agents[key].describe()

    def describe_all(self) -> list[dict[str, Any]]:
        """Every agent, available ones first in registration order, then unavailable ones."""
        return [a.describe() for a in self._agents.values()] + [
            u.describe() for u in self._unavailable.values()
        ]

    def default_problem(self) -> str | None:
        """Why runs that name no agent cannot run, or ``None`` when the default is usable."""
        if self.default_id is None:
            return "no agent is configured"
        if self.default_id in self._unavailable:
            reason = self._unavailable[self.default_id].reason
            return f"the default agent {self.default_id!r} is unavailable: {reason}"
        if self.canonical(self.default_id) is None:
            return f"the default agent {self.default_id!r} is not configured (default_agent)"
        return None

    def list(self) -> list[Agent]:
        """All available agents, in registration order."""
        return list(self._agents.values())

    @property
    def unavailable(self) -> dict[str, str]:
        """Configured agents that could not be built: ``{id: reason}``."""
        return {key: entry.reason for key, entry in self._unavailable.items()}


def _unavailable_entry(key: str, reason: str, raw: Any) -> UnavailableAgent:
    """Describe a failed definition from what its table says (types checked, nothing run)."""
    raw = raw if isinstance(raw, Mapping) else {}

    def text(name: str) -> str:
        value = raw.get(name)
        return value if isinstance(value, str) else ""

    aliases = raw.get("aliases")
    valid = isinstance(aliases, list) and all(isinstance(a, str) and a for a in aliases)
    return UnavailableAgent(
        id=key,
        reason=reason,
        name=text("name"),
        description=text("description"),
        model_id=text("model") or None,
        aliases=tuple(aliases) if valid else (),
    )


def _list_unavailable(
    catalog: AgentCatalog, errors: Mapping[str, str], by_id: Mapping[Any, Any]
) -> None:
    """List each failed agent as unavailable (without its aliases when another agent holds
    one); one whose id another agent holds is only logged."""
    for key, reason in errors.items():
        if catalog.canonical(key) is not None:
            logger.error("agent %s is not listed as unavailable: the id is taken", key)
            continue
        entry = _unavailable_entry(key, reason, by_id.get(key))
        try:
            catalog.mark_unavailable(entry)
        except ValueError as exc:
            logger.error("agent %s: %s; its aliases are ignored", key, exc)
            catalog.mark_unavailable(replace(entry, aliases=()))


def build_catalog(
    definitions: Sequence[Mapping[str, Any] | Any],
    *,
    default_agent: str | None = None,
    agents: Sequence[Agent] = (),
) -> AgentCatalog:
    """The demo agent, the configured agents, then ``agents`` given in Python.

    The default is ``default_agent`` (an id or alias), else the first configured entry
    (even an unavailable one: the operator meant it), else the first Python agent, else the
    demo agent. A definition that cannot be built is logged and listed as unavailable; a
    default that is unknown or unavailable is logged as a warning at build time.
    """
    catalog = AgentCatalog([DemoAgent()])
    configured, errors = load_agents(definitions)
    by_id = {d.get("id"): d for d in definitions if isinstance(d, Mapping)}
    first: str | None = None
    for index, entry in enumerate(definitions):
        raw_id = entry.get("id") if isinstance(entry, Mapping) else getattr(entry, "id", None)
        key = raw_id if isinstance(raw_id, str) and raw_id else f"#{index}"
        if first is None and (key in errors or any(a.id == key for a in configured)):
            first = key if not key.startswith("#") else None
    for agent in [*configured, *agents]:
        try:
            catalog.register(agent)
        except ValueError as exc:
            logger.error("agent %s is unavailable: %s", agent.id, exc)
            errors[agent.id] = str(exc)
    # The failed agents are listed first, so a subagent link to one says it is unavailable.
    _list_unavailable(catalog, errors, by_id)
    problems = catalog.link_subagents()
    for key, reason in problems.items():
        logger.error("agent %s is unavailable: %s", key, reason)
    _list_unavailable(catalog, problems, by_id)
    if default_agent is not None:
        catalog.default_id = catalog.canonical(default_agent) or default_agent
    elif first is not None:
        catalog.default_id = first
    elif agents:
        catalog.default_id = agents[0].id
    else:
        catalog.default_id = DemoAgent.id
    problem = catalog.default_problem()
    if problem is not None:
        logger.warning("runs that name no agent will fail with 503: %s", problem)
    return catalog
