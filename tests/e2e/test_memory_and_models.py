"""End to end with the real ``@ag-ui/client``: thread memory across runs, and a model agent
configured in ``iobridge.toml`` talking to an OpenAI-compatible server (a local fake: no paid
API is reachable here, so it is faked at the HTTP boundary, not inside iobridge).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import run_client, run_conversation, running_server
from tests.agents.fake_openai import FakeOpenAI, calls, text

from agui_verify import verify_events

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city (runs in the browser).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


def test_two_runs_on_one_thread_sending_only_the_new_message(server: str) -> None:
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    first = run_client(server, 'get_weather {"city": "Rome"}', tools=[WEATHER],
                       frontend_results={"get_weather": {"sky": "clear"}}, thread_id=thread_id)
    verify_events(first["events"], thread_id=thread_id, run_id=first["runId"])
    second = run_client(server, "and what is 5 * 5", thread_id=thread_id)
    verify_events(second["events"], thread_id=thread_id, run_id=second["runId"])

    stored = httpx.get(
        f"{server}/io-bridge/threads/{thread_id}/messages?format=agui", timeout=10
    ).json()
    messages = stored["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant",
                     "user", "assistant", "tool", "assistant"]
    assert len({m["id"] for m in messages}) == len(messages)
    calls_made = [c for m in messages if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    assert [c["function"]["name"] for c in calls_made] == ["get_weather", "calculate"]
    results = [m for m in messages if m["role"] == "tool"]
    assert [r["toolCallId"] for r in results] == [c["id"] for c in calls_made]
    assert json.loads(results[0]["content"])["sky"] == "clear"
    # The client's own view of each run matches what the thread stored for it.
    assert [m["id"] for m in first["newMessages"]] == [m["id"] for m in messages[1:4]]
    assert messages[-1]["content"] == "5 * 5 = 25."


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def test_model_agent_from_toml_with_a_frontend_tool(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    (tmp_path / "iobridge.toml").write_text(
        "[[agents]]\n"
        'id = "local"\n'
        'name = "Local model"\n'
        'description = "An OpenAI-compatible server"\n'
        'model = "openai:fake-model"\n'
        f'base_url = "{fake_llm.base_url}"\n'
        'api_key_env = "FAKE_LLM_KEY"\n'
        'instructions = "Be brief."\n'
        'tools = ["iobridge.agents.demo:calculate"]\n'
    )
    fake_llm.push(
        calls(("call_w", "get_weather", '{"city": "Oslo"}')),
        text("It is ", "snowing ", "in Oslo."),
    )
    env = {"FAKE_LLM_KEY": "sk-test-not-a-secret"}
    with running_server(tmp_path, env=env, args=("--config", str(tmp_path / "iobridge.toml"))) \
            as url:
        agents = httpx.get(f"{url}/io-bridge/agents", timeout=10).json()["agents"]
        local = next(a for a in agents if a["id"] == "local")
        assert local["modelId"] == "openai:fake-model"
        assert local["tools"][0]["name"] == "calculate"
        report = run_client(url, "weather in Oslo?", tools=[WEATHER], agent_id="local",
                            frontend_results={"get_weather": {"sky": "snow"}})
    events: list[dict[str, Any]] = report["events"]
    verify_events(events, thread_id=report["threadId"], run_id=report["runId"])
    [post] = report["posts"]
    # The client posts to the id the bridge minted for the model's call_w.
    [call_id] = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
    assert post["toolCallId"] == call_id and post["status"] == 200
    reply = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert reply == "It is snowing in Oslo."
    assert [e["type"] for e in events].count("STEP_STARTED") == 2
    # The model's second request carried the frontend result, paired with its call.
    second = fake_llm.requests[1]["messages"]
    tool_message = next(m for m in second if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_w"
    assert json.loads(tool_message["content"])["sky"] == "snow"
    assert fake_llm.headers[0]["authorization"] == "Bearer sk-test-not-a-secret"


def test_whole_history_client_model_agent_sees_each_message_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The stock client resends its whole history each run: stored once, seen once."""
    (tmp_path / "iobridge.toml").write_text(
        "[[agents]]\n"
        'id = "local"\n'
        'model = "openai:fake-model"\n'
        f'base_url = "{fake_llm.base_url}"\n'
        'api_key_env = "FAKE_LLM_KEY"\n'
        'instructions = "Be brief."\n'
        'tools = ["iobridge.agents.demo:calculate"]\n'
    )
    fake_llm.push(
        text("Hello ", "there."),
        calls(("call_c", "calculate", '{"expression": "2 + 2"}')),
        text("It is 4."),
        text("Bye."),
    )
    env = {"FAKE_LLM_KEY": "sk-test-not-a-secret"}
    with running_server(tmp_path, env=env, args=("--config", str(tmp_path / "iobridge.toml"))) \
            as url:
        report = run_conversation(url, ["hi", "what is 2 + 2?", "thanks"], agent_id="local")
        thread = report["threadId"]
        stored = httpx.get(
            f"{url}/io-bridge/threads/{thread}/messages?format=agui", timeout=10
        ).json()
    for turn in report["turns"]:
        verify_events(turn["events"], thread_id=thread, run_id=turn["runId"])
    messages = stored["messages"]
    # The client really sent its whole history: the last run carried every earlier message.
    last = report["turns"][-1]
    assert last["sent"] == [m["id"] for m in messages[: len(last["sent"])]]
    assert len(last["sent"]) == 7
    # Stored once each, in order, and the same as the client's own view of the thread.
    assert [m["id"] for m in messages] == [m["id"] for m in report["messages"]]
    assert len({m["id"] for m in messages}) == len(messages)
    assert [(m["role"], m.get("content")) for m in messages] == [
        ("user", "hi"), ("assistant", "Hello there."),
        ("user", "what is 2 + 2?"), ("assistant", None),
        ("tool", '{"expression":"2 + 2","value":4}'), ("assistant", "It is 4."),
        ("user", "thanks"), ("assistant", "Bye."),
    ]
    # Each model request saw the conversation once: no message twice, nothing missing.
    assert len(fake_llm.requests) == 4
    final = [m for m in fake_llm.requests[-1]["messages"] if m["role"] != "system"]
    assert [(m["role"], m.get("content")) for m in final] == [
        ("user", "hi"), ("assistant", "Hello there."),
        ("user", "what is 2 + 2?"), ("assistant", None),
        ("tool", '{"expression":"2 + 2","value":4}'), ("assistant", "It is 4."),
        ("user", "thanks"),
    ]
    for request in fake_llm.requests:
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        assert len(users) == len(set(users)), users
