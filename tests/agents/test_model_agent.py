"""ModelAgent against a real local OpenAI-compatible server (and FunctionModel for reasoning)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fake_openai import FakeOpenAI, FakeSession, Reply, calls, drive, error, make_context, text
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, FunctionModel

from iobridge.agents.definitions import load_agents
from iobridge.agents.history import to_model_messages
from iobridge.agents.model import ModelAgent
from iobridge.agents.outputs import (
    FinalResult,
    ReasoningDelta,
    ReasoningEnd,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnd,
)
from iobridge.agents.providers import build_model
from iobridge.agents.tools import tool
from iobridge.errors import AgentError, InputError
from iobridge.protocol.options import parse_run_options


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make_agent(base_url: str, **kwargs: Any) -> ModelAgent:
    model = build_model("openai:gpt-4o", base_url=base_url, environ={"K": "sk-secret-key"},
                        api_key_env="K")
    kwargs.setdefault("model_settings", {"max_retries": 0})
    return ModelAgent(id="assistant", model=model, model_id="openai:gpt-4o", **kwargs)


def kinds(log: list[Any]) -> list[str]:
    return [e[0] if isinstance(e, tuple) else type(e).__name__ for e in log]


async def test_streams_text_as_deltas_in_one_step(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text("Hel", "lo", " world"))
    agent = make_agent(fake_openai.base_url)
    session = await drive(agent, make_context(agent))
    assert kinds(session.log) == ["StepStarted", "TextDelta", "TextDelta", "TextDelta", "TextEnd",
                                  "StepFinished"]
    assert session.text() == "Hello world"
    assert session.log[0] == StepStarted(name="model-request-1")
    assert session.log[-1] == StepFinished(name="model-request-1")
    request = fake_openai.requests[0]
    assert request["stream"] is True
    assert request["messages"] == [{"role": "user", "content": "hello"}]
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-secret-key"


async def test_server_tool_loop_over_two_rounds(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(
        calls(("call_1", "add", ('{"a":1,', '"b":2}')), say="Let me add."),
        calls(("call_2", "add", '{"a":3,"b":4}')),
        text("3 and 7"),
    )
    agent = make_agent(fake_openai.base_url, tools=[add])
    session = await drive(agent, make_context(agent))
    # The client sees ids the bridge minted; the model keeps its own (third request below).
    assert session.tool_events() == [
        ("TOOL_CALL_START", "generated-1", "add"),
        ("TOOL_CALL_ARGS", "generated-1", '{"a":1,"b":2}'),
        ("TOOL_CALL_END", "generated-1"),
        ("TOOL_CALL_RESULT", "generated-1", "3"),
        ("TOOL_CALL_START", "generated-2", "add"),
        ("TOOL_CALL_ARGS", "generated-2", '{"a":3,"b":4}'),
        ("TOOL_CALL_END", "generated-2"),
        ("TOOL_CALL_RESULT", "generated-2", "7"),
    ]
    # text of round 1 closes before its tool call; each round is one step
    log = kinds(session.log)
    assert log.index("TextEnd") < log.index("TOOL_CALL_START")
    steps = [StepStarted(name=f"model-request-{i}") for i in (1, 2, 3)]
    assert session.outputs(StepStarted) == steps
    assert session.text() == "Let me add.3 and 7"
    assert len(fake_openai.requests) == 3
    tools = fake_openai.requests[0]["tools"]
    assert [t["function"]["name"] for t in tools] == ["add"]
    assert tools[0]["function"]["parameters"]["required"] == ["a", "b"]
    third = fake_openai.requests[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "tool"]
    assert third[2] == {"role": "tool", "tool_call_id": "call_1", "content": "3"}
    assert third[4]["content"] == "7"


async def test_frontend_tool_is_answered_in_run(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(calls(("call_c", "confirm", '{"question":"Ship it?"}')), text("Shipped."))
    agent = make_agent(fake_openai.base_url)
    seen: list[dict[str, Any]] = []

    async def frontend(args: Any) -> dict[str, bool]:
        seen.append(dict(args))
        return {"ok": True}

    session = FakeSession(frontend={"confirm": frontend}, frontend_delay=0.05)
    declared = {"name": "confirm", "description": "Ask the user",
                "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}}
    ctx = make_context(agent, session=session, frontend_tools=[declared])
    await drive(agent, ctx)
    assert seen == [{"question": "Ship it?"}]
    assert ("TOOL_CALL_RESULT", "generated-1", '{"ok":true}') in session.tool_events()
    sent = fake_openai.requests[0]["tools"][0]["function"]
    assert sent["name"] == "confirm" and sent["description"] == "Ask the user"
    assert sent["parameters"]["properties"] == {"question": {"type": "string"}}
    assert fake_openai.requests[1]["messages"][-1]["content"] == '{"ok":true}'
    assert session.text() == "Shipped."


async def test_parallel_calls_are_announced_before_any_result(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(
        calls(("c1", "add", '{"a":1,"b":1}'), ("c2", "confirm", "{}"),
              ("c3", "add", '{"a":2,"b":2}')),
        text("ok"),
    )
    agent = make_agent(fake_openai.base_url, tools=[add])
    session = FakeSession(frontend={"confirm": "yes"}, frontend_delay=0.1)
    ctx = make_context(agent, session=session, frontend_tools=[{"name": "confirm"}])
    await drive(agent, ctx)
    events = session.tool_events()
    starts = [i for i, e in enumerate(events) if e[0] == "TOOL_CALL_START"]
    results = {e[1]: e[2] for e in events if e[0] == "TOOL_CALL_RESULT"}
    assert len(starts) == 3
    assert max(starts) < min(i for i, e in enumerate(events) if e[0] == "TOOL_CALL_RESULT")
    assert results == {"generated-1": "2", "generated-2": '"yes"', "generated-3": "4"}
    roles = [m["role"] for m in fake_openai.requests[1]["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "tool"]


async def test_deferred_frontend_result_ends_the_run(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(calls(("c1", "confirm", "{}")), text("never requested"))
    agent = make_agent(fake_openai.base_url)
    session = FakeSession(frontend={"confirm": "x"}, defer_frontend=True)
    await drive(agent, make_context(agent, session=session, frontend_tools=[{"name": "confirm"}]))
    assert len(fake_openai.requests) == 1
    assert [e[0] for e in session.tool_events()] == ["TOOL_CALL_START", "TOOL_CALL_ARGS",
                                                     "TOOL_CALL_END"]
    assert kinds(session.log)[-1] == "StepFinished"
    assert not session.outputs(FinalResult)


async def test_failed_tool_goes_back_to_the_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(calls(("c1", "add", '{"a":"x"}')), text("sorry"))
    agent = make_agent(fake_openai.base_url, tools=[add])
    session = await drive(agent, make_context(agent))
    result = [e for e in session.tool_events() if e[0] == "TOOL_CALL_RESULT"]
    assert result == [("TOOL_CALL_RESULT", "generated-1", "invalid arguments for tool 'add'")]
    tool_msg = fake_openai.requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and "invalid arguments for tool 'add'" in tool_msg["content"]
    assert session.text() == "sorry"


async def test_history_and_context_reach_the_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text("fine"))
    history: list[dict[str, Any]] = [
        {"id": "s", "role": "system", "content": "Be brief."},
        {"id": "u1", "role": "user", "content": "add 1 and 2"},
        {"id": "a1", "role": "assistant", "content": "",
         "toolCalls": [{"id": "t1", "type": "function",
                        "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
                       {"id": "orphan", "type": "function",
                        "function": {"name": "add", "arguments": "{}"}}]},
        {"id": "m1", "role": "tool", "toolCallId": "t1", "content": "3"},
        {"id": "m2", "role": "tool", "toolCallId": "unknown", "content": "?"},
        {"id": "a2", "role": "assistant", "content": "It is 3."},
        {"id": "u2", "role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    agent = make_agent(fake_openai.base_url, tools=[add], instructions="You are a calculator.")
    ctx = make_context(agent, history, context=[{"description": "locale", "value": "fr-FR"}])
    await drive(agent, ctx)
    sent = fake_openai.requests[0]["messages"]
    system_text = " ".join(m["content"] for m in sent if m["role"] == "system")
    assert "You are a calculator." in system_text and "locale: fr-FR" in system_text
    assert "Be brief." in system_text
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        "user", "assistant", "tool", "assistant", "user"]
    call = next(m for m in sent if m["role"] == "assistant" and m.get("tool_calls"))
    assert [c["id"] for c in call["tool_calls"]] == ["t1"]  # the unanswered call is dropped
    assert sent[-1]["content"] in ("thanks", [{"type": "text", "text": "thanks"}])


def test_history_conversion_pairs_calls_and_maps_content() -> None:
    messages: list[dict[str, Any]] = [
        {"id": "1", "role": "developer", "content": "dev note"},
        {"id": "2", "role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "url", "value": "https://x.test/a.png",
                                         "mimeType": "image/png"}},
            {"type": "document", "source": {"type": "data", "value": "aGVsbG8=",
                                            "mimeType": "application/pdf"}},
            {"type": "audio", "source": {"type": "file", "value": "handle-1"}},
            {"type": "binary", "mimeType": "image/jpeg", "url": "https://x.test/b.jpg"},
            {"type": "hologram"},
        ]},
        {"id": "3", "role": "assistant", "content": "calling",
         "toolCalls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": '{"x":1}'}}]},
        {"id": "4", "role": "tool", "toolCallId": "c1", "content": "", "error": "boom"},
    ]
    converted: list[ModelMessage] = to_model_messages(messages)
    assert [type(m) for m in converted] == [ModelRequest, ModelResponse, ModelRequest]
    first = converted[0].parts
    assert isinstance(first[0], SystemPromptPart) and first[0].content == "dev note"
    assert isinstance(first[1], UserPromptPart)
    content = list(first[1].content)
    assert content[0] == "look"
    assert isinstance(content[1], ImageUrl) and content[1].url == "https://x.test/a.png"
    assert isinstance(content[2], BinaryContent) and content[2].data == b"hello"
    assert content[3] == "[audio attachment not available to the model]"
    assert isinstance(content[4], ImageUrl)
    assert content[5] == "[unsupported content: hologram]"
    response = converted[1].parts
    assert isinstance(response[0], TextPart) and response[0].content == "calling"
    assert isinstance(response[1], ToolCallPart) and response[1].tool_call_id == "c1"
    ret = converted[2].parts[0]
    assert isinstance(ret, ToolReturnPart)
    assert (ret.tool_name, ret.content, ret.outcome) == ("f", "boom", "failed")


def test_history_conversion_survives_bad_base64() -> None:
    converted = to_model_messages([{"id": "1", "role": "user", "content": [
        {"type": "image", "source": {"type": "data", "value": "***", "mimeType": "image/png"}}]}])
    part = converted[0].parts[0]
    assert isinstance(part, UserPromptPart)
    assert list(part.content) == ["[image attachment not available to the model]"]


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


async def test_structured_output_is_streamed_and_returned(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text('{"name": "Ada",', ' "age": 36}'))
    agent = make_agent(fake_openai.base_url)
    props = {"structuredOutput": {"schema": PERSON, "name": "person", "description": "A person"}}
    session = await drive(agent, make_context(agent, forwarded_props=props))
    assert session.outputs(FinalResult) == [FinalResult(value={"name": "Ada", "age": 36})]
    assert session.text() == '{"name": "Ada", "age": 36}'
    assert kinds(session.log)[-1] == "FinalResult"
    fmt = fake_openai.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "person"
    assert fmt["json_schema"]["schema"]["required"] == ["name", "age"]


async def test_structured_output_retries_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text('{"name": "Ada", "age": "old"}'), text('{"name": "Ada", "age": 36}'))
    agent = make_agent(fake_openai.base_url, output_retries=1)
    props = {"structuredOutput": {"schema": PERSON}}
    session = await drive(agent, make_context(agent, forwarded_props=props))
    assert session.outputs(FinalResult) == [FinalResult(value={"name": "Ada", "age": 36})]
    retry = json.dumps(fake_openai.requests[1]["messages"])
    assert "does not match the required JSON schema" in retry and "age" in retry


async def test_structured_output_invalid_after_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text('{"name": 1}'), text("not json at all"))
    agent = make_agent(fake_openai.base_url, output_retries=1)
    ctx = make_context(agent, forwarded_props={"structuredOutput": {"schema": PERSON}})
    with pytest.raises(AgentError) as info:
        await drive(agent, ctx)
    assert info.value.code == "STRUCTURED_OUTPUT_INVALID"
    assert len(fake_openai.requests) == 2
    assert not ctx.session.outputs(FinalResult)  # type: ignore[attr-defined]


async def test_every_model_setting_reaches_the_provider(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text("ok"))
    agent = make_agent(fake_openai.base_url, model_settings={"temperature": 1.0, "seed": 1})
    settings = {"temperature": 0.3, "maxTokens": 77, "topP": 0.9, "topK": 5, "seed": 42,
                "stopSequences": ["END"], "presencePenalty": 0.5, "frequencyPenalty": -0.5,
                "maxRetries": 0, "someFutureKey": True}
    await drive(agent, make_context(agent, forwarded_props={"modelSettings": settings}))
    body = fake_openai.requests[0]
    assert body["temperature"] == 0.3
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 77
    assert body["top_p"] == 0.9
    assert body["top_k"] == 5  # an OpenAI-compatible server gets it as an extra body field
    assert body["seed"] == 42
    assert body["stop"] == ["END"]
    assert body["presence_penalty"] == 0.5
    assert body["frequency_penalty"] == -0.5
    assert "someFutureKey" not in json.dumps(body)


async def test_max_retries_controls_provider_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(error(429, retry_after_ms=1), error(429, retry_after_ms=1),
                     text("finally"))
    agent = make_agent(fake_openai.base_url)
    props = {"modelSettings": {"maxRetries": 2}}
    session = await drive(agent, make_context(agent, forwarded_props=props))
    assert session.text() == "finally"
    assert len(fake_openai.requests) == 3


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, "MODEL_AUTH"), (403, "MODEL_AUTH"), (429, "MODEL_RATE_LIMIT"),
     (500, "MODEL_UNAVAILABLE"), (503, "MODEL_UNAVAILABLE"), (400, "MODEL_ERROR")],
)
async def test_provider_http_errors_map_to_codes(
    fake_openai: FakeOpenAI, status: int, code: str
) -> None:
    fake_openai.push(*[error(status, retry_after_ms=1)] * 2)
    agent = make_agent(fake_openai.base_url)
    props = {"modelSettings": {"maxRetries": 1}}
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent, forwarded_props=props))
    assert info.value.code == code
    assert f"HTTP {status}" in info.value.message
    assert "sk-secret" not in info.value.message and "127.0.0.1" not in info.value.message
    assert "scripted failure" not in info.value.message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # the SDK retried 429 and 5xx once; auth and bad requests are not retried
    assert len(fake_openai.requests) == (2 if status in (429, 500, 503) else 1)


async def test_connection_refused_is_model_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = make_agent(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent))
    assert info.value.code == "MODEL_UNAVAILABLE"
    assert str(port) not in info.value.message


async def test_timeout_is_model_unavailable(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Reply(text=("late",), delay=1.0))
    agent = make_agent(fake_openai.base_url, model_settings={"max_retries": 0, "timeout": 0.2})
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent))
    assert info.value.code == "MODEL_UNAVAILABLE"
    assert "timed out" in info.value.message


async def test_reasoning_from_the_provider_stream(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Reply(reasoning=("Think", "ing"), text=("Answer",)))
    agent = make_agent(fake_openai.base_url)
    session = await drive(agent, make_context(agent))
    assert kinds(session.log) == ["StepStarted", "ReasoningDelta", "ReasoningDelta", "ReasoningEnd",
                                  "TextDelta", "TextEnd", "StepFinished"]
    assert "".join(e.delta for e in session.outputs(ReasoningDelta)) == "Thinking"


async def test_reasoning_with_function_model() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        yield {0: DeltaThinkingPart(content="step 1")}
        yield {0: DeltaThinkingPart(content=", step 2")}
        yield "Done"

    agent = ModelAgent(id="fn", model=FunctionModel(stream_function=stream))
    session = await drive(agent, make_context(agent))
    reasoning = [e for e in session.log if isinstance(e, ReasoningDelta | ReasoningEnd)]
    assert reasoning == [ReasoningDelta(delta="step 1"), ReasoningDelta(delta=", step 2"),
                         ReasoningEnd()]
    assert session.outputs(TextDelta) == [TextDelta(delta="Done")]
    assert session.outputs(TextEnd) == [TextEnd()]


@pytest.mark.parametrize(
    ("props", "code"),
    [
        ({"modelSettings": {"temperature": "hot"}}, "INVALID_MODEL_SETTINGS"),
        ({"modelSettings": {"maxTokens": 0}}, "INVALID_MODEL_SETTINGS"),
        ({"structuredOutput": {"schema": {"type": "nonsense"}}}, "INVALID_STRUCTURED_OUTPUT"),
        ({"structuredOutput": {"schema": {"type": "array"}}}, "INVALID_STRUCTURED_OUTPUT"),
    ],
)
async def test_bad_run_options(props: dict[str, Any], code: str) -> None:
    # forwardedProps are parsed once, before any agent sees the run: bad options never
    # reach a model (the HTTP route answers 400; see tests/http).
    with pytest.raises(InputError) as info:
        parse_run_options(props)
    assert info.value.code == code and info.value.details


async def test_no_messages_and_no_instructions_is_an_error() -> None:
    agent = make_agent("http://127.0.0.1:9/v1")
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent, []))
    assert info.value.code == "INVALID_REQUEST"


def test_describe_lists_model_and_server_tools() -> None:
    agent = make_agent("http://127.0.0.1:9/v1", tools=[add], description="Adds numbers")
    described = agent.describe()
    assert described.pop("capabilities")["tools"]["items"] == [add.as_declaration()]
    assert described == {
        "id": "assistant", "name": "assistant", "description": "Adds numbers",
        "modelId": "openai:gpt-4o", "status": "available",
        "tools": [{"name": "add", "description": "Add two integers."}],
    }


def test_rejects_unknown_tool_result_mode() -> None:
    with pytest.raises(ValueError, match="tool_result_mode"):
        make_agent("http://127.0.0.1:9/v1", tool_result_mode="sometimes")


async def test_cancelled_run_stops_cleanly(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Reply(text=("slow",), delay=2.0))
    agent = make_agent(fake_openai.base_url)
    task = asyncio.ensure_future(drive(agent, make_context(agent)))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- through the lead's HTTP app on loopback ------------------------------------------------

WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def http_agent(base_url: str) -> ModelAgent:
    agents, errors = load_agents(
        [{"id": "gpt", "model": "openai:gpt-4o", "base_url": base_url,
          "model_settings": {"maxRetries": 0}}],
        environ={},
    )
    assert errors == {}
    agent = agents[0]
    assert isinstance(agent, ModelAgent)
    return agent


def run_input(*, tools: list[Any] | None = None, **props: Any) -> dict[str, Any]:
    return {"threadId": "t-model", "runId": "r-model", "tools": tools or [], "context": [],
            "messages": [{"id": "u1", "role": "user", "content": "weather in Paris?"}],
            "forwardedProps": {"agentId": "gpt", **props}}


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[len("data: "):])


async def test_http_frontend_tool_through_the_result_route(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(calls(("call_w", "get_weather", '{"city":"Paris"}')), text("Sunny in Paris."))
    server = serve(agents=[http_agent(fake_openai.base_url)])
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/io-bridge/run", json=run_input(tools=[WEATHER])) as response,
    ):
        assert response.status_code == 200
        async for event in sse_events(response):
            events.append(event)
            if event["type"] == "TOOL_CALL_END":
                call_id = event["toolCallId"]
                assert call_id != "call_w"  # the bridge's id, not the model's
                posted = await client.post(
                    f"/io-bridge/runs/r-model/tool-calls/{call_id}/result",
                    json={"result": {"tempC": 21, "sky": "clear"}},
                )
                assert posted.status_code == 200
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert types.count("STEP_STARTED") == 2 == types.count("STEP_FINISHED")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == call_id
    assert json.loads(result["content"]) == {"tempC": 21, "sky": "clear"}
    text_out = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text_out == "Sunny in Paris."
    tool_msg = fake_openai.requests[1]["messages"][-1]
    assert tool_msg == {"role": "tool", "tool_call_id": "call_w",
                        "content": '{"tempC":21,"sky":"clear"}'}


async def test_http_structured_output_is_the_run_result(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(text('{"name": "Ada", "age": 36}'))
    server = serve(agents=[http_agent(fake_openai.base_url)])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post(
            "/io-bridge/run", json=run_input(structuredOutput={"schema": PERSON}))
    events = [json.loads(line[6:]) for line in response.text.split("\n")
              if line.startswith("data: ")]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == {"name": "Ada", "age": 36}


async def test_http_bad_model_settings_is_400_before_the_stream(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    server = serve(agents=[http_agent(fake_openai.base_url)])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post(
            "/io-bridge/run", json=run_input(modelSettings={"temperature": "hot", "topP": 7}))
    assert response.status_code == 400
    error_body = response.json()["error"]
    assert error_body["code"] == "INVALID_MODEL_SETTINGS"
    assert {d["field"] for d in error_body["details"]} == {
        "forwardedProps.modelSettings.temperature", "forwardedProps.modelSettings.topP"}
    assert fake_openai.requests == []


async def test_http_provider_failure_is_run_error(fake_openai: FakeOpenAI, serve: Any) -> None:
    fake_openai.push(error(401))
    server = serve(agents=[http_agent(fake_openai.base_url)])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post("/io-bridge/run", json=run_input())
    events = [json.loads(line[6:]) for line in response.text.split("\n")
              if line.startswith("data: ")]
    assert events[-1] == {"type": "RUN_ERROR", "code": "MODEL_AUTH",
                          "message": "the model provider rejected the credentials (HTTP 401)"}
