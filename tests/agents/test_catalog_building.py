"""Building the catalog from configuration and Python agents: which agent is the default, how
a failed or clashing definition is listed, subagent links, and the errors a client reads."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.agents.catalog import AgentCatalog, UnavailableAgent, build_catalog
from iobridge.agents.function import FunctionAgent
from iobridge.agents.tools import tool
from iobridge.errors import NotFoundError, ServiceUnavailable

#: A definition that cannot be built: its key variable is never set.
UNSET = {"model": "openai:gpt-4o", "api_key_env": "IOBRIDGE_TEST_UNSET_KEY"}
KEY_REASON = "environment variable IOBRIDGE_TEST_UNSET_KEY is not set (API key for openai)"
#: A definition that builds without a key (a local OpenAI-compatible server).
LOCAL = {"model": "openai:llama", "base_url": "http://127.0.0.1:1/v1"}


def agent(agent_id: str, aliases: tuple[str, ...] = (), **kwargs: Any) -> FunctionAgent:
    async def reply(ctx: Any) -> str:
        return agent_id

    return FunctionAgent(reply, id=agent_id, aliases=aliases, **kwargs)


def test_an_entry_without_an_id_is_never_the_default() -> None:
    catalog = build_catalog([{"model": "openai:x"}, {"id": "second", **LOCAL}])
    assert catalog.default_id == "second"
    assert set(catalog.unavailable) == {"#0"}


def test_the_first_configured_entry_is_the_default_even_after_python_agents() -> None:
    catalog = build_catalog([{"id": "conf", **LOCAL}], agents=[agent("py")])
    assert catalog.default_id == "conf"
    assert [a.id for a in catalog.list()] == ["demo", "conf", "py"]


def test_a_named_default_that_is_an_alias_becomes_its_id() -> None:
    catalog = build_catalog([{"id": "a", **LOCAL}, {"id": "b", "aliases": ["bee"], **LOCAL}],
                            default_agent="bee")
    assert catalog.default_id == "b"
    assert catalog.get().id == "b"


def test_the_first_python_agent_is_the_default_without_configuration() -> None:
    assert build_catalog([], agents=[agent("one"), agent("two")]).default_id == "one"


def test_a_failed_definition_is_described_from_its_table() -> None:
    catalog = build_catalog([{"id": "io-agent", "name": "IO", "description": "Helps.",
                              "aliases": ["ioAgent"], **UNSET}])
    assert catalog.describe("ioAgent") == {
        "id": "io-agent", "name": "IO", "description": "Helps.", "modelId": "openai:gpt-4o",
        "aliases": ["ioAgent"], "status": "unavailable", "reason": KEY_REASON, "tools": [],
        "capabilities": {},
    }


def test_a_failed_definitions_bad_fields_are_left_out_of_its_description() -> None:
    catalog = build_catalog([{"id": "x", "name": 5, "description": ["d"], "model": 3,
                              "aliases": ["ok", ""]}])
    described = catalog.describe("x")
    assert (described["name"], described["description"]) == ("x", "")
    assert "modelId" not in described and "aliases" not in described
    assert catalog.canonical("ok") is None


def test_a_python_agent_with_a_configured_id_keeps_the_configured_one() -> None:
    catalog = build_catalog([{"id": "a", "description": "configured", **LOCAL}],
                            agents=[agent("a", description="python")])
    assert catalog.get("a").description == "python"
    assert catalog.unavailable == {}


def test_a_python_agent_whose_alias_is_taken_is_listed_unavailable() -> None:
    catalog = build_catalog([{"id": "a", **LOCAL}], agents=[agent("p", ("a",))])
    assert catalog.unavailable == {"p": "alias 'a' is already taken by agent 'a'"}
    with pytest.raises(ServiceUnavailable) as info:
        catalog.get("p")
    assert info.value.message == ("agent 'p' is unavailable: alias 'a' is already taken by "
                                  "agent 'a'")


def test_a_failed_definition_whose_alias_is_taken_is_listed_without_it() -> None:
    catalog = build_catalog([{"id": "up", "aliases": ["shared"], **LOCAL},
                             {"id": "down", "aliases": ["shared", "mine"], **UNSET}])
    assert catalog.canonical("shared") == "up"
    assert catalog.canonical("mine") is None
    assert "aliases" not in catalog.describe("down")
    assert catalog.unavailable == {"down": KEY_REASON}


def test_subagents_become_tools_of_the_agent_that_names_them() -> None:
    catalog = build_catalog([
        {"id": "lead", "subagents": ["helper"], **LOCAL},
        {"id": "helper", "aliases": ["h"], **LOCAL},
        {"id": "lead2", "subagents": ["h"], **LOCAL},
    ])
    assert [t.name for t in catalog.get("lead").tools] == ["helper"]
    assert [t.name for t in catalog.get("lead2").tools] == ["helper"]
    assert catalog.unavailable == {}


@pytest.mark.parametrize(
    ("subagent", "reason"),
    [("ghost", "subagent 'ghost' is not an agent of this server"),
     # configured but not built: named as such, not as unknown
     ("broken", "subagent 'broken' is unavailable")],
)
def test_an_agent_whose_subagent_cannot_run_is_unavailable(subagent: str, reason: str) -> None:
    catalog = build_catalog([
        {"id": "lead", "aliases": ["boss"], "subagents": ["helper", subagent], **LOCAL},
        {"id": "helper", **LOCAL},
        {"id": "broken", **UNSET},
    ])
    assert catalog.unavailable["lead"] == reason
    assert catalog.describe("boss")["status"] == "unavailable"
    assert catalog.get("helper").tools == ()


def test_an_agent_with_a_tool_named_like_its_subagent_is_unavailable() -> None:
    @tool(name="helper")
    def helper_tool() -> str:
        """A tool named like the subagent."""
        return ""

    catalog = AgentCatalog([agent("lead", tools=[helper_tool]), agent("helper")])
    catalog.get("lead").subagent_ids = ("helper",)
    assert catalog.link_subagents() == {"lead": "subagent 'helper' has the name of one of "
                                                 "its tools"}
    with pytest.raises(NotFoundError):
        catalog.get("lead")


def test_unregistering_drops_only_that_agents_aliases() -> None:
    catalog = AgentCatalog([agent("a", ("a1",)), agent("b", ("b1",))])
    catalog.unregister("a")
    assert (catalog.canonical("a"), catalog.canonical("a1")) == (None, None)
    assert catalog.canonical("b1") == "b"
    catalog.unregister("a")  # already gone: nothing to do
    assert [a.id for a in catalog.list()] == ["b"]


def test_an_unavailable_entry_cannot_take_a_registered_id() -> None:
    catalog = AgentCatalog([agent("a")])
    with pytest.raises(ValueError, match=r"^agent id 'a' is already registered$"):
        catalog.mark_unavailable(UnavailableAgent(id="a", reason="r"))


def test_unknown_agents_are_named_in_the_error() -> None:
    catalog = AgentCatalog([agent("a")])
    for call in (catalog.get, catalog.describe):
        with pytest.raises(NotFoundError) as info:
            call("zz")
        assert (info.value.message, info.value.code) == ("unknown agent 'zz'",
                                                         "AGENT_NOT_FOUND")


def test_an_empty_catalog_has_no_default_to_run() -> None:
    with pytest.raises(ServiceUnavailable) as info:
        AgentCatalog().get()
    assert (info.value.message, info.value.code) == ("no agent is configured",
                                                     "AGENT_UNAVAILABLE")


def test_the_default_is_the_first_registered_unless_one_is_named() -> None:
    catalog = AgentCatalog([agent("a"), agent("b")])
    assert catalog.default_id == "a"
    catalog.register(agent("c"), default=True)
    assert catalog.get().id == "c"
    assert AgentCatalog([agent("a")], default_id="x").default_id == "x"
