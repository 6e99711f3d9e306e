"""Tool-call ids are unique in a thread whatever the model sends.

Small local models number their calls ``c1`` in every turn. On af03d35 the bridge took the
model's ids as they came: the thread stored ``c1`` twice and the Mastra view paired every
call with the first result. The model here is the project's OpenAI-compatible fake, reached
over HTTP, answering with ``c1`` in both runs of one thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.helpers import parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.history import to_model_messages
from iobridge.agents.model import ModelAgent
from iobridge.agents.providers import build_model
from iobridge.agents.tools import tool

BASE = "/io-bridge"


@tool
def forecast(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}" if city == "Oslo" else f"rain in {city}"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


def model_agent(base_url: str) -> ModelAgent:
    model = build_model("openai:gpt-4o", base_url=base_url, environ={"K": "k"}, api_key_env="K")
    return ModelAgent(id="m", model=model, tools=[forecast],
                      model_settings={"max_retries": 0})


async def test_a_model_that_reuses_c1_gets_one_id_per_call(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(
        calls(("c1", "forecast", '{"city": "Oslo"}')), text("Oslo is sunny."),
        calls(("c1", "forecast", '{"city": "Rome"}')), text("Rome is rainy."),
    )
    server = serve(agents=[model_agent(fake_openai.base_url)])
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        runs = []
        for run_id, question in (("r1", "Oslo?"), ("r2", "Rome?")):
            response = await client.post(
                f"{BASE}/run", json=run_body(question, run_id=run_id, agentId="m"))
            events = parse_sse(response.text)
            verify_events(events)
            assert events[-1]["type"] == "RUN_FINISHED", events[-1]
            runs.append(events)
        agui = (await client.get(f"{BASE}/threads/t1/messages",
                                 params={"format": "agui"})).json()["messages"]
        mastra = (await client.get(f"{BASE}/threads/t1/messages")).json()["messages"]
    call_ids = [c["id"] for m in agui if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    result_ids = [m["toolCallId"] for m in agui if m["role"] == "tool"]
    assert len(call_ids) == 2 and len(set(call_ids)) == 2
    assert result_ids == call_ids
    # The Mastra view pairs each call with its own result.
    invocations = [p["toolInvocation"] for m in mastra for p in m["content"]["parts"]
                   if p["type"] == "tool-invocation"]
    assert [(i["args"]["city"], i["result"]) for i in invocations] == [
        ("Oslo", "sunny in Oslo"), ("Rome", "rain in Rome")]
    # Within a run the provider sees its own id; the second run's history holds the thread's
    # ids, one per call, so the provider never sees one id twice.
    second_run_first_request = fake_openai.requests[2]["messages"]
    sent = [c["id"] for m in second_run_first_request for c in m.get("tool_calls") or []]
    assert sent == call_ids[:1]
    within = fake_openai.requests[3]["messages"]
    assert [m.get("tool_call_id") for m in within if m["role"] == "tool"] == [call_ids[0], "c1"]


def _history(*calls_and_results: tuple[str, str, str]) -> list[dict[str, Any]]:
    """Assistant messages with one call each, then its result: (call id, args, result)."""
    messages: list[dict[str, Any]] = [{"id": "u", "role": "user", "content": "hi"}]
    for number, (call_id, args, result) in enumerate(calls_and_results):
        messages.append({"id": f"a{number}", "role": "assistant", "toolCalls": [
            {"id": call_id, "type": "function",
             "function": {"name": "forecast", "arguments": args}}]})
        messages.append({"id": f"t{number}", "role": "tool", "toolCallId": call_id,
                         "content": result})
    return messages


def test_a_history_that_holds_one_id_twice_reaches_the_provider_with_two() -> None:
    """Threads stored before the bridge minted its ids: each call keeps its own result."""
    history = to_model_messages(_history(("c1", '{"city":"Oslo"}', "sunny"),
                                         ("c1", '{"city":"Rome"}', "rain"),
                                         ("c1-2", '{"city":"Bergen"}', "wet")))
    calls_made = [(p.tool_call_id, p.args) for m in history if isinstance(m, ModelResponse)
                  for p in m.parts if isinstance(p, ToolCallPart)]
    results = [(p.tool_call_id, p.content) for m in history if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart)]
    assert calls_made == [("c1", '{"city":"Oslo"}'), ("c1-3", '{"city":"Rome"}'),
                          ("c1-2", '{"city":"Bergen"}')]
    assert results == [("c1", "sunny"), ("c1-3", "rain"), ("c1-2", "wet")]


def test_an_unanswered_call_with_a_reused_id_is_dropped_not_paired() -> None:
    messages = _history(("c1", "{}", "first"))
    messages.insert(1, {"id": "a-lost", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "forecast", "arguments": "{}"}}]})
    history = to_model_messages(messages)
    pairs = [(p.tool_call_id, type(p).__name__) for m in history for p in m.parts
             if isinstance(p, ToolCallPart | ToolReturnPart)]
    assert pairs == [("c1-2", "ToolCallPart"), ("c1-2", "ToolReturnPart")]
