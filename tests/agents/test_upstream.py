"""``AgUiUpstreamAgent``: another AG-UI server behind iobridge, over real HTTP on loopback.

Two upstreams: a real pydantic-ai ``AGUIAdapter`` app (FunctionModel, no keys) and a
hand-written Starlette app that sends exactly the bytes a test scripts. iobridge itself runs
in a real uvicorn server (``serve``); every stream is checked by the independent checker.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.agents.upstream_apps import (
    WEATHER,
    Script,
    Upstream,
    frames,
    pydantic_upstream,
    scripted_upstream,
)
from tests.helpers import free_port, run_body

from agui_verify import verify_events
from iobridge.agents.definitions import load_agents
from iobridge.agents.upstream import AgUiUpstreamAgent

RUN_STARTED = {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}
RUN_FINISHED = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


def text_events(message_id: str, *deltas: str) -> list[dict[str, Any]]:
    return [{"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
            *({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": d}
              for d in deltas),
            {"type": "TEXT_MESSAGE_END", "messageId": message_id}]


def call_events(call_id: str, name: str, args: str) -> list[dict[str, Any]]:
    return [{"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args},
            {"type": "TOOL_CALL_END", "toolCallId": call_id}]


@pytest.fixture
def pydantic() -> Iterator[Upstream]:
    with pydantic_upstream() as upstream:
        yield upstream


async def run(
    server: Any, body: dict[str, Any], results: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One run through iobridge; frontend tools named in ``results`` are answered in-run."""
    events: list[dict[str, Any]] = []
    answers = results or {}
    pending: dict[str, Any] = {}  # the started calls to answer: their result, by call id
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=20) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            events.append(event)
            if event["type"] == "TOOL_CALL_START" and event["toolCallName"] in answers:
                pending[event["toolCallId"]] = answers[event["toolCallName"]]
            if event["type"] == "TOOL_CALL_END" and event["toolCallId"] in pending:
                call = event["toolCallId"]
                posted = await client.post(
                    f"/io-bridge/runs/{body['runId']}/tool-calls/{call}/result",
                    json={"result": pending.pop(call)},
                )
                assert posted.status_code == 200, posted.text
    verify_events(events, thread_id=body["threadId"], run_id=body["runId"])
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def stored(server: Any, thread_id: str = "t1") -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.get(f"/io-bridge/threads/{thread_id}/messages",
                                    params={"format": "agui"})
    assert response.status_code == 200
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def agent(url: str, **kwargs: Any) -> AgUiUpstreamAgent:
    return AgUiUpstreamAgent(url, id="up", **kwargs)


# -- a real pydantic-ai upstream -------------------------------------------------------------


async def test_text_from_a_pydantic_ai_upstream(pydantic: Upstream, serve: Any) -> None:
    server = serve(agents=[agent(pydantic.url)])
    events = await run(server, run_body("hi", agentId="up", color="blue"))
    assert text(events) == "Hello from upstream."
    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_FINISHED"
    # The upstream got the run: ids, history, tools, forwardedProps as the client sent them.
    [sent] = pydantic.bodies
    assert (sent["threadId"], sent["runId"]) == ("t1", "r1")
    assert [m["content"] for m in sent["messages"]] == ["hi"]
    assert sent["forwardedProps"]["color"] == "blue" and sent["tools"] == []
    assert pydantic.headers[0]["accept"] == "text/event-stream"
    [reply] = [m for m in await stored(server) if m["role"] == "assistant"]
    assert reply["content"] == "Hello from upstream."
    # iobridge's own ids, not the upstream's (pydantic-ai's are UUIDs with dashes).
    assert "-" not in reply["id"]


