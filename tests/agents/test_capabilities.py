"""What each agent kind declares (AG-UI 1.0 ``AgentCapabilities``), and the TOML overrides.

Every declaration is validated with the real ``ag_ui.core`` models, and checked for keys the
models do not define at any depth (the spec closes every capability object; pydantic's
``extra="allow"`` in the SDK would keep a typo silently).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest
from ag_ui.core import AgentCapabilities
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile

from iobridge.agents.base import Agent
from iobridge.agents.capabilities import (
    CapabilityError,
    accepted_media,
    merge_capabilities,
    validate_capabilities,
)
from iobridge.agents.catalog import build_catalog
from iobridge.agents.definitions import load_agents
from iobridge.agents.demo import DemoAgent
from iobridge.agents.function import FunctionAgent
from iobridge.agents.model import ModelAgent
from iobridge.agents.providers import build_model
from iobridge.agents.pydantic_agent import PydanticAIAgent
from iobridge.agents.tools import tool
from iobridge.agents.upstream import AgUiUpstreamAgent


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return order_id


def no_extras(model: pydantic.BaseModel, path: str = "") -> list[str]:
    """Keys a validated capabilities model kept as extras, at any depth (open objects aside)."""
    found = [f"{path}{k}" for k in (model.model_extra or {})]
    for name, value in model:
        if name in ("custom", "metadata"):
            continue
        if isinstance(value, pydantic.BaseModel) and name != "items":
            found += no_extras(value, f"{path}{name}.")
    return found


def assert_valid(declared: dict[str, Any]) -> AgentCapabilities:
    model = AgentCapabilities.model_validate(declared, strict=True)
    assert no_extras(model) == []
    # Omitted, never null: what the model dumps is exactly what was declared.
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == declared
    return model


async def _nothing(messages: Any, info: AgentInfo) -> AsyncIterator[str]:
    yield "ok"


def openai_agent(name: str = "gpt-4o", **kwargs: Any) -> ModelAgent:
    model = build_model(f"openai:{name}", base_url="http://127.0.0.1:9/v1",
                        environ={"K": "sk-x"}, api_key_env="K")
    return ModelAgent(id="chat", model=model, model_id=f"openai:{name}", **kwargs)


def pydantic_agent() -> PydanticAIAgent:
    wrapped = PydanticAgent(FunctionModel(stream_function=_nothing), name="ops")

    @wrapped.tool_plain(requires_approval=True)
    def delete(name: str) -> str:
        """Delete a file."""
        return name

    return PydanticAIAgent(wrapped, id="ops", tools=[lookup])


async def _echo(ctx: Any) -> AsyncIterator[str]:
    yield "echo"


KINDS: dict[str, Any] = {
    "demo": DemoAgent,
    "model": lambda: openai_agent(tools=[lookup], description="Chats"),
    "pydantic-ai": pydantic_agent,
    "upstream": lambda: AgUiUpstreamAgent("http://127.0.0.1:9/agui", id="up"),
    "function": lambda: FunctionAgent(_echo, id="fn", tools=[lookup]),
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_agent_kind_declares_valid_capabilities(kind: str) -> None:
    agent: Agent = KINDS[kind]()
    declared = agent.describe()["capabilities"]
    parsed = assert_valid(declared)
    assert parsed.identity is not None and parsed.identity.name == agent.name
    assert parsed.identity.type == agent.agent_type
    assert parsed.transport is not None and parsed.transport.streaming is True
    assert parsed.state is not None and parsed.state.persistent_state is True
    # Durable: model and pydantic-ai agents, upstreams; function agents when they opt in.
    assert declared["custom"] == {"durableExecution": agent.durable}
    assert agent.durable is (kind not in ("function", "demo"))


def test_a_model_agent_declares_its_tools_and_the_media_its_model_takes() -> None:
    declared = openai_agent(tools=[lookup], description="Chats").capabilities()
    assert declared["identity"] == {"name": "chat", "type": "pydantic-ai",
                                    "description": "Chats"}
    assert declared["tools"] == {
        "supported": True, "items": [lookup.as_declaration()], "parallelCalls": True,
        "clientProvided": True,
    }
    # OpenAI chat completions take images and documents, never video (pydantic-ai's adapter
    # says so in the model profile), and audio only on the audio models.
    assert declared["multimodal"]["input"] == {
        "image": True, "audio": False, "video": False, "pdf": True, "file": True,
    }
    assert accepted_media(openai_agent("gpt-4o-audio-preview").capabilities())["audio"] is True
    assert declared["humanInTheLoop"] == {"supported": False, "interrupts": False,
                                          "approvals": False}
    assert declared["output"] == {"structuredOutput": True}


def test_the_model_profile_decides_the_media() -> None:
    text_only = FunctionModel(
        stream_function=_nothing,
        profile=ModelProfile(supports_image_input=False, supports_document_input=False,
                             supports_audio_file_input=False, supports_video_input=False,
                             supports_thinking=True),
    )
    agent = ModelAgent(id="t", model=text_only)
    declared = agent.capabilities()
    assert accepted_media(declared) == dict.fromkeys(("image", "audio", "video", "pdf", "file"),
                                                     False)
    assert declared["reasoning"] == {"supported": True, "streaming": True}
    anthropic_like = FunctionModel(
        stream_function=_nothing,
        profile=ModelProfile(supported_document_media_types=frozenset({"text/plain"})),
    )
    assert accepted_media(ModelAgent(id="a", model=anthropic_like).capabilities())["pdf"] is False


def test_a_pydantic_ai_agent_declares_its_own_tools_and_its_approvals() -> None:
    declared = pydantic_agent().capabilities()
    names = [item["name"] for item in declared["tools"]["items"]]
    assert names == ["lookup", "delete"]
    assert declared["tools"]["items"][1]["parameters"]["properties"] == {
        "name": {"type": "string"}
    }
    assert declared["humanInTheLoop"] == {"supported": True, "interrupts": True,
                                          "approvals": True}


def test_what_the_bridge_cannot_know_stays_undeclared() -> None:
    upstream = AgUiUpstreamAgent("http://127.0.0.1:9/agui", id="up").capabilities()
    assert "multimodal" not in upstream and "reasoning" not in upstream
    assert upstream["humanInTheLoop"] == {"interrupts": True}
    function = FunctionAgent(_echo, id="fn").capabilities()
    assert {"tools", "multimodal", "humanInTheLoop"}.isdisjoint(function)
    assert accepted_media(function) == {}


def test_the_demo_agent_takes_no_media() -> None:
    declared = DemoAgent().capabilities()
    assert accepted_media(declared) == dict.fromkeys(("image", "audio", "video", "pdf", "file"),
                                                     False)
    assert declared["humanInTheLoop"]["interrupts"] is True


def test_overrides_merge_over_what_the_agent_declares() -> None:
    agent = FunctionAgent(_echo, id="fn", capabilities={
        "multimodal": {"input": {"image": True}},
        "identity": {"version": "2.1.0", "metadata": {"team": "ops"}},
        "custom": {"durableExecution": False, "region": "eu"},
    })
    declared = agent.capabilities()
    assert_valid(declared)
    assert declared["identity"] == {"name": "fn", "type": "function", "version": "2.1.0",
                                    "metadata": {"team": "ops"}}
    assert accepted_media(declared) == {"image": True}
    assert declared["custom"] == {"durableExecution": False, "region": "eu"}
    # A list replaces, it does not append.
    assert merge_capabilities({"tools": {"items": [1]}}, {"tools": {"items": [2]}}) == {
        "tools": {"items": [2]}
    }


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"tols": {}}, "tols"),
        ({"tools": {"itmes": []}}, "tools.itmes"),
        ({"multimodal": {"input": {"pdff": True}}}, "multimodal.input.pdff"),
        ({"tools": {"supported": "yes"}}, "tools.supported"),
        ({"tools": {"supported": 1}}, "tools.supported"),
        ({"execution": {"maxIterations": -1}}, "execution.maxIterations"),
        ({"multiAgent": {"subagents": [{"description": "no name"}]}}, "multiAgent.subagents"),
        ({"custom": "x"}, "custom"),
    ],
)
def test_invalid_overrides_are_refused_naming_the_field(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(CapabilityError, match=named.replace(".", r"\.")):
        FunctionAgent(_echo, id="fn", capabilities=overrides)
    with pytest.raises(CapabilityError):
        validate_capabilities(overrides)


def test_toml_capabilities_override_and_a_bad_table_makes_the_agent_unavailable() -> None:
    agents, errors = load_agents([
        {"id": "chat", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1",
         "capabilities": {"multimodal": {"input": {"image": False}},
                          "multiAgent": {"supported": False}}},
        {"id": "up", "agui_url": "http://127.0.0.1:9/agui",
         "capabilities": {"multimodal": {"input": {"image": True, "pdf": False}}}},
        {"id": "typo", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1",
         "capabilities": {"tools": {"itmes": []}}},
        {"id": "scalar", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1",
         "capabilities": "all"},
    ])
    chat, up = agents
    assert accepted_media(chat.capabilities()) == {
        "image": False, "audio": False, "video": False, "pdf": True, "file": True,
    }
    assert chat.capabilities()["tools"]["supported"] is True  # the rest is still its own
    assert chat.capabilities()["multiAgent"] == {"supported": False}
    assert accepted_media(up.capabilities()) == {"image": True, "pdf": False}
    assert "tools.itmes" in errors["typo"]
    assert "'capabilities' must be a table" in errors["scalar"]
    catalog = build_catalog([{"id": "typo", "model": "openai:gpt-4o",
                              "base_url": "http://127.0.0.1:9/v1",
                              "capabilities": {"tools": {"itmes": []}}}])
    unavailable = catalog.describe("typo")
    assert unavailable["status"] == "unavailable" and unavailable["capabilities"] == {}
    assert_valid(unavailable["capabilities"])


GROUPS = ("identity, transport, tools, output, state, multiAgent, reasoning, multimodal, "
          "execution, humanInTheLoop, custom")


def test_the_demo_agent_declares_exactly_what_it_does() -> None:
    """The whole declaration a client reads at ``GET /agents/demo``: the bridge-wide facts
    (streamed, resumable, state kept, not durable) and the demo's own."""
    agent = DemoAgent()
    assert agent.capabilities() == {
        "identity": {"name": "Demo agent", "type": "demo", "description": agent.description},
        "transport": {"streaming": True, "resumable": True},
        "state": {"persistentState": True},
        "custom": {"durableExecution": False},
        "tools": {"supported": True, "items": [t.as_declaration() for t in agent.tools],
                  "parallelCalls": True, "clientProvided": True},
        "output": {"structuredOutput": False},
        "reasoning": {"supported": False},
        "multimodal": {"input": dict.fromkeys(("image", "audio", "video", "pdf", "file"), False),
                       "output": {"image": False, "audio": False}},
        "humanInTheLoop": {"supported": True, "interrupts": True, "approvals": True},
    }
    assert [t["name"] for t in agent.capabilities()["tools"]["items"]] == [
        "current_time", "calculate"]
    assert agent.capabilities()["tools"]["items"][1] == {
        "name": "calculate", "description": calculate_description(),
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}


