"""End to end: the real ``iobridge serve`` process driven by the real ``@ag-ui/client``.

The server runs as a subprocess on a free loopback port; each scenario is one Node process
(``run_agent.mjs``) using ``HttpAgent.runAgent`` and printing what it saw. Frontend tools are
executed in ``onToolCallEndEvent`` and their results POSTed while the stream is open, as the
io.Intelligence frontends do. Skipped when Node or ``tests/e2e/node_modules`` is missing,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui, assert_valid_agui_endpoint
from harness import run_client

from agui_verify import verify_events

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city (runs in the browser).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
STOCK = {
    "name": "get_stock",
    "description": "Latest price of a ticker (runs in the browser).",
    "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}},
}


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def check(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Both views of the run pass the checker and agree; returns the client's events."""
    events: list[dict[str, Any]] = report["events"]
    verify_events(events, thread_id=report["threadId"], run_id=report["runId"])
    verify_events(report["wire"], thread_id=report["threadId"], run_id=report["runId"])
    # And the third-party conformance validator (ag-ui-validate), warnings included.
    assert_valid_agui(report["wire"], max_warnings=0)
    assert kinds(events) == kinds(report["wire"])
    return events


def test_text_run_from_the_demo_agent(server: str) -> None:
    report = run_client(server, "hello there")
    events = check(report)
    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_FINISHED"
    assert kinds(events)[1] == "TEXT_MESSAGE_START" and kinds(events)[-2] == "TEXT_MESSAGE_END"
    assert set(kinds(events)[2:-2]) == {"TEXT_MESSAGE_CONTENT"}
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("You said: hello there.")
    assert [m["role"] for m in report["newMessages"]] == ["assistant"]
    assert report["newMessages"][0]["content"] == text
    assert report["runErrors"] == []


def test_server_tool_runs_on_the_server(server: str) -> None:
    report = run_client(server, "what time is it?")
    events = check(report)
    assert report["posts"] == []
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "current_time"
    call_id = start["toolCallId"]
    sequence = [e["type"] for e in events if e.get("toolCallId") == call_id]
    assert sequence == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "utc" in json.loads(result["content"])
    assert kinds(events)[-1] == "RUN_FINISHED"
    roles = [m["role"] for m in report["newMessages"]]
    assert roles[:2] == ["assistant", "tool"] and roles[-1] == "assistant"


def test_frontend_tool_result_posted_while_the_stream_is_open(server: str) -> None:
    report = run_client(server, 'Please call get_weather {"city": "Paris"}', tools=[WEATHER],
                        frontend_results={"get_weather": {"temperature": 21, "sky": "clear"}})
    events = check(report)
    [post] = report["posts"]
    assert post["toolCallName"] == "get_weather"
    assert post["status"] == 200 and post["body"] == {"status": "accepted"}
    call_id = post["toolCallId"]
    sequence = [e["type"] for e in events if e.get("toolCallId") == call_id]
    assert sequence == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    args = "".join(e["delta"] for e in events
                   if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == call_id)
    assert json.loads(args) == {"city": "Paris"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {"temperature": 21, "sky": "clear",
                                             "args": {"city": "Paris"}}
    # The run continued after the result: more text, then RUN_FINISHED.
    after = kinds(events)[kinds(events).index("TOOL_CALL_RESULT"):]
    assert "TEXT_MESSAGE_CONTENT" in after and after[-1] == "RUN_FINISHED"
    reply = "".join(e["delta"] for e in events[events.index(result):]
                    if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "get_weather" in reply and "21" in reply
    tool_messages = [m for m in report["newMessages"] if m["role"] == "tool"]
    assert [m["toolCallId"] for m in tool_messages] == [call_id]


def test_mixed_turn_server_tool_and_two_parallel_frontend_tools(server: str) -> None:
    report = run_client(
        server, "get_weather city=Oslo and get_stock ticker=ACME, and what time is it",
        tools=[WEATHER, STOCK],
        frontend_results={"get_weather": {"temperature": -3}, "get_stock": {"price": 12.5}},
    )
    events = check(report)
    starts = {e["toolCallName"]: e["toolCallId"] for e in events
              if e["type"] == "TOOL_CALL_START"}
    assert set(starts) == {"get_weather", "get_stock", "current_time"}
    # One assistant message carries the three parallel calls.
    parents = {e.get("parentMessageId") for e in events if e["type"] == "TOOL_CALL_START"}
    assert len(parents) == 1
    assert sorted(p["toolCallName"] for p in report["posts"]) == ["get_stock", "get_weather"]
    assert all(p["status"] == 200 for p in report["posts"])
    results = {e["toolCallId"]: json.loads(e["content"]) for e in events
               if e["type"] == "TOOL_CALL_RESULT"}
    assert set(results) == set(starts.values())
    assert results[starts["get_weather"]] == {"temperature": -3, "args": {"city": "Oslo"}}
    assert results[starts["get_stock"]] == {"price": 12.5, "args": {"ticker": "ACME"}}
    assert "utc" in results[starts["current_time"]]
    # The frontend executed only its own tools, never the server's.
    assert "current_time" not in {p["toolCallName"] for p in report["posts"]}
    assert kinds(events)[-1] == "RUN_FINISHED"
    assert report["runErrors"] == []


@pytest.mark.parametrize("text", ["hello there", "what time is it, and 7 * 6?"])
async def test_live_endpoint_passes_the_third_party_validator(server: str, text: str) -> None:
    """ag-ui-validate POSTs the run itself and checks transport rules too (content type,
    framing, disconnects), at warning level."""
    run_input = {
        "threadId": f"thread-{uuid.uuid4().hex[:12]}", "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [], "context": [], "forwardedProps": {},
    }
    await assert_valid_agui_endpoint(
        f"{server}/io-bridge/run", input=run_input, timeout_ms=15000, max_warnings=0
    )