async def test_server_tool_of_the_upstream_is_stored_and_replayed(
    pydantic: Upstream, serve: Any
) -> None:
    server = serve(agents=[agent(pydantic.url)])
    events = await run(server, run_body("what time is it?", agentId="up"))
    # The upstream said call-now, an id the thread does not hold yet: the client and the
    # thread keep it, so the upstream's later runs see the id it made.
    call_id = next(e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START")
    assert call_id == "call-now"
    sequence = [e["type"] for e in events if e.get("toolCallId") == call_id]
    assert sequence == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "12:00 UTC"
    assert text(events) == "Results: now=12:00 UTC"
    assert len(pydantic.bodies) == 1  # a server tool needs no follow-up run
    messages = await stored(server)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["toolCalls"][0]["function"] == {"name": "now", "arguments": "{}"}
    assert messages[2] == {**messages[2], "toolCallId": call_id, "content": "12:00 UTC"}
    # The next run on the thread replays the call and its result to the upstream.
    await run(server, run_body("hi again", run_id="r2", agentId="up"))
    history = pydantic.bodies[1]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert history[1]["toolCalls"][0]["id"] == call_id
    assert history[2]["toolCallId"] == call_id and history[2]["content"] == "12:00 UTC"


async def test_in_run_frontend_tool_drives_a_follow_up_upstream_run(
    pydantic: Upstream, serve: Any
) -> None:
    server = serve(agents=[agent(pydantic.url)])
    body = run_body("weather in Paris?", tools=[WEATHER], agentId="up")
    events = await run(server, body, results={"get_weather": {"tempC": 21}})
    # One client stream: the call, its posted result, then the follow-up run's text.
    assert kinds(events).count("RUN_STARTED") == 1 == kinds(events).count("RUN_FINISHED")
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "get_weather" and start["toolCallId"] == "call-weather-0"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {"tempC": 21}
    after = events[events.index(result):]
    assert text(after) == 'Results: get_weather={"tempC":21}'
    assert "outcome" not in events[-1] or "pendingToolCallIds" not in events[-1]["outcome"]
    first, follow_up = pydantic.bodies
    assert follow_up["parentRunId"] == "r1" and follow_up["runId"] != "r1"
    assert follow_up["tools"] == [WEATHER]
    added = follow_up["messages"][len(first["messages"]):]
    assert [m["role"] for m in added] == ["assistant", "tool"]
    assert added[0]["content"] == "Let me look. "
    assert added[0]["toolCalls"] == [{"id": "call-weather-0", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert added[1]["toolCallId"] == "call-weather-0"
    assert json.loads(added[1]["content"]) == {"tempC": 21}
    roles = [m["role"] for m in await stored(server)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_next_run_mode_ends_the_run_with_the_call_pending(
    pydantic: Upstream, serve: Any
) -> None:
    server = serve(agents=[agent(pydantic.url)])
    body = run_body("weather?", tools=[WEATHER], agentId="up", toolResultMode="next-run")
    events = await run(server, body)
    call_id = next(e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START")
    assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
    assert len(pydantic.bodies) == 1
    # The client answers in its next run; the upstream gets the call and the answer.
    second = run_body("", run_id="r2", tools=[WEATHER], agentId="up", toolResultMode="next-run")
    second["messages"] = [{"id": "tool-1", "role": "tool", "toolCallId": call_id,
                           "content": '{"tempC": 5}'}]
    events = await run(server, second)
    assert text(events) == 'Results: get_weather={"tempC":5}'
    history = pydantic.bodies[1]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]


async def test_frontend_tool_limit_of_follow_up_rounds(pydantic: Upstream, serve: Any) -> None:
    # At the limit: one follow-up allowed, one needed.
    server = serve(agents=[agent(pydantic.url, max_rounds=1)])
    body = run_body("weather?", tools=[WEATHER], agentId="up")
    events = await run(server, body, results={"get_weather": {"tempC": 1}})
    assert kinds(events)[-1] == "RUN_FINISHED" and len(pydantic.bodies) == 2


async def test_no_follow_up_round_allowed(pydantic: Upstream, serve: Any) -> None:
    server = serve(agents=[agent(pydantic.url, max_rounds=0)])
    # Next-run mode needs no follow-up: the limit does not apply.
    pending = await run(server, run_body("weather?", run_id="r0", thread_id="t0", tools=[WEATHER],
                                         agentId="up", toolResultMode="next-run"))
    assert len(pending[-1]["outcome"]["pendingToolCallIds"]) == 1
    pydantic.bodies.clear()
    events = await run(server, run_body("weather?", tools=[WEATHER], agentId="up"),
                       results={"get_weather": {"tempC": 1}})
    assert events[-1] == {"type": "RUN_ERROR", "code": "UPSTREAM_TOO_MANY_ROUNDS",
                          "message": "The upstream agent asked for more tool rounds than allowed."}
    assert len(pydantic.bodies) == 1


async def test_an_upstream_that_always_calls_a_tool_stops_at_max_rounds(serve: Any) -> None:
    def script(body: dict[str, Any]) -> list[bytes]:
        n = len(body["messages"])
        return frames(*call_events(f"c{n}", "get_weather", '{"city":"X"}'), RUN_FINISHED)

    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url, max_rounds=2)])
        events = await run(server, run_body("go", tools=[WEATHER], agentId="up"),
                           results={"get_weather": {"ok": True}})
    assert len(upstream.bodies) == 3  # the run and two follow-ups
    # The third call is answered (its post accepted), but no fourth upstream run starts.
    assert kinds(events).count("TOOL_CALL_RESULT") == 3
    assert events[-1]["code"] == "UPSTREAM_TOO_MANY_ROUNDS"


async def test_state_reaches_the_upstream_and_its_snapshot_the_follow_up(serve: Any) -> None:
    def script(body: dict[str, Any]) -> list[bytes]:
        if body["messages"][-1]["role"] == "tool":
            return frames(*text_events("m2", "done"), RUN_FINISHED)
        return frames({"type": "STATE_SNAPSHOT", "snapshot": {"step": 2}},
                      *call_events("c1", "get_weather", "{}"), RUN_FINISHED)

    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        body = {**run_body("go", tools=[WEATHER], agentId="up"), "state": {"step": 1}}
        events = await run(server, body, results={"get_weather": {}})
    assert text(events) == "done"
    assert {"type": "STATE_SNAPSHOT", "snapshot": {"step": 2}} in events
    assert [b["state"] for b in upstream.bodies] == [{"step": 1}, {"step": 2}]
    # The upstream's tool message carries the posted result as text.
    assert upstream.bodies[1]["messages"][-1]["content"] == "{}"


async def test_parallel_frontend_calls_are_answered_then_followed_up_together(
    serve: Any
) -> None:
    def script(body: dict[str, Any]) -> list[bytes]:
        if body["messages"][-1]["role"] == "tool":
            return frames(*text_events("m2", "both"), RUN_FINISHED)
        return frames(*text_events("m1", "Two. "), *call_events("a", "get_weather", '{"n":1}'),
                      *call_events("b", "get_weather", '{"n":2}'), RUN_FINISHED)

    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", tools=[WEATHER], agentId="up"),
                           results={"get_weather": {"ok": 1}})
    starts = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
    assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == starts
    assert starts == ["a", "b"]
    assert text(events) == "Two. both"
    added = upstream.bodies[1]["messages"][1:]
    assert [m["role"] for m in added] == ["assistant", "tool", "tool"]
    assert added[0]["content"] == "Two. "
    assert [c["id"] for c in added[0]["toolCalls"]] == ["a", "b"]
    assert [m["toolCallId"] for m in added[1:]] == ["a", "b"]


