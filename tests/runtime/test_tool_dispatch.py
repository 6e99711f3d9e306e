"""Where a tool call runs and what its result says, as the agent, the client and the thread
see it: server tools over client tools of the same name, streamed arguments, unknown and
failing tools, local calls, and calls after the run ended."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.helpers import parse_sse, run_body

from iobridge.agents.context import RunContext, ToolResult
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StateDelta
from iobridge.agents.tools import tool

SEEN: list[dict[str, Any]] = []


@tool
def lookup(order: str = "none") -> dict[str, str]:
    """Look an order up."""
    SEEN.append({"order": order})
    return {"order": order, "status": "shipped"}


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("secret internals")


LOOKUP_ON_CLIENT = {"name": "lookup", "description": "The client's own lookup",
                    "parameters": {"type": "object"}}
CONFIRM = {"name": "confirm", "description": "Ask", "parameters": {"type": "object"}}


async def _run(server: Any, agent: str, **props: Any) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post("/io-bridge/run", json=run_body("x", agentId=agent, **props))
    return parse_sse(response.text)


def _results(events: list[dict[str, Any]]) -> list[Any]:
    return [json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]


async def test_streamed_arguments_reach_the_server_tool(serve: Any) -> None:
    got: list[ToolResult] = []

    async def streams(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for fragments in (['{"order"', ': "A1"}'], []):
            handle = ctx.start_tool_call("lookup")
            for fragment in fragments:
                handle.add_args(fragment)
            handle.end()
            handle.add_args("} late")  # after TOOL_CALL_END: neither sent nor parsed
            got.append(await handle.result())
        yield "done"

    SEEN.clear()
    server = serve(agents=[FunctionAgent(streams, id="streams", tools=[lookup])])
    events = await _run(server, "streams")
    assert SEEN == [{"order": "A1"}, {"order": "none"}]  # no fragments: no arguments
    assert [r.value for r in got] == [{"order": "A1", "status": "shipped"},
                                      {"order": "none", "status": "shipped"}]
    assert _results(events) == [r.value for r in got]


async def test_arguments_that_are_not_an_object_are_no_arguments(serve: Any) -> None:
    async def streams(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("lookup")
        handle.add_args("[1, 2]")
        await handle.result()
        yield "done"

    SEEN.clear()
    server = serve(agents=[FunctionAgent(streams, id="streams", tools=[lookup])])
    events = await _run(server, "streams")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert SEEN == [{"order": "none"}]


async def test_arguments_that_are_not_json_end_the_run_before_the_tool(serve: Any) -> None:
    async def streams(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("lookup")
        handle.add_args("not json")
        await handle.result()
        yield "never shown"

    SEEN.clear()
    server = serve(agents=[FunctionAgent(streams, id="streams", tools=[lookup])])
    events = await _run(server, "streams")
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "INVALID_TOOL_ARGS"
    assert SEEN == []


async def test_a_server_tool_wins_over_a_client_tool_of_the_same_name(serve: Any) -> None:
    async def calls(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        assert not ctx.session.is_frontend_tool("lookup")
        assert ctx.session.is_frontend_tool("confirm")
        assert not ctx.session.is_frontend_tool("undeclared")
        result = await ctx.call_tool("lookup", {"order": "B2"})
        yield f"got {result.content}"

    SEEN.clear()
    server = serve(agents=[FunctionAgent(calls, id="calls", tools=[lookup])])
    events = await _run(server, "calls", tools=[LOOKUP_ON_CLIENT, CONFIRM])
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert SEEN == [{"order": "B2"}]
    assert _results(events) == [{"order": "B2", "status": "shipped"}]


async def test_unknown_and_failing_tools_give_the_agent_an_error_result(
    serve: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    got: list[ToolResult] = []

    async def tries(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        got.append(await ctx.call_tool("nowhere"))
        got.append(await ctx.call_tool("broken"))
        yield "done"

    server = serve(agents=[FunctionAgent(tries, id="tries", tools=[broken])])
    with caplog.at_level(logging.ERROR, logger="iobridge.runtime"):
        events = await _run(server, "tries")
    assert [(r.is_error, json.loads(r.content)) for r in got] == [
        (True, {"error": "unknown tool 'nowhere'"}),
        (True, {"error": "tool 'broken' failed"}),
    ]
    assert _results(events) == [{"error": "unknown tool 'nowhere'"},
                                {"error": "tool 'broken' failed"}]
    assert "secret internals" not in json.dumps(events)
    assert any(r.getMessage() == "server tool broken failed" and r.exc_info
               for r in caplog.records)


async def test_a_local_call_of_a_client_tool_is_never_posted_for(serve: Any) -> None:
    async def local(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("confirm", tool_call_id="local-1", local=True)
        handle.add_args("{}")
        handle.end()
        handle.end()  # idempotent
        handle.add_args("ignored")  # after TOOL_CALL_END: nothing more is sent
        async with httpx.AsyncClient(base_url=ctx_url[0]) as client:
            posted = await client.post("/io-bridge/runs/r1/tool-calls/local-1/result",
                                       json={"content": "from the client"})
        statuses.append(posted.status_code)
        handle.complete(ToolResult(content="answered locally"))
        yield "done"

    statuses: list[int] = []
    ctx_url: list[str] = []
    server = serve(agents=[FunctionAgent(local, id="local")])
    ctx_url.append(server.url)
    events = await _run(server, "local", tools=[CONFIRM])
    assert statuses == [404]
    args = [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert args == ["{}"]
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == [
        "answered locally"]


async def test_tool_calls_after_the_run_ended_stop_the_agent(serve: Any) -> None:
    outcomes: list[str] = []

    async def late(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("lookup")
        yield StateDelta(patch=[{"op": "replace", "path": "/missing", "value": 1}])
        for attempt in (lambda: handle.complete(ToolResult(content="x")),
                        lambda: ctx.start_tool_call("lookup")):
            try:
                attempt()
            except Exception as exc:  # RunEnded is internal: tell it by name
                outcomes.append(type(exc).__name__)
        try:
            await handle.result({})
        except Exception as exc:
            outcomes.append(type(exc).__name__)
        yield "never shown"

    server = serve(agents=[FunctionAgent(late, id="late", tools=[lookup])])
    events = await _run(server, "late")
    assert events[-1]["type"] == "RUN_ERROR"
    assert outcomes == ["RunEnded", "RunEnded", "RunEnded"]
    assert "never shown" not in json.dumps(events)


async def test_a_result_posted_before_the_agent_awaits_it_is_kept(serve: Any) -> None:
    async def ends_first(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("confirm", tool_call_id="early-1")
        handle.add_args("{}")
        handle.end()  # announced: the client may answer from here on
        async with httpx.AsyncClient(base_url=urls[0]) as client:
            posted = await client.post("/io-bridge/runs/r1/tool-calls/early-1/result",
                                       json={"content": "yes"})
        statuses.append(posted.status_code)
        result = await handle.result()
        yield f"answer {result.content}"

    statuses: list[int] = []
    urls: list[str] = []
    server = serve(agents=[FunctionAgent(ends_first, id="early")])
    urls.append(server.url)
    events = await _run(server, "early", tools=[CONFIRM])
    assert statuses == [200]
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["answer yes"]
