"""A wrapped pydantic-ai agent's tools as its model is told them and as the client sees their
calls; its steps; and how an unusable model answer ends the run (FunctionModel, no keys)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_openai import drive, make_context
from pydantic_ai import Agent, CallDeferred, ToolFailed
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.profiles import ModelProfile
from tests.agents.test_pydantic_agent import call, calling, say

from iobridge.agents.outputs import StepFinished, StepStarted
from iobridge.agents.pydantic_agent import PydanticAIAgent
from iobridge.agents.tools import tool
from iobridge.errors import AgentError

ASK = {"type": "object", "properties": {"q": {"type": "string"}}}


@tool
def lookup(sku: str) -> str:
    """Look a product up."""
    return sku


async def test_frontend_tools_are_offered_after_the_server_tools_with_a_usable_schema() -> None:
    model = calling(say("ok"))
    agent = PydanticAIAgent(Agent(model), id="w", tools=[lookup])
    frontend = [
        {"name": "", "description": "nameless"},
        {"description": "no name at all"},
        {"name": "lookup", "description": "shadowed by the server tool"},
        {"name": "pick", "description": 5, "parameters": {"type": "array"}},
        {"name": "ask", "description": "Ask the user", "parameters": ASK},
        {"name": "ask", "description": "a second ask"},
        {"name": "raw", "parameters": "not a schema"},
    ]
    await drive(agent, make_context(agent, frontend_tools=frontend))
    offered = model.seen[0][1].function_tools
    assert [(t.name, t.description, t.parameters_json_schema) for t in offered] == [
        ("lookup", "Look a product up.", lookup.parameters),
        ("pick", None, {"type": "object", "properties": {}}),
        ("ask", "Ask the user", ASK),
        ("raw", None, {"type": "object", "properties": {}}),
    ]


async def test_each_model_request_is_a_numbered_step() -> None:
    model = calling(call("lookup", {"sku": "a"}, "c1"), say("done"))
    agent = PydanticAIAgent(Agent(model), id="w", tools=[lookup])
    session = await drive(agent, make_context(agent))
    steps = [(type(o).__name__, o.name) for o in session.log
             if isinstance(o, StepStarted | StepFinished)]
    assert steps == [("StepStarted", "model-request-1"), ("StepFinished", "model-request-1"),
                     ("StepStarted", "model-request-2"), ("StepFinished", "model-request-2")]


async def test_an_agent_tool_that_defers_its_call_fails_it_for_the_model() -> None:
    model = calling(call("later", {}, "c1"), say("gave up"))
    wrapped = Agent(model)

    @wrapped.tool_plain
    def later() -> str:
        raise CallDeferred()

    agent = PydanticAIAgent(wrapped, id="w")
    session = await drive(agent, make_context(agent))
    assert session.tool_events()[-1] == (
        "TOOL_CALL_RESULT", "generated-1",
        "tool 'later' deferred its call, which this server cannot resume")
    assert session.text() == "gave up"


@pytest.mark.parametrize(("message", "shown"), [("", "tool 'flaky' failed"),
                                                ("disk full", "disk full")])
async def test_an_agent_tool_that_fails_reports_why(message: str, shown: str) -> None:
    model = calling(call("flaky", {}, "c1"), say("sorry"))
    wrapped = Agent(model)

    @wrapped.tool_plain
    def flaky() -> str:
        raise ToolFailed(message)

    agent = PydanticAIAgent(wrapped, id="w")
    session = await drive(agent, make_context(agent))
    assert session.tool_events()[-1] == ("TOOL_CALL_RESULT", "generated-1", shown)


async def test_a_bridge_tool_that_fails_is_a_failed_call_for_the_model() -> None:
    """A frontend tool the session cannot answer comes back as an error: the model is told
    why, and the run goes on."""
    model = calling(call("confirm", {}, "c1"), say("noted"))
    agent = PydanticAIAgent(Agent(model), id="w")
    frontend = [{"name": "confirm", "parameters": {"type": "object"}}]
    session = await drive(agent, make_context(agent, frontend_tools=frontend))
    told = model.seen[1][0][-1].parts[0]
    assert (told.tool_name, told.content) == ("confirm", "unknown tool confirm")
    assert session.text() == "noted"


async def test_a_model_that_answers_nothing_ends_the_run_with_a_model_error() -> None:
    async def nothing(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield ""

    agent = PydanticAIAgent(Agent(FunctionModel(stream_function=nothing)), id="w")
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent))
    assert (info.value.code, info.value.message) == (
        "MODEL_ERROR", "the model returned an unusable response")


# -- discovery -------------------------------------------------------------------------------


def test_discovery_names_fall_back_to_the_wrapped_agent_then_the_id() -> None:
    named = PydanticAIAgent(Agent(TestModel(), name="Named", description="Helps."), id="x")
    assert (named.name, named.description, named.model_id) == ("Named", "Helps.", "test:test")
    bare = PydanticAIAgent(Agent(None), id="y")
    assert (bare.name, bare.description, bare.model_id) == ("y", "", None)
    given = PydanticAIAgent(Agent(TestModel(), name="Named", description="Helps."), id="z",
                            name="Given", description="", model_id="openai:gpt-4o")
    assert (given.name, given.description, given.model_id) == ("Given", "", "openai:gpt-4o")


def test_a_wrapped_agent_refuses_an_unknown_tool_result_mode() -> None:
    with pytest.raises(ValueError, match="tool_result_mode must be one of"):
        PydanticAIAgent(Agent(None), id="x", tool_result_mode="later")  # type: ignore[arg-type]


def test_the_models_profile_decides_tools_reasoning_and_media() -> None:
    profile = ModelProfile(
        supports_tools=False, supports_thinking=True, supports_image_input=False,
        supports_audio_file_input=True, supports_video_input=False,
        supports_document_input=True, supported_document_media_types=["text/plain"],
    )
    declared = PydanticAIAgent(Agent(TestModel(profile=profile)), id="p").own_capabilities()
    assert declared["tools"] == {"supported": False, "items": [], "parallelCalls": False,
                                 "clientProvided": False}
    assert declared["reasoning"] == {"supported": True, "streaming": True}
    assert declared["multimodal"]["input"] == {"image": False, "audio": True, "video": False,
                                               "pdf": False, "file": True}


def test_a_model_that_takes_no_documents_takes_no_pdf_or_file() -> None:
    profile = ModelProfile(supports_document_input=False, thinking_always_enabled=True)
    declared = PydanticAIAgent(Agent(TestModel(profile=profile)), id="p").own_capabilities()
    assert (declared["multimodal"]["input"]["pdf"], declared["multimodal"]["input"]["file"]) == (
        False, False)
    assert declared["reasoning"]["supported"] is True


def test_a_pdf_accepting_document_list_declares_pdf() -> None:
    profile = ModelProfile(supported_document_media_types=["application/pdf"])
    declared = PydanticAIAgent(Agent(TestModel(profile=profile)), id="p").own_capabilities()
    assert declared["multimodal"]["input"]["pdf"] is True