def calculate_description() -> str:
    from iobridge.agents.demo import calculate

    return calculate.description


def test_an_agent_with_server_tools_and_nothing_else_declares_only_them() -> None:
    async def echo(ctx: Any) -> AsyncIterator[str]:
        yield "x"

    plain = FunctionAgent(echo, id="plain", tools=[lookup])
    own = plain.own_capabilities()
    assert own == {"tools": {"supported": True, "items": [lookup.as_declaration()]}}
    assert FunctionAgent(echo, id="bare").own_capabilities() == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], "agents.x.capabilities must be a table of AG-UI capability groups"),
        ({"zzz": 1, "tools": {"itmes": []}},
         f"agents.x.capabilities: unknown or malformed key(s) tools.itmes, zzz "
         f"(AG-UI AgentCapabilities groups: {GROUPS})"),
        ({"custom": 3, "identity": {"nmae": "x"}},
         f"agents.x.capabilities: unknown or malformed key(s) custom, identity.nmae "
         f"(AG-UI AgentCapabilities groups: {GROUPS})"),
        ({"tools": {"supported": "yes"}, "reasoning": {"supported": 1}},
         "agents.x.capabilities: tools.supported: Input should be a valid boolean; "
         "reasoning.supported: Input should be a valid boolean"),
    ],
)
def test_a_refused_declaration_names_every_offending_field(data: Any, message: str) -> None:
    with pytest.raises(CapabilityError) as refused:
        validate_capabilities(data, where="agents.x.capabilities")
    assert str(refused.value) == message
    with pytest.raises(CapabilityError, match=r"^capabilities"):
        validate_capabilities(data)


def test_a_valid_declaration_comes_back_as_written_with_open_objects_kept() -> None:
    declared = {"identity": {"name": "x", "metadata": {"free": {"form": 1}}},
                "custom": {"anything": [1, None]},
                "tools": {"supported": True, "items": [{"name": "f", "description": "d",
                                                         "parameters": {"type": "object"}}]}}
    assert validate_capabilities(declared) == declared


def test_accepted_media_reads_only_the_modalities_it_knows() -> None:
    declared = {"multimodal": {"input": {"image": True, "audio": "yes", "hologram": True,
                                         "pdf": False}}}
    assert accepted_media(declared) == {"image": True, "pdf": False}
    assert accepted_media({"multimodal": {"input": [1]}}) == {}
    assert accepted_media({"multimodal": 3}) == {}
