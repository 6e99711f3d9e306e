"""The agent catalog: aliases, unavailable agents, the default agent."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from iobridge.agents.catalog import AgentCatalog, UnavailableAgent, build_catalog
from iobridge.agents.function import FunctionAgent
from iobridge.errors import NotFoundError, ServiceUnavailable


def agent(agent_id: str, aliases: tuple[str, ...] = ()) -> FunctionAgent:
    async def reply(ctx: Any) -> str:
        return agent_id

    return FunctionAgent(reply, id=agent_id, aliases=aliases)


def test_aliases_resolve_to_the_canonical_agent() -> None:
    catalog = AgentCatalog([agent("io-agent", ("ioAgent", "io"))])
    assert catalog.get("ioAgent").id == "io-agent"
    assert catalog.get("io").id == "io-agent"
    assert catalog.canonical("ioAgent") == "io-agent"
    assert catalog.describe("io")["id"] == "io-agent"
    with pytest.raises(NotFoundError):
        catalog.get("IOAGENT")


def test_conflicting_aliases_are_refused() -> None:
    catalog = AgentCatalog([agent("a", ("x",)), agent("b")])
    with pytest.raises(ValueError, match="alias 'x' is already taken by agent 'a'"):
        catalog.register(agent("c", ("x",)))
    with pytest.raises(ValueError, match="alias 'b' is already taken"):
        catalog.register(agent("c", ("b",)))
    with pytest.raises(ValueError, match="'x' is already an alias"):
        catalog.register(agent("x"))
    catalog.register(agent("a", ("y",)))  # re-registering replaces the old aliases
    assert catalog.canonical("x") is None and catalog.canonical("y") == "a"


def test_unavailable_agents_are_listed_and_refuse_to_run() -> None:
    catalog = AgentCatalog([agent("demo")])
    catalog.mark_unavailable(UnavailableAgent(id="io-agent", reason="KEY is not set",
                                              model_id="openai:gpt-4o", aliases=("ioAgent",)))
    assert catalog.describe_all()[1] == {
        "id": "io-agent", "name": "io-agent", "description": "", "modelId": "openai:gpt-4o",
        "aliases": ["ioAgent"], "status": "unavailable", "reason": "KEY is not set",
        "tools": [], "capabilities": {},
    }
    with pytest.raises(ServiceUnavailable) as info:
        catalog.get("ioAgent")
    assert (info.value.status, info.value.code) == (503, "AGENT_UNAVAILABLE")
    assert info.value.message == "agent 'io-agent' is unavailable: KEY is not set"
    catalog.default_id = "io-agent"
    with pytest.raises(ServiceUnavailable, match="default agent 'io-agent' is unavailable"):
        catalog.get()
    assert catalog.get("demo").id == "demo"


def test_build_catalog_defaults(caplog: pytest.LogCaptureFixture) -> None:
    missing = {"id": "io-agent", "aliases": ["ioAgent"], "model": "openai:gpt-4o",
               "api_key_env": "IOBRIDGE_TEST_UNSET_KEY"}
    with caplog.at_level(logging.WARNING, logger="iobridge.agents"):
        first_unavailable = build_catalog([missing])
    assert first_unavailable.default_id == "io-agent"
    assert "IOBRIDGE_TEST_UNSET_KEY is not set" in first_unavailable.unavailable["io-agent"]
    assert any("runs that name no agent will fail with 503" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records)
    caplog.clear()
    by_alias = build_catalog([missing], default_agent="ioAgent")
    assert by_alias.default_id == "io-agent"
    assert build_catalog([]).default_id == "demo"
    assert build_catalog([], agents=[agent("mine")]).default_id == "mine"
    with caplog.at_level(logging.WARNING, logger="iobridge.agents"):
        unknown = build_catalog([], default_agent="nope")
    assert "'nope' is not configured" in caplog.text
    with pytest.raises(ServiceUnavailable, match="'nope' is not configured"):
        unknown.get()
    clash = build_catalog([missing], agents=[agent("other", ("ioAgent",))])
    assert clash.canonical("ioAgent") == "other"
    assert clash.describe("io-agent")["status"] == "unavailable"
    assert "aliases" not in clash.describe("io-agent")
