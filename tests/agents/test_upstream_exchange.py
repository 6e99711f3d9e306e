"""The HTTP exchange with an AG-UI upstream, over real HTTP: which answers are an event
stream, what the run input carries, and how a cancelled or interrupted upstream run ends the
client's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tests.agents.test_upstream import RUN_FINISHED, call_events, kinds, run, text, text_events
from tests.agents.upstream_apps import Script, frames, scripted_upstream
from tests.helpers import LiveServer, run_body

from iobridge.agents.upstream import AgUiUpstreamAgent

OK = frames(*text_events("m", "ok"), RUN_FINISHED)


def agent(url: str, **kwargs: Any) -> AgUiUpstreamAgent:
    return AgUiUpstreamAgent(url, id="up", **kwargs)


async def events_for(serve: Any, script: Script, body: dict[str, Any] | None = None,
                     **kwargs: Any) -> list[dict[str, Any]]:
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url, **kwargs)])
        return await run(server, body or run_body("go", agentId="up"))


@pytest.mark.parametrize(
    "script",
    [Script(chunks=OK, status=201), Script(chunks=OK, status=299),
     Script(chunks=OK, content_type="Text/Event-Stream; charset=utf-8"),
     Script(chunks=OK, headers={"Content-Encoding": " Identity "})],
    ids=["201", "299", "content-type-case", "identity-encoding"],
)
async def test_an_event_stream_answer_is_read(serve: Any, script: Script) -> None:
    assert text(await events_for(serve, script)) == "ok"


async def test_a_300_answer_is_an_http_error(serve: Any) -> None:
    events = await events_for(serve, Script(chunks=OK, status=300))
    assert events[-1] == {"type": "RUN_ERROR", "code": "UPSTREAM_HTTP_ERROR",
                          "message": "The upstream agent answered HTTP 300."}


async def test_an_answer_without_a_content_type_is_not_an_event_stream(serve: Any) -> None:
    async def bare(request: Request) -> Response:
        return Response(b"".join(OK), headers={"content-type": ""})

    with LiveServer(Starlette(routes=[Route("/agui", bare, methods=["POST"])])) as up:  # type: ignore[arg-type]
        server = serve(agents=[agent(f"{up.url}/agui")])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1]["message"] == "The upstream agent did not answer with an event stream."


async def test_the_run_input_carries_the_clients_run(serve: Any) -> None:
    body = {**run_body("go", agentId="up", color="blue"),
            "context": [{"description": "tz", "value": "UTC"}]}
    with scripted_upstream(Script(chunks=OK)) as upstream:
        server = serve(agents=[agent(upstream.url, headers={"X-Tenant": "acme"})])
        await run(server, body)
    [sent] = upstream.bodies
    assert sent["state"] == {} and "parentRunId" not in sent
    assert sent["context"] == [{"description": "tz", "value": "UTC"}]
    assert sent["forwardedProps"]["color"] == "blue"
    headers = upstream.headers[0]
    assert (headers["x-tenant"], headers["content-type"], headers["accept-encoding"]) == (
        "acme", "application/json", "identity")


async def test_an_event_nested_deeper_than_the_run_allows_is_a_protocol_error(
    serve: Any,
) -> None:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    events = await events_for(serve, Script(chunks=frames(
        {"type": "CUSTOM", "name": "deep", "value": deep}, RUN_FINISHED)))
    assert events[-1] == {"type": "RUN_ERROR", "code": "UPSTREAM_PROTOCOL_ERROR",
                          "message": "The upstream agent sent a malformed event."}


async def test_a_cancelled_upstream_run_keeps_its_result(serve: Any) -> None:
    events = await events_for(serve, Script(chunks=frames(
        {**RUN_FINISHED, "outcome": {"type": "cancelled"}, "result": {"partial": True}})))
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                          "outcome": {"type": "cancelled"}, "result": {"partial": True}}


async def test_the_last_result_of_the_upstream_rounds_is_the_runs(serve: Any) -> None:
    weather = {"name": "get_weather", "description": "", "parameters": {"type": "object"}}

    def script(body: dict[str, Any]) -> list[bytes]:
        if body["messages"][-1]["role"] == "tool":
            return frames(*text_events("m2", "done"), RUN_FINISHED)
        return frames(*call_events("c1", "get_weather", "{}"),
                      {**RUN_FINISHED, "result": {"round": 1}})

    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", tools=[weather], agentId="up"),
                           results={"get_weather": {}})
    assert events[-1]["result"] == {"round": 1}
    assert kinds(events).count("TOOL_CALL_START") == 1


async def test_interrupts_that_are_not_objects_are_left_out(serve: Any) -> None:
    events = await events_for(serve, Script(chunks=frames(
        *call_events("up-c1", "erase", "{}"),
        {**RUN_FINISHED, "outcome": {"type": "interrupt", "interrupts": [
            "noise", {"id": "i1", "reason": "approval", "toolCallId": "up-c1"},
            {"id": "i2", "reason": "x", "toolCallId": "elsewhere"}]}})))
    assert events[-1]["outcome"]["interrupts"] == [
        {"id": "i1", "reason": "approval", "toolCallId": "up-c1"},
        {"id": "i2", "reason": "x", "toolCallId": "elsewhere"}]


async def test_a_client_given_to_the_agent_is_used_and_left_open(serve: Any) -> None:
    with scripted_upstream(Script(chunks=OK)) as upstream:
        async with httpx.AsyncClient(headers={"X-Pool": "mine"}) as client:
            server = serve(agents=[agent(upstream.url, client=client)])
            assert text(await run(server, run_body("go", agentId="up"))) == "ok"
            assert not client.is_closed
    assert upstream.headers[0]["x-pool"] == "mine"


async def test_a_configured_accept_encoding_cannot_ask_for_a_compressed_stream(
    serve: Any,
) -> None:
    """A compressed stream could inflate far past ``max_event_bytes`` in one read."""
    with scripted_upstream(Script(chunks=OK)) as upstream:
        server = serve(agents=[agent(upstream.url, headers={"Accept-Encoding": "gzip"})])
        await run(server, run_body("go", agentId="up"))
    assert upstream.headers[0]["accept-encoding"] == "identity"


def test_an_upstream_agent_is_named_by_its_id_unless_named() -> None:
    assert agent("http://127.0.0.1:1/agui").name == "up"
    assert agent("http://127.0.0.1:1/agui", name="Remote").name == "Remote"


async def test_an_interrupt_names_the_call_by_the_clients_id(serve: Any) -> None:
    """The upstream's id is not a usable one: the client knows the call by the id minted for
    it, and so does the interrupt."""
    bad_id = "bad\nid"
    events = await events_for(serve, Script(chunks=frames(
        *call_events(bad_id, "erase", "{}"),
        {**RUN_FINISHED, "outcome": {"type": "interrupt", "interrupts": [
            {"id": "i1", "reason": "approval", "toolCallId": bad_id}]}})))
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallId"] != bad_id
    assert events[-1]["outcome"]["interrupts"] == [
        {"id": "i1", "reason": "approval", "toolCallId": start["toolCallId"]}]
