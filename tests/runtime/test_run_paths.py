"""Less travelled run paths, over real loopback HTTP: whose frontend-tool mode wins, a runId
run again, agents that end oddly, unanswered calls, and followers that come back."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from tests.helpers import parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StateDelta, StateSnapshot

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


async def _asks_weather(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    result = await ctx.call_tool("get_weather", {"city": "Oslo"})
    yield f"it is {result.content}"


async def _stored(client: httpx.AsyncClient, thread_id: str = "t1") -> list[dict[str, Any]]:
    response = await client.get(f"/io-bridge/threads/{thread_id}/messages?format=agui")
    assert response.status_code == 200, response.text
    return response.json()["messages"]  # type: ignore[no-any-return]


async def _until_idle(server: Any) -> None:
    for _ in range(500):
        if server.runtime.active_runs == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the run never concluded")


async def test_an_agents_own_tool_mode_wins_over_the_servers(serve: Any) -> None:
    deferring = FunctionAgent(_asks_weather, id="deferring")
    deferring.tool_result_mode = "next-run"
    server = serve(agents=[deferring, FunctionAgent(_asks_weather, id="waiting")])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        deferred = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", tools=[WEATHER], agentId="deferring"))).text)
        (call,) = [e for e in deferred if e["type"] == "TOOL_CALL_START"]
        assert deferred[-1]["outcome"] == {"type": "success",
                                           "pendingToolCallIds": [call["toolCallId"]]}
        # The request's own mode wins over the agent's.
        body = run_body("x", run_id="r2", thread_id="t2", tools=[WEATHER], agentId="deferring",
                        toolResultMode="in-run")
        seen: list[dict[str, Any]] = []
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                seen.append(json.loads(line[6:]))
                if seen[-1]["type"] == "TOOL_CALL_END":
                    posted = await client.post(
                        f"/io-bridge/runs/r2/tool-calls/{seen[-1]['toolCallId']}/result",
                        json={"content": "sunny"})
                    assert posted.status_code == 200, posted.text
        assert seen[-1]["type"] == "RUN_FINISHED" and "outcome" not in seen[-1]


async def test_the_servers_tool_mode_applies_to_agents_without_one(serve: Any) -> None:
    server = serve(agents=[FunctionAgent(_asks_weather, id="plain")],
                   tool_result_mode="next-run")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", tools=[WEATHER], agentId="plain"))).text)
    assert events[-1]["outcome"]["pendingToolCallIds"]


async def test_a_finished_runs_id_may_run_again_and_replaces_it(serve: Any) -> None:
    async def echo(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        text = ctx.messages[-1]["content"]
        if text == "one":
            await ctx.call_tool("get_weather", {"city": "Oslo"}, tool_call_id="c1")
        yield f"echo {text}"

    server = serve(agents=[FunctionAgent(echo, id="echo")])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=run_body(
                "one", agentId="echo", tools=[WEATHER])) as response:
            async for line in response.aiter_lines():
                if '"TOOL_CALL_END"' in line:
                    posted = await client.post("/io-bridge/runs/r1/tool-calls/c1/result",
                                               json={"content": "sunny"})
                    assert posted.status_code == 200
        answered = await client.post("/io-bridge/runs/r1/tool-calls/c1/result",
                                     json={"content": "again"})
        again = {**run_body("two", agentId="echo"),
                 "messages": [{"id": "u-second", "role": "user", "content": "two"}]}
        second = parse_sse((await client.post("/io-bridge/run", json=again)).text)
        replay = parse_sse((await client.get("/io-bridge/runs/r1/events")).text)
        # The replaced run's answers went with it: its call is unknown to the new run.
        forgotten = await client.post("/io-bridge/runs/r1/tool-calls/c1/result",
                                      json={"content": "again"})
        stored = await _stored(client)
    assert answered.status_code == 409
    assert second[-1]["type"] == "RUN_FINISHED"
    assert [e.get("delta") for e in replay if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["echo two"]
    assert forgotten.status_code == 404
    assert forgotten.json()["error"]["code"] == "TOOL_CALL_NOT_FOUND"
    assert server.runtime.retained_runs == 1
    assert [m.get("content") for m in stored] == [
        "one", None, "sunny", "echo one", "two", "echo two"]


class Escape(BaseException):
    """Not an ``Exception``: slips past the agent error handling."""


async def test_an_agent_escaping_every_handler_still_ends_its_run(serve: Any) -> None:
    async def escapes(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "so far"
        raise Escape()

    server = serve(agents=[FunctionAgent(escapes, id="escapes")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", agentId="escapes"))).text)
        await _until_idle(server)
        stored = await _stored(client)
    assert events[-1] == {"type": "RUN_ERROR", "code": "AGENT_ERROR",
                          "message": "The run ended without a terminal event."}
    assert [m["role"] for m in stored] == ["user"]  # the cut-short text is not kept


async def test_a_call_left_unanswered_at_the_end_is_stored_as_an_error(serve: Any) -> None:
    async def forgets(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("get_weather")
        handle.add_args('{"city": "Oslo"}')
        handle.end()
        yield "never mind"

    server = serve(agents=[FunctionAgent(forgets, id="forgets")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", tools=[WEATHER], agentId="forgets"))).text)
        stored = await _stored(client)
        late = await client.post(f"/io-bridge/runs/r1/tool-calls/{stored[1]['toolCalls'][0]['id']}"
                                 "/result", json={"content": "sunny"})
    assert events[-1]["type"] == "RUN_FINISHED"
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[2]["error"] == "the run ended before the client answered"
    assert late.status_code == 404  # the run ended: nothing waits for it


async def test_an_agents_cleanup_runs_when_the_run_ends_under_it(serve: Any) -> None:
    cleaned: list[str] = []

    async def bad_delta(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        try:
            yield StateDelta(patch=[{"op": "replace", "path": "/missing", "value": 1}])
            yield "not reached"
        finally:
            cleaned.append("closed")

    server = serve(agents=[FunctionAgent(bad_delta, id="bad")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", agentId="bad"))).text)
    assert events[-1]["type"] == "RUN_ERROR"
    assert cleaned == ["closed"]


async def test_a_follower_back_within_the_grace_period_keeps_the_run(serve: Any) -> None:
    server = serve(detach_grace_seconds=30)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run",
                                 json=run_body("get_weather", tools=[WEATHER])) as response:
            async for line in response.aiter_lines():
                event = json.loads(line[6:]) if line.startswith("data: ") else {}
                if event.get("type") == "TOOL_CALL_END":
                    break
        await asyncio.sleep(0.2)  # the stream is gone; the run waits for its follower
        assert server.runtime.active_runs == 1
        async with client.stream("GET", "/io-bridge/runs/r1/events",
                                 headers={"Last-Event-ID": "1"}) as resumed:
            posted = await client.post(
                f"/io-bridge/runs/r1/tool-calls/{event['toolCallId']}/result",
                json={"content": "sunny"})
            assert posted.status_code == 200
            rest = [json.loads(line[6:]) async for line in resumed.aiter_lines()
                    if line.startswith("data: ")]
    assert rest[-1]["type"] == "RUN_FINISHED"


async def test_without_a_follower_after_the_grace_period_the_run_is_stopped(serve: Any) -> None:
    server = serve(detach_grace_seconds=0.1)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run",
                                 json=run_body("get_weather", tools=[WEATHER])) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and '"TOOL_CALL_END"' in line:
                    break
        await _until_idle(server)
        replay = parse_sse((await client.get("/io-bridge/runs/r1/events")).text)
        stored = await _stored(client)
    assert replay[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                          "outcome": {"type": "cancelled"}}
    assert stored[-1]["error"] == "the client disconnected before answering"


async def test_a_client_that_goes_away_keeps_the_reply_it_was_shown(serve: Any) -> None:
    """An AG-UI frontend's Stop aborts the request: the run ends cancelled and the thread
    keeps what was streamed (a RUN_ERROR would drop it, and a reload would lose it)."""

    async def counts(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for n in range(1, 1000):
            yield f"{n} "
            await asyncio.sleep(0.01)

    server = serve(agents=[FunctionAgent(counts, id="counts")])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=run_body("count")) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and '"delta":"3 "' in line:
                    break
        await _until_idle(server)
        replay = parse_sse((await client.get("/io-bridge/runs/r1/events")).text)
        stored = await _stored(client)
    assert replay[-1]["outcome"] == {"type": "cancelled"}
    shown = "".join(e["delta"] for e in replay if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert stored[-1] == {**stored[-1], "role": "assistant", "content": shown}
    assert shown.startswith("1 2 3 ")


async def test_the_parent_run_id_is_echoed_in_run_started(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json={
            **run_body("hi", run_id="r2"), "parentRunId": "r1"})).text)
    assert events[0] == {"type": "RUN_STARTED", "threadId": "t1", "runId": "r2",
                         "parentRunId": "r1", "protocolVersion": "1.0"}


async def test_an_agent_that_never_awaits_does_not_hold_the_loop_for_its_whole_run(
    serve: Any,
) -> None:
    produced: list[int] = []
    ran_at: list[int] = []

    async def busy(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        # Runs as soon as the run's task lets the event loop go (followers send then).
        asyncio.get_running_loop().call_soon(lambda: ran_at.append(len(produced)))
        for i in range(200):
            produced.append(i)
            yield "x"

    server = serve(agents=[FunctionAgent(busy, id="busy")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=run_body(
            "x", agentId="busy"))).text)
    assert len(events) == 204
    assert ran_at and 0 < ran_at[0] < 200


async def test_a_state_the_store_cannot_hold_is_not_kept_and_the_next_run_has_the_last_good(
    serve: Any, caplog: Any,
) -> None:
    seen: list[Any] = []

    async def stateful(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        seen.append(ctx.state)
        value = "a\u0000b" if ctx.messages[-1]["content"] == "nul" else "fine"
        yield StateSnapshot(snapshot={"v": value})
        yield "ok"

    server = serve(agents=[FunctionAgent(stateful, id="stateful")])
    with caplog.at_level(logging.WARNING, logger="iobridge.runtime"):
        async with httpx.AsyncClient(base_url=server.url) as client:
            for n, text in enumerate(("good", "nul", "next")):
                events = parse_sse((await client.post("/io-bridge/run", json=run_body(
                    text, run_id=f"r{n}", agentId="stateful"))).text)
                assert events[-1]["type"] == "RUN_FINISHED"
    assert seen == [None, {"v": "fine"}, {"v": "fine"}]
    assert [r.getMessage() for r in caplog.records if "U+0000" in r.getMessage()] == [
        "run on thread t1: its state holds U+0000, not stored"]


async def test_an_unknown_run_is_not_found(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        for request in (client.get("/io-bridge/runs/nope/events"),
                        client.post("/io-bridge/runs/nope/cancel", json={})):
            response = await request
            assert response.status_code == 404
            assert response.json() == {"error": {"code": "RUN_NOT_FOUND",
                                                 "message": "unknown run"}}


async def test_a_run_keeps_going_while_another_follower_stays(serve: Any) -> None:
    server = serve()  # no grace: the last follower leaving stops the run
    body = run_body("get_weather", tools=[WEATHER])
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/io-bridge/run", json=body) as first,
    ):
        async for line in first.aiter_lines():
            if '"TOOL_CALL_END"' in line:
                call_id = json.loads(line[6:])["toolCallId"]
                break
        async with client.stream("GET", "/io-bridge/runs/r1/events",
                                 headers={"Last-Event-ID": "1"}) as second:
            await first.aclose()  # one of two followers leaves
            await asyncio.sleep(0.2)
            assert server.runtime.active_runs == 1
            posted = await client.post(f"/io-bridge/runs/r1/tool-calls/{call_id}/result",
                                       json={"content": "sunny"})
            assert posted.status_code == 200
            rest = [json.loads(line[6:]) async for line in second.aiter_lines()
                    if line.startswith("data: ")]
    assert rest[-1]["type"] == "RUN_FINISHED"