# -- an upstream that breaks the lifecycle: the guard repairs it ------------------------------


async def test_broken_lifecycle_is_repaired(serve: Any) -> None:
    script = Script(chunks=frames(
        # No RUN_STARTED; a message never closed; a duplicate start and a stray result.
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "a"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": ""},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "b"},
        {"type": "STEP_STARTED", "stepName": "s"},
        *call_events("c1", "lookup", '{"q": 1}'),
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "again"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "nope", "messageId": "x", "content": "?"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "x", "content": {"n": 1}},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "y", "content": "twice"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"k": 1}},
        {"type": "CUSTOM", "name": "progress", "value": 50},
        {"type": "MESSAGES_SNAPSHOT", "messages": []},
        {"type": "SOMETHING_NEW", "x": 1},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "c"},
        {"type": "RUN_FINISHED", "threadId": "other", "runId": "other", "result": {"ok": 1}},
        # Nothing after the upstream's RUN_FINISHED is read.
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m3", "delta": "late"},
        {"type": "RUN_ERROR", "message": "late"},
    ))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert text(events) == "abc"
    assert events[0] == {**RUN_STARTED, "protocolVersion": "1.0"}
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                          "result": {"ok": 1}}
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert result["toolCallId"] == start["toolCallId"] and result["content"] == '{"n":1}'
    assert [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"] == ["lookup"]
    assert "MESSAGES_SNAPSHOT" not in kinds(events)
    raw = next(e for e in events if e["type"] == "RAW")
    assert raw["event"] == {"type": "SOMETHING_NEW", "x": 1}
    assert {"type": "STATE_SNAPSHOT", "snapshot": {"k": 1}} in events
    assert {"type": "CUSTOM", "name": "progress", "value": 50} in events
    roles = [m["role"] for m in await stored(server)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_stream_that_ends_without_run_finished_is_finished(serve: Any) -> None:
    script = Script(chunks=frames(RUN_STARTED, *text_events("m", "open"))[:-1])
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert text(events) == "open" and kinds(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]


async def test_chunks_crlf_and_reasoning_from_the_upstream(serve: Any) -> None:
    chunks = [b'data: {"type":"REASONING_MESSAGE_CHUNK","messageId":"r","delta":"hm"}\r\n\r\n',
              b'data: {"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"he"}\r\n',
              b'\r\ndata: {"type":"TEXT_MESSAGE_CHUNK","delta":"llo"}\r\r',
              b'data: {"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f",'
              b'"delta":"{\\"a\\":"}\n\n',
              b'data: {"type":"TOOL_CALL_CHUNK","toolCallId":"c","delta":"1}"}\n\n',
              *frames(RUN_FINISHED)]
    with scripted_upstream(Script(chunks=chunks)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert text(events) == "hello"
    reasoning = [e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT"]
    assert reasoning == ["hm"]
    args = [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert "".join(args) == '{"a":1}' and "TOOL_CALL_END" in kinds(events)


async def test_tool_arguments_that_are_not_json_end_the_run(serve: Any) -> None:
    script = Script(chunks=frames(*call_events("c1", "lookup", '{"q": '), RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1]["code"] == "INVALID_TOOL_ARGS"
    assert "TOOL_CALL_START" not in kinds(events)


async def test_an_upstream_call_id_that_is_taken_is_replaced(serve: Any) -> None:
    bad_id = "bad\nid"
    script = Script(chunks=frames(*call_events(bad_id, "get_weather", "{}"), RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        body = run_body("go", tools=[WEATHER], agentId="up", toolResultMode="next-run")
        events = await run(server, body)
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallId"] != bad_id and events[-1]["outcome"]["pendingToolCallIds"] == [
        start["toolCallId"]]


async def test_an_upstream_call_id_the_thread_already_holds_is_replaced(serve: Any) -> None:
    """An upstream that reuses ``c1`` on every run (common with small local models): the
    second run's call gets an id of its own, so the thread never holds one id twice."""
    result = {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "m-res",
              "content": "42"}
    script = Script(chunks=frames(RUN_STARTED, *call_events("c1", "lookup", "{}"), result,
                                  RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        first = await run(server, run_body("go", agentId="up"))
        second = await run(server, run_body("again", run_id="r2", agentId="up"))
        thread = await stored(server)
    [one] = [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START"]
    [two] = [e["toolCallId"] for e in second if e["type"] == "TOOL_CALL_START"]
    assert one == "c1" and two != "c1"
    assert [e["toolCallId"] for e in second if e["type"] == "TOOL_CALL_RESULT"] == [two]
    calls = [c["id"] for m in thread for c in m.get("toolCalls", [])]
    results = [m["toolCallId"] for m in thread if m["role"] == "tool"]
    assert calls == results == ["c1", two]


async def test_an_upstream_result_for_a_client_tool_is_dropped(serve: Any) -> None:
    """The client answers its own tools: an upstream TOOL_CALL_RESULT for ``get_weather``
    (a frontend tool of this run) is not taken as its answer; the call stays the client's."""
    result = {"type": "TOOL_CALL_RESULT", "toolCallId": "w1", "messageId": "m-res",
              "content": "sunny, says the upstream"}
    script = Script(chunks=frames(RUN_STARTED, *call_events("w1", "get_weather", "{}"), result,
                                  RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        body = run_body("go", tools=[WEATHER], agentId="up", toolResultMode="next-run")
        events = await run(server, body)
    assert "TOOL_CALL_RESULT" not in kinds(events)
    assert events[-1]["outcome"]["pendingToolCallIds"] == ["w1"]
    assert "sunny" not in json.dumps(await stored(server))


# -- upstream failures become a clean RUN_ERROR ----------------------------------------------

SECRET = "Traceback: password=hunter2 at db.internal:5432"


@pytest.mark.parametrize(
    ("script", "code", "message"),
    [
        (Script(status=500, chunks=[SECRET.encode()]), "UPSTREAM_HTTP_ERROR",
         "The upstream agent answered HTTP 500."),
        (Script(status=401, chunks=[SECRET.encode()]), "UPSTREAM_HTTP_ERROR",
         "The upstream agent answered HTTP 401."),
        (Script(content_type="application/json", chunks=[b'{"error": "' + SECRET.encode() +
                                                         b'"}']),
         "UPSTREAM_PROTOCOL_ERROR", "The upstream agent did not answer with an event stream."),
        (Script(chunks=frames(RUN_STARTED, "{not json " + SECRET)), "UPSTREAM_PROTOCOL_ERROR",
         "The upstream agent sent a malformed event."),
        (Script(chunks=frames(RUN_STARTED, "[1, 2]")), "UPSTREAM_PROTOCOL_ERROR",
         "The upstream agent sent a malformed event."),
        (Script(chunks=frames(RUN_STARTED, '{"type": 5}')), "UPSTREAM_PROTOCOL_ERROR",
         "The upstream agent sent a malformed event."),
        (Script(chunks=frames(RUN_STARTED, {"type": "RUN_ERROR", "message": SECRET,
                                            "code": "DB_DOWN"})),
         "UPSTREAM_RUN_ERROR", "The upstream agent reported an error."),
        (Script(chunks=[gzip.compress(frames(RUN_STARTED)[0])],
                headers={"Content-Encoding": "gzip"}),
         "UPSTREAM_PROTOCOL_ERROR", "The upstream agent sent a compressed stream."),
    ],
    ids=["http-500", "http-401", "not-sse", "bad-json", "not-an-object", "no-type",
         "run-error", "compressed"],
)
async def test_upstream_failures(serve: Any, script: Script, code: str, message: str) -> None:
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1] == {"type": "RUN_ERROR", "code": code, "message": message}
    assert "hunter2" not in json.dumps(events)
    assert [m["role"] for m in await stored(server)] == ["user"]


async def test_text_before_a_failure_is_closed_and_not_stored(serve: Any) -> None:
    script = Script(chunks=[*frames(RUN_STARTED, *text_events("m", "half")[:2]), b"data: {\n\n"])
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert kinds(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert [m["role"] for m in await stored(server)] == ["user"]


async def test_connection_refused(serve: Any) -> None:
    server = serve(agents=[agent(f"http://127.0.0.1:{free_port()}/agui")])
    events = await run(server, run_body("go", agentId="up"))
    assert events[-1] == {"type": "RUN_ERROR", "code": "UPSTREAM_UNAVAILABLE",
                          "message": "The upstream agent could not be reached."}


async def test_an_upstream_slower_than_the_timeout(serve: Any) -> None:
    script = Script(chunks=frames(RUN_STARTED, *text_events("m", "slow"), RUN_FINISHED),
                    delay=0.3)
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url, timeout=0.5)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1] == {"type": "RUN_ERROR", "code": "UPSTREAM_TIMEOUT",
                          "message": "The upstream agent did not answer in time."}


async def test_event_size_at_the_limit_and_one_byte_over(serve: Any) -> None:
    def event_of(size: int) -> str:
        base = json.dumps({"type": "CUSTOM", "name": "pad", "value": ""})
        return base[:-2] + "x" * (size - len(base)) + '"}'

    for size, ok in ((300, True), (301, False)):
        data = event_of(size)
        assert len(data.encode()) == size
        with scripted_upstream(Script(chunks=frames(data, RUN_FINISHED))) as upstream:
            server = serve(agents=[agent(upstream.url, max_event_bytes=300)])
            events = await run(server, run_body("go", run_id=f"r{size}", agentId="up"))
        if ok:
            assert kinds(events) == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"]
        else:
            assert events[-1]["code"] == "UPSTREAM_PROTOCOL_ERROR"


async def test_nul_in_upstream_text_is_replaced_so_the_thread_stores_it(serve: Any) -> None:
    script = Script(chunks=frames(RUN_STARTED, *text_events("m", "a\u0000b"), RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert text(events) == "a\ufffdb"
    assert (await stored(server))[-1]["content"] == "a\ufffdb"


async def test_cancelling_the_client_run_closes_the_upstream_request(serve: Any) -> None:
    slow = Script(chunks=frames(*({"type": "CUSTOM", "name": "tick", "value": n}
                                  for n in range(200))), delay=0.05)
    with scripted_upstream(slow) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events: list[dict[str, Any]] = []
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
            client.stream("POST", "/io-bridge/run", json=run_body("go", agentId="up")) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
                    if events[-1]["type"] == "CUSTOM" and events[-1]["value"] == 1:
                        cancelled = await client.post("/io-bridge/runs/r1/cancel", json={})
                        assert cancelled.status_code == 202, cancelled.text
        assert events[-1]["outcome"] == {"type": "cancelled"}
        assert len(events) < 100
        for _ in range(200):  # the upstream notices the closed connection on its next write
            if upstream.abandoned:
                break
            await asyncio.sleep(0.05)
        assert upstream.abandoned == 1


# -- configuration ---------------------------------------------------------------------------


async def test_toml_agent_with_headers_from_the_environment(serve: Any) -> None:
    script = Script(chunks=frames(*text_events("m", "ok"), RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        agents, errors = load_agents(
            [{"id": "up", "agui_url": upstream.url, "headers": {"X-Tenant": "acme"},
              "headers_env": {"Authorization": "UPSTREAM_AUTH"}, "timeout": 30,
              "max_rounds": 3, "max_event_bytes": 4096, "tool_result_mode": "next-run"}],
            environ={"UPSTREAM_AUTH": "Bearer not-a-real-token"},
        )
        assert errors == {}
        [built] = agents
        assert isinstance(built, AgUiUpstreamAgent)
        assert (built.timeout, built.max_rounds, built.max_event_bytes) == (30, 3, 4096)
        assert built.tool_result_mode == "next-run"
        server = serve(agents=agents)
        events = await run(server, run_body("go", agentId="up"))
    assert text(events) == "ok"
    assert upstream.headers[0]["x-tenant"] == "acme"
    assert upstream.headers[0]["authorization"] == "Bearer not-a-real-token"


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({"agui_url": "ftp://example.com"}, "agui_url must be an http:// or https:// URL"),
        ({"agui_url": "http://user:pw@example.com/agui"}, "without credentials"),
        ({"agui_url": "http://x", "headers": {"Authorization": "Bearer abc"}},
         "header 'Authorization' must not be in the configuration file"),
        ({"agui_url": "http://x", "headers": {"X-Api-Key": "abc"}}, "headers_env"),
        ({"agui_url": "http://x", "headers_env": {"Authorization": "MISSING_VAR"}},
         "environment variable MISSING_VAR is not set"),
        ({"agui_url": "http://x", "headers_env": {"Authorization": "Bearer abc"}},
         "must name an environment variable"),
        ({"agui_url": "http://x", "headers": {"X": 1}}, "'headers' must be a table of strings"),
        ({"agui_url": "http://x", "model": "openai:gpt-4o"}, "unknown key(s) model"),
        ({"agui_url": "http://x", "timeout": 0}, "'timeout' must be a positive number"),
        ({"agui_url": "http://x", "max_rounds": 101}, "'max_rounds' must be an integer"),
        ({"agui_url": "http://x", "max_event_bytes": 1.5}, "'max_event_bytes' must be a "),
        ({"agui_url": "http://x", "tool_result_mode": "later"}, "tool_result_mode must be"),
        ({"agui_url": 5}, "'agui_url' must be a string"),
    ],
)
def test_bad_upstream_tables_are_unavailable_with_a_reason(
    table: dict[str, Any], reason: str
) -> None:
    agents, errors = load_agents([{"id": "up", **table}], environ={})
    assert agents == []
    assert reason in errors["up"]
    assert "abc" not in errors["up"]  # a pasted secret is never echoed


def test_python_agent_refuses_bad_limits() -> None:
    for kwargs in ({"timeout": 0}, {"max_event_bytes": 0}, {"max_rounds": -1},
                   {"tool_result_mode": "later"}):
        with pytest.raises(ValueError):
            AgUiUpstreamAgent("http://x", id="up", **kwargs)
