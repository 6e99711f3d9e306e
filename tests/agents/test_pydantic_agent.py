"""PydanticAIAgent: an existing pydantic-ai Agent run as it is (FunctionModel, no keys)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

import httpx
import pyai_agents
import pytest
from ag_ui.core import RunFinishedEvent
from fake_openai import FakeOpenAI, FakeSession, calls, drive, make_context, text
from pyai_agents import streamed
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo
from tests.helpers import parse_sse, run_body, types

from iobridge.agents.catalog import build_catalog
from iobridge.agents.context import RunContext as BridgeContext
from iobridge.agents.definitions import load_agents
from iobridge.agents.model import ModelAgent
from iobridge.agents.outputs import FinalResult
from iobridge.agents.providers import build_model
from iobridge.agents.pydantic_agent import PydanticAIAgent
from iobridge.agents.tools import tool

CONFIRM = {
    "name": "confirm",
    "description": "Ask the user",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
}


def calling(*steps: ModelResponse) -> Any:
    """A model answering successive requests with ``steps`` (it records what it was sent)."""
    seen: list[tuple[list[ModelMessage], AgentInfo]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((list(messages), info))
        return steps[len(seen) - 1]

    model = streamed(respond)
    model.seen = seen  # type: ignore[attr-defined]
    return model


def call(name: str, args: dict[str, Any], call_id: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])


def say(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


async def test_agent_tool_with_deps_is_announced_and_its_result_reported() -> None:
    agent = PydanticAIAgent(
        pyai_agents.weather_agent, id="weather", deps=pyai_agents.Deps(station="Blindern")
    )
    ctx = make_context(agent)
    session = await drive(agent, ctx)
    assert session.tool_events() == [
        ("TOOL_CALL_START", "generated-1", "lookup"),
        ("TOOL_CALL_ARGS", "generated-1", '{"city":"Oslo"}'),
        ("TOOL_CALL_END", "generated-1"),
        ("TOOL_CALL_RESULT", "generated-1", "Oslo: 21C at Blindern"),
    ]
    assert session.text() == "Done: lookup=Oslo: 21C at Blindern"


async def test_deps_factory_builds_deps_from_the_run() -> None:
    agent = PydanticAIAgent(
        pyai_agents.weather_agent,
        id="weather",
        deps_factory=lambda ctx: pyai_agents.Deps(station=f"station-of-{ctx.resource_id}"),
    )
    ctx = make_context(agent)
    ctx.resource_id = "alice"
    session = await drive(agent, ctx)
    result = ("TOOL_CALL_RESULT", "generated-1", "Oslo: 21C at station-of-alice")
    assert result in session.tool_events()


async def test_frontend_tool_is_added_for_the_run_and_answered_in_run() -> None:
    agent = PydanticAIAgent(
        pyai_agents.weather_agent, id="weather", deps=pyai_agents.Deps(station="S")
    )
    session = FakeSession(frontend={"confirm": {"ok": True}})
    ctx = make_context(agent, session=session, frontend_tools=[CONFIRM])
    await drive(agent, ctx)
    assert [e for e in session.tool_events() if e[1] == "generated-2"] == [
        ("TOOL_CALL_START", "generated-2", "confirm"),
        ("TOOL_CALL_ARGS", "generated-2", '{"question":"Go?"}'),
        ("TOOL_CALL_END", "generated-2"),
        ("TOOL_CALL_RESULT", "generated-2", '{"ok":true}'),
    ]
    assert session.text() == 'Done: lookup=Oslo: 21C at S; confirm={"ok":true}'


async def test_frontend_tool_in_next_run_mode_ends_the_run_cleanly() -> None:
    agent = PydanticAIAgent(
        pyai_agents.weather_agent, id="weather", deps=pyai_agents.Deps(station="S")
    )
    session = FakeSession(frontend={"confirm": "x"}, defer_frontend=True)
    ctx = make_context(agent, session=session, frontend_tools=[CONFIRM])
    await drive(agent, ctx)
    assert session.tool_events()[-1] == ("TOOL_CALL_END", "generated-2")
    assert session.text() == ""
    assert session.outputs(FinalResult) == []


async def test_a_frontend_tool_named_like_an_agent_tool_is_not_offered() -> None:
    model = calling(call("lookup", {"city": "Rome"}, "c1"), say("ok"))
    wrapped = Agent(model, deps_type=str)

    @wrapped.tool
    def lookup(ctx: RunContext[str], city: str) -> str:
        return f"agent's own lookup of {city}"

    agent = PydanticAIAgent(wrapped, id="w", deps="d")
    session = FakeSession(frontend={"lookup": "frontend answer"})
    shadow = {"name": "lookup", "description": "frontend", "parameters": {"type": "object"}}
    await drive(agent, make_context(agent, session=session, frontend_tools=[shadow]))
    assert [t.description for t in model.seen[0][1].function_tools] == [None]  # type: ignore[attr-defined]
    result = ("TOOL_CALL_RESULT", "generated-1", "agent's own lookup of Rome")
    assert result in session.tool_events()


async def test_model_retry_from_an_agent_tool_is_a_failed_result_and_the_model_retries() -> None:
    model = calling(call("pick", {"n": 0}, "c1"), call("pick", {"n": 2}, "c2"), say("fine"))
    wrapped = Agent(model)

    @wrapped.tool_plain
    def pick(n: int) -> int:
        if n < 1:
            raise ModelRetry("n must be positive")
        return n * 10

    agent = PydanticAIAgent(wrapped, id="w")
    session = await drive(agent, make_context(agent))
    results = [e for e in session.tool_events() if e[0] == "TOOL_CALL_RESULT"]
    assert results == [("TOOL_CALL_RESULT", "generated-1", "n must be positive"),
                       ("TOOL_CALL_RESULT", "generated-2", "20")]
    assert session.text() == "fine"


async def test_a_crashing_agent_tool_reports_a_failed_result_then_fails_the_run() -> None:
    model = calling(call("boom", {}, "c1"))
    wrapped = Agent(model)

    @wrapped.tool_plain
    def boom() -> str:
        raise RuntimeError("secret detail")

    agent = PydanticAIAgent(wrapped, id="w")
    ctx = make_context(agent)
    with pytest.raises(RuntimeError):
        await drive(agent, ctx)
    assert ctx.session.tool_events()[-1] == (  # type: ignore[attr-defined]
        "TOOL_CALL_RESULT", "generated-1", "tool 'boom' failed"
    )


def approval_agent(declared: bool) -> tuple[PydanticAIAgent, list[str]]:
    """An agent whose ``delete`` tool needs approval; ``deleted`` records what ran.

    ``declared``: the tool says so (``requires_approval=True``), else it raises
    ``ApprovalRequired`` itself.
    """
    deleted: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return call("delete", {"name": "v1"}, "c1")
        return say(f"delete said: {returns[-1].model_response_str()}")

    wrapped = Agent(streamed(respond))

    @wrapped.tool(requires_approval=declared)
    def delete(ctx: RunContext[None], name: str) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        deleted.append(name)
        return f"deleted {name}"

    return PydanticAIAgent(wrapped, id="w"), deleted


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("approved", [True, False])
async def test_a_tool_that_needs_approval_interrupts_the_run_and_resumes(
    serve: Any, approved: bool, declared: bool
) -> None:
    agent, deleted = approval_agent(declared)
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        first = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("delete v1", agentId="w"))).text)
        outcome = first[-1]["outcome"]
        assert first[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt"
        (interrupt,) = outcome["interrupts"]
        # A declared approval asks before the call is made (the model's id names it);
        # otherwise the call was announced, with the id the bridge minted for it.
        announced = [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START"]
        assert interrupt["reason"] == "tool_approval"
        assert [interrupt["toolCallId"]] == (["c1"] if declared else announced)
        assert interrupt["metadata"] == {"toolName": "delete", "args": {"name": "v1"}}
        assert deleted == []
        answer = {"interruptId": interrupt["id"], "status": "resolved",
                  "payload": {"approved": approved}}
        second = parse_sse((await client.post("/io-bridge/run", json={
            "threadId": "t1", "runId": "r2", "messages": [], "resume": [answer],
            "forwardedProps": {"agentId": "w"}})).text)
    assert second[-1]["type"] == "RUN_FINISHED" and "outcome" not in second[-1]
    results = [e["content"] for e in second if e["type"] == "TOOL_CALL_RESULT"]
    reply = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    if approved:
        assert deleted == ["v1"] and results == ["deleted v1"]
    else:
        assert deleted == [] and results == ["the user did not allow the tool 'delete'"]
    assert reply.startswith("delete said: ") and results[0] in reply


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_agent_output_type_becomes_the_run_result() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        out = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(out.name, {"city": "Oslo", "celsius": 3})])

    agent = PydanticAIAgent(Agent(streamed(respond), output_type=Forecast), id="w")
    session = await drive(agent, make_context(agent))
    assert session.outputs(FinalResult) == [FinalResult(value={"city": "Oslo", "celsius": 3})]
    assert session.tool_events() == []  # the output tool is not a tool call of the run


async def test_forwarded_model_settings_and_structured_output_apply() -> None:
    model = calling(say('{"city": 5}'), say('{"city": "Oslo"}'))
    wrapped = Agent(model, model_settings={"max_tokens": 50, "temperature": 0.9})
    agent = PydanticAIAgent(wrapped, id="w")
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}
    props = {"modelSettings": {"temperature": 0.1},
             "structuredOutput": {"name": "place", "schema": schema}}
    session = await drive(agent, make_context(agent, forwarded_props=props))
    settings = model.seen[0][1].model_settings  # type: ignore[attr-defined]
    assert settings["temperature"] == 0.1 and settings["max_tokens"] == 50
    # The first answer violated the schema: the model was told why and answered again.
    retry = model.seen[1][0][-1]  # type: ignore[attr-defined]
    assert "does not match the required JSON schema" in str(retry)
    assert session.outputs(FinalResult) == [FinalResult(value={"city": "Oslo"})]


def test_only_a_pydantic_ai_agent_can_be_wrapped() -> None:
    with pytest.raises(TypeError, match=r"expected a pydantic_ai\.Agent, got str"):
        PydanticAIAgent("not an agent", id="x")  # type: ignore[arg-type]


def test_describe_lists_the_agents_own_and_the_bridge_tools() -> None:
    @tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    agent = PydanticAIAgent(pyai_agents.weather_agent, id="weather", tools=[ping])
    data = agent.describe()
    assert data["name"] == "weather"
    assert data["modelId"] == "function:_weather_model"
    assert data["tools"] == [{"name": "ping", "description": "Answer pong."},
                             {"name": "lookup", "description": "Current weather in a city."}]


# -- usage -----------------------------------------------------------------------------


def test_add_usage_sums_per_provider_and_model_and_ignores_bad_counts() -> None:
    ctx = BridgeContext(thread_id="t", run_id="r", messages=[], session=FakeSession())
    ctx.add_usage("openai", "m1", {"inputTokens": 3, "outputTokens": 5})
    ctx.add_usage("openai", "m1", {"inputTokens": 4, "outputTokens": -1, "bogus": 9})
    ctx.add_usage("openai", "m2", {"inputTokens": 2**53, "totalTokens": True})  # type: ignore[dict-item]
    ctx.add_usage("openai", "m2", {"inputTokens": 10})
    assert ctx.usage == [
        {"provider": "openai", "model": "m1", "inputTokens": 7, "outputTokens": 5},
        {"provider": "openai", "model": "m2", "inputTokens": 2**53 - 1},
    ]


async def test_usage_is_summed_over_the_runs_model_requests(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(calls(("c1", "add", '{"a": 1, "b": 2}')), text("3"))

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model = build_model("openai:gpt-4o", base_url=fake_openai.base_url, environ={})
    agent = ModelAgent(id="m", model=model, tools=[add], model_settings={"max_retries": 0})
    ctx = make_context(agent)
    await drive(agent, ctx)
    # The fake server reports 3 input and 5 output tokens per request.
    assert ctx.usage == [{"provider": "openai", "model": "fake-model", "inputTokens": 6,
                          "outputTokens": 10, "totalTokens": 16}]


async def test_usage_is_on_run_finished_and_kept_with_the_run(
    serve: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(text("hi"))
    model = build_model("openai:gpt-4o", base_url=fake_openai.base_url, environ={})
    server = serve(agents=[ModelAgent(id="m", model=model, model_settings={"max_retries": 0})])
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("hello", agentId="m"))
    finished = parse_sse(response.text)[-1]
    usage = [{"provider": "openai", "model": "fake-model", "inputTokens": 3, "outputTokens": 5,
              "totalTokens": 8}]
    assert finished["type"] == "RUN_FINISHED" and finished["usage"] == usage
    # The AG-UI 1.0 SDK reads the field as its TokenUsage.
    event = RunFinishedEvent.model_validate(finished)
    assert event.usage is not None
    assert (event.usage[0].input_tokens, event.usage[0].total_tokens) == (3, 8)
    assert server.run("r1").usage == usage


async def test_usage_of_a_failed_run_is_on_run_error(serve: Any, fake_openai: FakeOpenAI) -> None:
    fake_openai.push(calls(("c1", "boom", "{}")))

    @tool
    def boom() -> str:
        """Fail."""
        raise RuntimeError("no")

    model = build_model("openai:gpt-4o", base_url=fake_openai.base_url, environ={})
    # The second request has no scripted reply: the provider answers 500.
    agent = ModelAgent(id="m", model=model, tools=[boom], model_settings={"max_retries": 0})
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("go", agentId="m"))
    last = parse_sse(response.text)[-1]
    assert last["type"] == "RUN_ERROR"
    assert last["usage"] == [{"provider": "openai", "model": "fake-model", "inputTokens": 3,
                              "outputTokens": 5, "totalTokens": 8}]


# -- through POST /run: server tool + deps + frontend tool, stored and replayed -----------


async def test_pydantic_ai_agent_round_trip_through_post_run(serve: Any) -> None:
    pyai_agents.SEEN.clear()
    agent = PydanticAIAgent(
        pyai_agents.weather_agent, id="weather", deps=pyai_agents.Deps(station="Blindern")
    )
    server = serve(agents=[agent])
    seen: list[dict[str, Any]] = []
    confirm = None
    body = run_body("weather?", agentId="weather", tools=[CONFIRM])
    async with httpx.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                seen.append(event)
                if event["type"] == "TOOL_CALL_START" and event["toolCallName"] == "confirm":
                    confirm = event["toolCallId"]
                if event["type"] == "TOOL_CALL_END" and event["toolCallId"] == confirm:
                    posted = await client.post(
                        f"/io-bridge/runs/r1/tool-calls/{confirm}/result", json={"result": "yes"}
                    )
                    assert posted.status_code == 200
        messages = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
        # The next run's model sees the stored calls and results.
        second = await client.post(
            "/io-bridge/run", json=run_body("again", run_id="r2", agentId="weather")
        )
    assert types(seen) == [
        "RUN_STARTED", "STEP_STARTED",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "STEP_FINISHED", "STEP_STARTED",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "STEP_FINISHED", "STEP_STARTED",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STEP_FINISHED", "RUN_FINISHED",
    ]
    # The model said c1 and c2; the client and the thread see the ids the bridge minted.
    lookup = next(e["toolCallId"] for e in seen if e.get("toolCallName") == "lookup")
    results = {e["toolCallId"]: e["content"] for e in seen if e["type"] == "TOOL_CALL_RESULT"}
    assert results == {lookup: "Oslo: 21C at Blindern", confirm: "yes"}
    assert not {"c1", "c2"} & set(results)
    reply = "".join(e["delta"] for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert reply == 'Done: lookup=Oslo: 21C at Blindern; confirm=yes'
    stored = messages["messages"]
    tool_messages = {m["toolCallId"]: m["content"] for m in stored if m["role"] == "tool"}
    assert tool_messages == results
    calls_made = [tc["function"]["name"] for m in stored if m["role"] == "assistant"
                  for tc in m.get("toolCalls") or []]
    assert calls_made == ["lookup", "confirm"]
    assert second.status_code == 200
    history = pyai_agents.SEEN[-1]
    replayed = {p.tool_call_id: p.model_response_str() for m in history for p in m.parts
                if isinstance(p, ToolReturnPart)}
    assert replayed == results
    second_reply = "".join(
        e["delta"] for e in parse_sse(second.text) if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert second_reply == 'Done: lookup=Oslo: 21C at Blindern; confirm=yes'


# -- TOML: pydantic_ai = "package.module:attr" ------------------------------------------


def test_toml_pydantic_ai_entry_wraps_the_imported_agent() -> None:
    agents, errors = load_agents([{"id": "weather", "pydantic_ai": "pyai_agents:weather_agent",
                                   "description": "Weather", "tool_result_mode": "next-run"}])
    assert errors == {}
    (agent,) = agents
    assert isinstance(agent, PydanticAIAgent)
    assert agent.agent is pyai_agents.weather_agent
    assert agent.description == "Weather" and agent.tool_result_mode == "next-run"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"pydantic_ai": "no_such_module_xyz:agent"},
         f"pydantic_ai 'no_such_module_xyz:agent': no module named 'no_such_module_xyz' in "
         f"the working directory {os.getcwd()} or the installed packages (start iobridge from "
         "the folder that holds no_such_module_xyz/ or no_such_module_xyz.py, or install it)"),
        ({"pydantic_ai": "pyai_agents:missing"},
         "pydantic_ai 'pyai_agents:missing': 'pyai_agents' has no attribute 'missing'"),
        ({"pydantic_ai": "pyai_agents:not_an_agent"},
         "pydantic_ai 'pyai_agents:not_an_agent' is a str, not a pydantic_ai.Agent"),
        ({"pydantic_ai": "pyai_agents"},
         "pydantic_ai 'pyai_agents' must look like 'package.module:agent'"),
        ({"pydantic_ai": "pyai_agents:weather_agent", "model": "openai:gpt-4o"},
         "'model' cannot be used with 'pydantic_ai': set it on the pydantic-ai Agent"),
        ({"pydantic_ai": "pyai_agents:weather_agent", "instructions": "x"},
         "'instructions' cannot be used with 'pydantic_ai': set it on the pydantic-ai Agent"),
        ({}, "'model' is required"),
    ],
)
def test_toml_pydantic_ai_errors_are_one_line_and_nothing_is_registered(
    entry: dict[str, Any], reason: str
) -> None:
    catalog = build_catalog([{"id": "bad", **entry}])
    assert catalog.unavailable == {"bad": reason}
    assert "\n" not in reason
    assert [a.id for a in catalog.list()] == ["demo"]


async def test_an_agent_tool_shadowing_a_frontend_tool_is_never_a_pending_call(
    serve: Any,
) -> None:
    model = calling(call("lookup", {"city": "Rome"}, "c1"), say("ok"))
    wrapped = Agent(model)
    posted = threading.Event()
    waited: list[bool] = []

    @wrapped.tool_plain
    async def lookup(city: str) -> str:
        # Runs until the test, which saw TOOL_CALL_END while the tool ran, tried to answer.
        waited.append(await asyncio.to_thread(posted.wait, 10))
        return f"agent's {city}"

    server = serve(agents=[PydanticAIAgent(wrapped, id="w")])
    shadow = {"name": "lookup", "description": "frontend", "parameters": {"type": "object"}}
    events: list[dict[str, Any]] = []
    body = run_body("go", agentId="w", tools=[shadow])
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "TOOL_CALL_END":
                    # The call runs on the server: the client cannot answer it.
                    answer = await client.post(
                        "/io-bridge/runs/r1/tool-calls/c1/result", json={"result": "x"}
                    )
                    posted.set()
                    assert answer.status_code == 404
    assert waited == [True]
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["agent's Rome"]
    assert events[-1]["type"] == "RUN_FINISHED"
