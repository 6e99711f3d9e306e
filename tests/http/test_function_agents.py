"""``FunctionAgent`` in all its forms through ``create_app`` over loopback HTTP: the wire
bytes a client receives and the thread a run leaves behind."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from tests.helpers import parse_sse, run_body, types

from agui_verify import verify_events
from iobridge.agents.context import ToolResult
from iobridge.agents.function import FunctionAgent, function_agent
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool


async def post_run(server: Any, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post("/io-bridge/run", json=body)
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    verify_events(events, thread_id=body["threadId"], run_id=body["runId"])
    return events, response.text


async def stored(server: Any, thread_id: str = "t1") -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.get(f"/io-bridge/threads/{thread_id}/messages?format=agui")
    assert response.status_code == 200, response.text
    return response.json()["messages"]  # type: ignore[no-any-return]


async def test_empty_text_deltas_never_reach_the_wire(serve: Any) -> None:
    """The hot text path (a delta for the open message) drops empty deltas too."""

    async def gappy(ctx: Any) -> AsyncIterator[AgentOutput]:
        for delta in ("a", "", "b", "", "", "c"):
            yield delta

    server = serve(agents=[FunctionAgent(gappy, id="gappy")])
    events, raw = await post_run(server, run_body("x", agentId="gappy"))
    assert types(events) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                             "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                             "RUN_FINISHED"]
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["a", "b", "c"]
    assert '"delta":""' not in raw
    assert [m.get("content") for m in await stored(server)] == ["x", "abc"]


async def test_a_coroutine_returning_text_is_one_assistant_message(serve: Any) -> None:
    async def reply(ctx: Any) -> str:
        return f"echo: {ctx.messages[-1]['content']}"

    server = serve(agents=[FunctionAgent(reply, id="plain")])
    events, _ = await post_run(server, run_body("hi", agentId="plain"))
    assert types(events) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                             "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert events[2]["delta"] == "echo: hi"
    assert "result" not in events[-1]
    assert [(m["role"], m["content"]) for m in await stored(server)] == [
        ("user", "hi"), ("assistant", "echo: hi")]


async def test_a_coroutine_returning_json_sets_run_finished_result(serve: Any) -> None:
    async def compute(ctx: Any) -> dict[str, Any]:
        return {"answer": 42, "items": [1, "two", None]}

    server = serve(agents=[FunctionAgent(compute, id="json")])
    events, _ = await post_run(server, run_body("go", agentId="json"))
    assert types(events) == ["RUN_STARTED", "RUN_FINISHED"]
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                          "result": {"answer": 42, "items": [1, "two", None]}}
    assert [m["role"] for m in await stored(server)] == ["user"]


async def test_a_coroutine_returning_none_finishes_an_empty_run(serve: Any) -> None:
    async def quiet(ctx: Any) -> None:
        return None

    server = serve(agents=[FunctionAgent(quiet, id="quiet")])
    events, _ = await post_run(server, run_body("go", agentId="quiet"))
    assert events == [{"type": "RUN_STARTED", "threadId": "t1", "runId": "r1",
                       "protocolVersion": "1.0"},
                      {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}]


async def test_the_function_agent_decorator_registers_a_described_agent(serve: Any) -> None:
    @tool
    def double(n: int) -> int:
        """Double a number."""
        return n * 2

    @function_agent(id="doubler", name="Doubler", tools=[double])
    async def doubler(ctx: Any) -> AsyncIterator[AgentOutput]:
        """Doubles numbers.

        Not part of the description.
        """
        result = await ctx.call_tool("double", {"n": 21})
        yield f"twice 21 is {result.value}"

    assert isinstance(doubler, FunctionAgent)
    server = serve(agents=[doubler])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        described = (await client.get("/io-bridge/agents/doubler")).json()
    assert described.pop("capabilities")["tools"]["items"] == [double.as_declaration()]
    assert described == {"id": "doubler", "name": "Doubler", "description": "Doubles numbers.",
                         "modelId": "doubler", "status": "available",
                         "tools": [{"name": "double", "description": "Double a number."}]}
    events, _ = await post_run(server, run_body("x", agentId="doubler"))
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "42"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == (
        "twice 21 is 42")


async def test_a_server_tool_with_bad_arguments_is_an_error_result(serve: Any) -> None:
    """The agent gets ``is_error``, the wire carries the error, the thread keeps the flag."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    got: list[ToolResult] = []

    async def sloppy(ctx: Any) -> AsyncIterator[AgentOutput]:
        got.append(await ctx.call_tool("add", {"a": "one"}, tool_call_id="call-1"))
        got.append(await ctx.call_tool("add", {"a": 1, "b": 2}, tool_call_id="call-2"))
        yield "done"

    server = serve(agents=[FunctionAgent(sloppy, id="sloppy", tools=[add])])
    events, _ = await post_run(server, run_body("x", agentId="sloppy"))
    assert [(r.is_error, r.value) for r in got] == [(True, None), (False, 3)]
    results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert set(json.loads(results["call-1"])) == {"error"}
    assert results["call-2"] == "3"
    tools = {m["toolCallId"]: m for m in await stored(server) if m["role"] == "tool"}
    assert tools["call-1"]["error"] == results["call-1"]
    assert "error" not in tools["call-2"]
