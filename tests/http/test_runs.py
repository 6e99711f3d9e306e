"""POST /run and the in-run tool result route, over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.helpers import parse_sse, run_body, terminal, types

from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
#: Every POST declares a JSON body, even an empty one (cross-site guard).
JSON = {"content-type": "application/json"}
CLOCK = {"name": "read_clock", "description": "Local clock", "parameters": {"type": "object"}}


async def events_of(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Parse SSE events as they arrive."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def test_text_run_streams_a_valid_run(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("hello there"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    events = parse_sse(response.text)
    assert events[0] == {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1",
                         "protocolVersion": "1.0"}
    assert types(events)[1] == "TEXT_MESSAGE_START"
    assert types(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("You said: hello there.")
    assert sum(t == "TEXT_MESSAGE_CONTENT" for t in types(events)) > 5  # word by word


async def test_server_tool_emits_call_and_result(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("compute 6 * 7 please"))
    events = parse_sse(response.text)
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "calculate"
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"expression": "6 * 7"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == start["toolCallId"]
    assert json.loads(result["content"]) == {"expression": "6 * 7", "value": 42}
    assert "6 * 7 = 42." in "".join(
        e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_frontend_tool_round_trip_in_the_same_run(serve: Any) -> None:
    server = serve()
    body = run_body('get_weather {"city": "Paris"}', tools=[WEATHER])
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for event in events_of(response):
            seen.append(event)
            if event["type"] == "TOOL_CALL_END":
                call_id = event["toolCallId"]
                assert len(server.runtime.pending) == 1
                # No result may be streamed before the frontend posted it.
                assert not any(e["type"] == "TOOL_CALL_RESULT" for e in seen)
                posted = await client.post(
                    f"/io-bridge/runs/r1/tool-calls/{call_id}/result",
                    json={"result": {"temperature": 21, "unit": "C"}},
                )
                assert posted.status_code == 200
                assert posted.json() == {"status": "accepted"}
    start = next(e for e in seen if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "get_weather"
    args = "".join(e["delta"] for e in seen if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"city": "Paris"}
    result = next(e for e in seen if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {"temperature": 21, "unit": "C"}
    reply = "".join(e["delta"] for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert 'get_weather returned {"temperature":21,"unit":"C"}' in reply
    assert seen[-1]["type"] == "RUN_FINISHED"
    assert len(server.runtime.pending) == 0


async def test_mixed_turn_server_tool_and_two_parallel_frontend_tools(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather city=Oslo and read_clock, also 1 + 1", tools=[WEATHER, CLOCK])
    seen: list[dict[str, Any]] = []
    answered: dict[str, str] = {}
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        names: dict[str, str] = {}
        async for event in events_of(response):
            seen.append(event)
            if event["type"] == "TOOL_CALL_START":
                names[event["toolCallId"]] = event["toolCallName"]
            ends = [e["toolCallId"] for e in seen if e["type"] == "TOOL_CALL_END"]
            frontend = [c for c in ends if names[c] in ("get_weather", "read_clock")]
            if len(frontend) == 2 and not answered:
                # Both frontend calls are announced before either result exists.
                results = [e["toolCallId"] for e in seen if e["type"] == "TOOL_CALL_RESULT"]
                assert not set(frontend) & set(results)
                for call_id in reversed(frontend):  # answer out of order
                    answered[call_id] = names[call_id]
                    posted = await client.post(
                        f"/io-bridge/runs/r1/tool-calls/{call_id}/result",
                        json={"content": f"ok-{names[call_id]}"},
                    )
                    assert posted.status_code == 200
    by_call = {e["toolCallId"]: e["content"] for e in seen if e["type"] == "TOOL_CALL_RESULT"}
    assert set(names.values()) == {"get_weather", "read_clock", "calculate"}
    assert len(by_call) == 3
    for call_id, name in answered.items():
        assert by_call[call_id] == f"ok-{name}"
    calc = next(c for c, n in names.items() if n == "calculate")
    assert json.loads(by_call[calc])["value"] == 2
    assert seen[-1]["type"] == "RUN_FINISHED"


async def test_frontend_tool_timeout_gives_the_agent_an_error(serve: Any) -> None:
    server = serve(tool_timeout=0.3)
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post(
            "/io-bridge/run", json=run_body("get_weather", tools=[WEATHER])
        )
    events = parse_sse(response.text)
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "timed out" in json.loads(result["content"])["error"]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert len(server.runtime.pending) == 0


async def test_client_disconnect_cancels_run_and_pending_calls(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather please", tools=[WEATHER])
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for event in events_of(response):
            if event["type"] == "TOOL_CALL_END":
                assert len(server.runtime.pending) == 1
                break
    for _ in range(200):
        if len(server.runtime.pending) == 0 and server.runtime.active_runs == 0:
            break
        await asyncio.sleep(0.01)
    assert len(server.runtime.pending) == 0
    assert server.runtime.active_runs == 0
    ended = terminal(server.run("r1"))
    # A client gone is how AG-UI frontends stop: the run is cancelled, not failed.
    assert ended["type"] == "RUN_FINISHED" and ended["outcome"] == {"type": "cancelled"}


async def test_idle_stream_sends_pings_while_a_tool_is_pending(serve: Any) -> None:
    server = serve(ping_interval=0.05)
    chunks: list[str] = []
    body = run_body("get_weather", tools=[WEATHER])
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        call_id = None
        async for line in response.aiter_lines():
            chunks.append(line)
            if line.startswith("data: ") and '"TOOL_CALL_END"' in line:
                call_id = json.loads(line[6:])["toolCallId"]
            if call_id and chunks.count(": ping") >= 2:
                await client.post(
                    f"/io-bridge/runs/r1/tool-calls/{call_id}/result", json={"result": 1}
                )
                call_id = None
    assert chunks.count(": ping") >= 2


# -- errors before the stream -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "INVALID_JSON"),
        (b"[1, 2]", 400, "INVALID_REQUEST"),
        (b'{"runId": "r", "messages": []}', 400, "INVALID_REQUEST"),
        (
            b'{"threadId": "t", "runId": "r", "messages": [{"role": "user"}]}',
            400,
            "INVALID_REQUEST",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages": [], "forwardedProps": '
            b'{"agentId": "nobody"}}',
            404,
            "AGENT_NOT_FOUND",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages": [], "forwardedProps": '
            b'{"toolResultMode": "sometimes"}}',
            400,
            "INVALID_FORWARDED_PROPS",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages": [], "forwardedProps": '
            b'{"resourceId": 5}}',
            400,
            "INVALID_ID",
        ),
    ],
)
async def test_bad_requests_get_json_errors(
    serve: Any, body: bytes, status: int, code: str
) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post(
            "/io-bridge/run", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert "Traceback" not in response.text
    assert server.runtime.active_runs == 0


async def test_missing_field_details_name_the_field(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json={"threadId": "t", "runId": "r"})
    assert response.status_code == 400
    assert {"loc": ["messages"], "message": "Field required"} in response.json()["error"]["details"]


async def test_body_over_the_limit_is_413(serve: Any) -> None:
    server = serve(max_body_bytes=2048)
    body = run_body("x" * 4096)
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=body)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"

        # Chunked upload without Content-Length is cut off while reading, too.
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(8):
                yield b" " * 1024

        streamed = await client.post("/io-bridge/run", content=chunks(), headers=JSON)
        assert streamed.status_code == 413
    assert server.runtime.active_runs == 0


def _padded(body: dict[str, Any], size: int) -> bytes:
    """``body`` as JSON padded with trailing whitespace to exactly ``size`` bytes."""
    raw = json.dumps(body).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(
    serve: Any,
) -> None:
    """The limit holds at the byte, for a declared length and for a chunked upload alike,
    and the refusal names it."""
    server = serve(max_body_bytes=2048)

    def chunked(raw: bytes) -> Any:
        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(raw), 500):
                yield raw[start:start + 500]

        return chunks()

    async with httpx.AsyncClient(base_url=server.url) as client:
        for size in (2048, 2049):
            def raw(run: str) -> bytes:
                return _padded(run_body("hello", run_id=run, thread_id=run), size)  # noqa: B023

            declared = await client.post("/io-bridge/run", content=raw(f"d{size}"), headers=JSON)
            streamed = await client.post("/io-bridge/run", content=chunked(raw(f"s{size}")),
                                         headers=JSON)
            for response in (declared, streamed):
                if size == 2048:
                    assert response.status_code == 200, response.text
                    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
                else:
                    assert response.status_code == 413
                    assert response.json()["error"] == {
                        "code": "PAYLOAD_TOO_LARGE", "message": "request body exceeds 2048 bytes"}


async def test_a_declared_length_over_the_limit_is_refused_before_the_body(serve: Any) -> None:
    """The refusal does not wait for a body it will not read (here: none ever comes)."""
    server = serve(max_body_bytes=2048)
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /io-bridge/run HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n")
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
    assert status.split()[1] == b"413"


async def test_same_run_id_while_running_is_409(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather", tools=[WEATHER], thread_id="ta")
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for event in events_of(response):
            seen.append(event)
            if event["type"] == "TOOL_CALL_END":
                again = await client.post("/io-bridge/run", json=run_body("hi", thread_id="tb"))
                assert again.status_code == 409
                assert again.json() == {"error": {
                    "code": "RUN_ALREADY_RUNNING", "message": "a run with this runId is running"}}
                busy = await client.post(
                    "/io-bridge/run", json=run_body("hi", run_id="r2", thread_id="ta")
                )
                assert busy.status_code == 409
                assert busy.json() == {"error": {
                    "code": "THREAD_BUSY", "message": "another run is active on this thread"}}
                posted = await client.post(
                    f"/io-bridge/runs/r1/tool-calls/{event['toolCallId']}/result",
                    json={"result": "sunny"},
                )
                assert posted.status_code == 200
    # The checks above ran (the call was announced) and the run went on with the answer.
    assert types(seen).count("TOOL_CALL_END") == 1
    result = next(e for e in seen if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "sunny"
    assert seen[-1]["type"] == "RUN_FINISHED"


# -- the tool result route ----------------------------------------------------------


async def test_tool_result_route_statuses(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather and the time", tools=[WEATHER])
    checked: list[str] = []
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        names: dict[str, str] = {}
        async for event in events_of(response):
            seen.append(event)
            if event["type"] == "TOOL_CALL_START":
                names[event["toolCallId"]] = event["toolCallName"]
            if event["type"] == "TOOL_CALL_RESULT" and names[event["toolCallId"]] == "current_time":
                server_call = event["toolCallId"]
                frontend_call = next(c for c, n in names.items() if n == "get_weather")
                base = "/io-bridge/runs/r1/tool-calls"

                async def post(path: str, payload: Any) -> httpx.Response:
                    return await client.post(path, json=payload)

                assert (
                    await post(
                        f"/io-bridge/runs/nope/tool-calls/{frontend_call}/result", {"result": 1}
                    )
                ).status_code == 404
                assert (await post(f"{base}/nope/result", {"result": 1})).status_code == 404
                server_tool = await post(f"{base}/{server_call}/result", {"result": 1})
                assert server_tool.status_code == 404
                for bad in ({}, {"content": 5}, {"isError": "yes", "result": 1}, {"error": 3}):
                    wrong = await post(f"{base}/{frontend_call}/result", bad)
                    assert wrong.status_code == 400, bad
                    assert wrong.json()["error"]["code"] == "INVALID_REQUEST"
                not_json = await client.post(
                    f"{base}/{frontend_call}/result", content=b"{x", headers=JSON
                )
                assert not_json.status_code == 400
                # Nothing was consumed by the bad posts: the call is still pending.
                assert len(server.runtime.pending) == 1
                ok = await post(
                    f"{base}/{frontend_call}/result", {"error": "user declined", "isError": True}
                )
                assert ok.status_code == 200
                again = await post(f"{base}/{frontend_call}/result", {"result": 2})
                assert again.status_code == 409
                assert again.json()["error"]["code"] == "TOOL_RESULT_ALREADY_SUBMITTED"
                checked.append(frontend_call)
    # The checks above ran, and the one accepted answer is the one the run used.
    assert len(checked) == 1
    assert seen[-1]["type"] == "RUN_FINISHED"
    [declined] = [e for e in seen if e["type"] == "TOOL_CALL_RESULT"
                  and e["toolCallId"] == checked[0]]
    assert "user declined" in declined["content"]


async def test_agent_exception_becomes_run_error_without_internals(serve: Any) -> None:
    async def broken(ctx: Any) -> AsyncIterator[AgentOutput]:
        yield "partial answer"
        raise RuntimeError("secret database password in /etc/secret")

    server = serve(agents=[FunctionAgent(broken, id="broken")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("x", agentId="broken"))
    events = parse_sse(response.text)
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert events[-1] == {
        "type": "RUN_ERROR",
        "message": "The agent failed unexpectedly.",
        "code": "AGENT_ERROR",
    }
    assert "secret" not in response.text


async def test_invalid_tool_arguments_end_the_run_cleanly(serve: Any) -> None:
    async def sloppy(ctx: Any) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("get_weather")
        handle.add_args('{"city": "Par')
        await handle.result()
        yield "never"

    server = serve(agents=[FunctionAgent(sloppy, id="sloppy")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post(
            "/io-bridge/run", json=run_body("x", agentId="sloppy", tools=[WEATHER])
        )
    events = parse_sse(response.text)
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "INVALID_TOOL_ARGS"
    assert len(server.runtime.pending) == 0


# -- extensions: resume with Last-Event-ID, cancel ------------------------------------


def frames(body: str) -> list[tuple[int, dict[str, Any]]]:
    """(id, event) of each SSE event frame (ids need not start at 1 on a resumed stream)."""
    out = []
    for frame in body.split("\n\n"):
        lines = frame.split("\n")
        if len(lines) == 2 and lines[0].startswith("id: ") and lines[1].startswith("data: "):
            out.append((int(lines[0][4:]), json.loads(lines[1][6:])))
    return out


async def test_resume_after_a_dropped_stream_delivers_every_event_once(serve: Any) -> None:
    server = serve(detach_grace_seconds=5)
    body = run_body("get_weather", tools=[WEATHER])
    received: list[tuple[int, dict[str, Any]]] = []
    async with httpx.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            last_id = 0
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    last_id = int(line[4:])
                elif line.startswith("data: "):
                    received.append((last_id, json.loads(line[6:])))
                    if received[-1][1]["type"] == "TOOL_CALL_END":
                        break  # the connection drops while the tool is pending
        call_id = received[-1][1]["toolCallId"]
        run = server.run("r1")
        assert not run.done  # the grace keeps the run alive
        async with client.stream(
            "GET", "/io-bridge/runs/r1/events", headers={"Last-Event-ID": str(last_id)}
        ) as resumed:
            posted = await client.post(
                f"/io-bridge/runs/r1/tool-calls/{call_id}/result", json={"result": "sunny"}
            )
            assert posted.status_code == 200
            rest = frames((await resumed.aread()).decode())
    everything = received + rest
    assert [i for i, _ in everything] == list(range(1, len(everything) + 1))
    assert [e for _, e in everything] == [json.loads(data) for _, data in run.log.entries()]
    assert everything[-1][1]["type"] == "RUN_FINISHED"


@pytest.mark.parametrize("cursor", ["abc", "-1", "999"])
async def test_resume_with_a_bad_cursor_is_400(serve: Any, cursor: str) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        await client.post("/io-bridge/run", json=run_body("hi"))
        response = await client.get(
            "/io-bridge/runs/r1/events", headers={"Last-Event-ID": cursor}
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "INVALID_CURSOR"
        replay = await client.get("/io-bridge/runs/r1/events", params={"after": 2})
        assert frames(replay.text)[0][0] == 3


async def test_cancel_stops_the_run_and_its_pending_tool(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather", tools=[WEATHER])
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for event in events_of(response):
            seen.append(event)
            if event["type"] == "TOOL_CALL_END":
                cancelled = await client.post("/io-bridge/runs/r1/cancel", headers=JSON)
                assert cancelled.status_code == 202
                assert cancelled.json() == {"status": "cancelling"}
        again = await client.post("/io-bridge/runs/r1/cancel", headers=JSON)
        assert again.status_code == 200 and again.json() == {"status": "ended"}
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()["messages"]
    assert seen[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                        "outcome": {"type": "cancelled"}}
    assert not any(e["type"] == "TOOL_CALL_RESULT" for e in seen)
    assert len(server.runtime.pending) == 0
    # What completed before the cancel is stored: the user message and the announced call,
    # which gets an error result so the stored history replays to a model (no unpaired call).
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    call = stored[1]["toolCalls"][0]
    assert call["function"]["name"] == "get_weather"
    assert stored[2]["toolCallId"] == call["id"]
    assert stored[2]["error"] == "the run was cancelled before the client answered"
    assert json.loads(stored[2]["content"]) == {"error": stored[2]["error"]}

# -- retention of finished runs -----------------------------------------------------------


async def test_only_the_newest_max_retained_runs_stay_readable(serve: Any) -> None:
    server = serve(max_retained_runs=2)
    async with httpx.AsyncClient(base_url=server.url) as client:
        for n in (1, 2, 3):
            response = await client.post(
                "/io-bridge/run", json=run_body("hi", run_id=f"r{n}", thread_id=f"t{n}")
            )
            assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
        gone = await client.get("/io-bridge/runs/r1/events")
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "RUN_NOT_FOUND"
        for run_id in ("r2", "r3"):
            replay = await client.get(f"/io-bridge/runs/{run_id}/events")
            assert replay.status_code == 200
            assert parse_sse(replay.text)[-1]["type"] == "RUN_FINISHED"
        # An evicted run cannot be cancelled either: it answers like an unknown one.
        cancelled = await client.post("/io-bridge/runs/r1/cancel", headers=JSON)
        assert cancelled.status_code == 404


async def test_retention_seconds_zero_forgets_a_run_once_it_ends(serve: Any) -> None:
    server = serve(retention_seconds=0)
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("hi"))
        assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"  # the stream is whole
        gone = await client.get("/io-bridge/runs/r1/events")
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "RUN_NOT_FOUND"
