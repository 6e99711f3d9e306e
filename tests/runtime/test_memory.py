"""Runs with thread memory: merging, windowing, persistence and ownership (Level 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import SQL_BACKENDS, open_backend
from tests.helpers import app_client, free_port, parse_sse, run_body, types

from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, TextEnd
from iobridge.app import Backend
from iobridge.auth import hash_api_key
from iobridge.config import Settings
from iobridge.http.app import create_app

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


async def messages_of(client: httpx.AsyncClient, thread_id: str, **params: Any) -> list[Any]:
    params.setdefault("format", "agui")
    response = await client.get(f"/io-bridge/threads/{thread_id}/messages", params=params)
    assert response.status_code == 200, response.text
    return response.json()["messages"]  # type: ignore[no-any-return]


async def test_new_message_only_client_continues_the_conversation(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/io-bridge/run", json=run_body("hello", run_id="r1"))
        assert parse_sse(first.text)[-1]["type"] == "RUN_FINISHED"
        second = await client.post("/io-bridge/run", json=run_body("what is 2 + 2", run_id="r2"))
        assert parse_sse(second.text)[-1]["type"] == "RUN_FINISHED"
        stored = await messages_of(client, "t1")
    roles = [m["role"] for m in stored]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert stored[0]["content"] == "hello"
    assert stored[1]["content"].startswith("You said: hello.")
    call = stored[3]["toolCalls"][0]
    assert call["function"]["name"] == "calculate"
    assert stored[4]["toolCallId"] == call["id"]
    assert stored[5]["content"] == "2 + 2 = 4."
    assert len({m["id"] for m in stored}) == len(stored)


async def test_whole_history_client_does_not_duplicate(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        await client.post("/io-bridge/run", json=run_body("what is 1 + 1", run_id="r1"))
        history = await messages_of(client, "t1")
        body = run_body("thanks", run_id="r2")
        body["messages"] = [*history, user("u2", "thanks")]
        again = await client.post("/io-bridge/run", json=body)
        assert parse_sse(again.text)[-1]["type"] == "RUN_FINISHED"
        stored = await messages_of(client, "t1")
    assert stored[: len(history)] == history
    assert [m["role"] for m in stored[len(history) :]] == ["user", "assistant"]
    assert len({m["id"] for m in stored}) == len(stored)


async def test_whole_history_client_the_agent_sees_each_message_once(serve: Any) -> None:
    """A client resending its whole history: the agent sees the thread once, then the new turn."""
    seen: list[list[dict[str, Any]]] = []

    async def recorder(ctx: Any) -> AsyncIterator[AgentOutput]:
        seen.append(ctx.messages)
        yield f"reply {len(seen)}"

    server = serve(agents=[FunctionAgent(recorder, id="rec")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        history: list[dict[str, Any]] = []
        for n in (1, 2, 3):
            body = run_body(f"message {n}", run_id=f"r{n}", agentId="rec")
            body["messages"] = [*history, user(f"u{n}", f"message {n}")]
            response = await client.post("/io-bridge/run", json=body)
            assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
            history = await messages_of(client, "t1")
    for view in seen:
        ids = [m["id"] for m in view]
        assert len(ids) == len(set(ids)), ids
    assert [m["content"] for m in seen[2]] == [
        "message 1", "reply 1", "message 2", "reply 2", "message 3"]
    assert [m["content"] for m in history] == [
        "message 1", "reply 1", "message 2", "reply 2", "message 3", "reply 3"]
    assert [m["id"] for m in seen[2]] == [m["id"] for m in history[:5]]


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_thread_memory_over_each_sql_backend(kind: str, tmp_path: Path) -> None:
    """Runs on ``create_app`` over the store itself: merged, stored and seen once per backend."""
    seen: list[list[dict[str, Any]]] = []

    async def recorder(ctx: Any) -> AsyncIterator[AgentOutput]:
        seen.append(ctx.messages)
        yield f"reply {len(seen)}"

    async with open_backend(kind, tmp_path) as store:
        backend = Backend(Settings(), agents=[FunctionAgent(recorder, id="rec")], store=store)
        app = create_app(backend)
        async with app_client(app) as client:
            first = await client.post("/io-bridge/run", json=run_body("one", agentId="rec"))
            assert parse_sse(first.text)[-1]["type"] == "RUN_FINISHED"
            history = await messages_of(client, "t1")
            body = run_body("two", run_id="r2", agentId="rec")
            body["messages"] = [*history, user("u2", "two")]
            second = await client.post("/io-bridge/run", json=body)
            assert parse_sse(second.text)[-1]["type"] == "RUN_FINISHED"
            stored = await messages_of(client, "t1")
        assert await store.list_messages("t1") == stored
    assert [m["content"] for m in stored] == ["one", "reply 1", "two", "reply 2"]
    assert [m["content"] for m in seen[1]] == ["one", "reply 1", "two"]


async def test_model_sees_stored_history_windowed_and_without_activity(serve: Any) -> None:
    seen: list[list[dict[str, Any]]] = []

    async def recorder(ctx: Any) -> AsyncIterator[AgentOutput]:
        seen.append(ctx.messages)
        yield f"reply {len(seen)}"

    server = serve(agents=[FunctionAgent(recorder, id="rec")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        for n in range(1, 4):
            body = run_body(f"message {n}", run_id=f"r{n}", agentId="rec")
            if n == 3:
                body["messages"].insert(
                    0,
                    {"id": "act", "role": "activity", "activityType": "x", "content": {}},
                )
                body["forwardedProps"]["memoryOptions"] = {"lastMessages": 2}
            response = await client.post("/io-bridge/run", json=body)
            assert response.status_code == 200
    assert [m["content"] for m in seen[1]] == ["message 1", "reply 1", "message 2"]
    # lastMessages windows the stored thread; the new message always follows.
    assert [m["content"] for m in seen[2]] == ["message 2", "reply 2", "message 3"]
    assert all(m["role"] != "activity" for m in seen[2])


async def test_read_only_reads_history_and_stores_nothing(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        await client.post("/io-bridge/run", json=run_body("hi", run_id="r1"))
        before = await messages_of(client, "t1")
        body = run_body("peek", run_id="r2", memoryOptions={"readOnly": True})
        response = await client.post("/io-bridge/run", json=body)
        assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
        assert await messages_of(client, "t1") == before


async def test_generate_title_from_first_user_message(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        body = run_body("Plan a trip to Lisbon in May", memoryOptions={"generateTitle": True})
        await client.post("/io-bridge/run", json=body)
        thread = (await client.get("/io-bridge/threads/t1")).json()
    assert thread["title"] == "Plan a trip to Lisbon in May"
    assert thread["agentId"] == "demo"


async def test_a_long_first_message_gives_a_cut_title(serve: Any) -> None:
    words = " ".join(f"word{i:02d}" for i in range(40))  # 279 characters
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        body = run_body(f"  {words}\n", memoryOptions={"generateTitle": True})
        await client.post("/io-bridge/run", json=body)
        title = (await client.get("/io-bridge/threads/t1")).json()["title"]
    # Cut at the last space within 80 characters, then an ellipsis.
    assert title == " ".join(f"word{i:02d}" for i in range(11)) + "…"


@pytest.mark.parametrize(
    "options",
    [{"lastMessages": -1}, {"lastMessages": "10"}, {"readOnly": "yes"}, "all"],
)
async def test_bad_memory_options_are_400_and_store_nothing(serve: Any, options: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("x", memoryOptions=options))
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "INVALID_FORWARDED_PROPS"
        assert (await client.get("/io-bridge/threads/t1")).status_code == 404


async def test_failed_run_stores_what_completed_and_never_half_a_message(serve: Any) -> None:
    async def flaky(ctx: Any) -> AsyncIterator[AgentOutput]:
        yield "first complete message"
        yield TextEnd()
        yield "second message cut"
        raise RuntimeError("boom")

    server = serve(agents=[FunctionAgent(flaky, id="flaky")])
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("go", agentId="flaky"))
        assert types(parse_sse(response.text))[-1] == "RUN_ERROR"
        stored = await messages_of(client, "t1")
    assert [(m["role"], m.get("content")) for m in stored] == [
        ("user", "go"),
        ("assistant", "first complete message"),
    ]


async def test_next_run_tool_mode_continues_from_the_tool_message(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        body = run_body("get_weather", run_id="r1", tools=[WEATHER], toolResultMode="next-run")
        events = parse_sse((await client.post("/io-bridge/run", json=body)).text)
        call_id = next(e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_END")
        assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
        assert not any(e["type"] == "TOOL_CALL_RESULT" for e in events)
        assert len(server.runtime.pending) == 0
        follow = {
            "threadId": "t1", "runId": "r2", "tools": [WEATHER], "context": [],
            "messages": [{"id": "tm1", "role": "tool", "toolCallId": call_id,
                          "content": '{"sky": "clear"}'}],
            "forwardedProps": {"toolResultMode": "next-run"},
        }
        second = parse_sse((await client.post("/io-bridge/run", json=follow)).text)
        text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == 'The tool get_weather returned {"sky": "clear"}.'
        stored = await messages_of(client, "t1")
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]


TWO_KEYS = {
    "mode": "api-key",
    "api_keys": [
        {"sha256": hash_api_key("key-a"), "principal": "alice", "resource_ids": ["ra"]},
        {"sha256": hash_api_key("key-b"), "principal": "bob", "resource_ids": ["rb"]},
    ],
}


async def test_run_routes_are_owned_by_the_runs_resource(serve: Any) -> None:
    # A tool timeout far beyond the test's own timeout: only the owner's answer can end it.
    server = serve(auth=TWO_KEYS, tool_timeout=600)
    alice, bob = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}
    body = run_body("get_weather", tools=[WEATHER])
    lines: list[str] = []
    async with (
        httpx.AsyncClient(base_url=server.url) as client,
        client.stream("POST", "/io-bridge/run", json=body, headers=alice) as response,
    ):
        async for line in response.aiter_lines():
            lines.append(line)
            if '"TOOL_CALL_END"' not in line:
                continue
            call_id = line.split('"toolCallId":"')[1].split('"')[0]
            result = f"/io-bridge/runs/r1/tool-calls/{call_id}/result"
            for method, path, payload in (
                ("POST", result, {"result": "stolen"}),
                ("GET", "/io-bridge/runs/r1/events", None),
                ("POST", "/io-bridge/runs/r1/cancel", {}),
            ):
                foreign = await client.request(method, path, json=payload, headers=bob)
                assert foreign.status_code == 404, path
                assert foreign.json()["error"]["code"] == "RUN_NOT_FOUND"
                anonymous = await client.request(method, path, json=payload)
                assert anonymous.status_code == 401, path
            # Nothing was consumed by the refused calls: the owner's answer still lands.
            assert len(server.runtime.pending) == 1
            mine = await client.post(result, json={"result": "sunny"}, headers=alice)
            assert mine.status_code == 200
    events = parse_sse("\n".join(lines) + "\n\n")
    [tool_result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert tool_result["content"] == "sunny"  # the owner's answer, not a timeout or bob's
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_runs_on_foreign_threads_are_404_before_streaming(serve: Any) -> None:
    server = serve(auth=TWO_KEYS)
    alice = {"X-API-Key": "key-a"}
    bob = {"X-API-Key": "key-b"}
    async with httpx.AsyncClient(base_url=server.url) as client:
        mine = await client.post("/io-bridge/run", json=run_body("hi"), headers=alice)
        assert mine.status_code == 200
        theirs = await client.post(
            "/io-bridge/run", json=run_body("hi", run_id="r2"), headers=bob
        )
        assert theirs.status_code == 404
        assert theirs.json()["error"]["code"] == "THREAD_NOT_FOUND"
        nobody = await client.post("/io-bridge/run", json=run_body("hi", run_id="r3"))
        assert nobody.status_code == 401
        wrong = await client.post(
            "/io-bridge/run", json=run_body("x", run_id="r4", resourceId="ra"), headers=bob
        )
        assert wrong.status_code == 404
        assert (await client.get("/io-bridge/threads/t1", headers=bob)).status_code == 404
        response = await client.get("/io-bridge/threads/t1/messages?format=agui", headers=alice)
        assert response.json()["messages"][0]["content"] == "hi"


def _start_server(port: int, db: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "iobridge.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/io-bridge/agents", timeout=0.5)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("server did not start")


def test_history_survives_a_killed_server_process(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    port = free_port()
    process = _start_server(port, db)
    url = f"http://127.0.0.1:{port}/io-bridge"
    try:
        httpx.post(f"{url}/run", json=run_body("what is 3 * 3", run_id="r1"), timeout=10)
        before = httpx.get(f"{url}/threads/t1/messages?format=agui", timeout=5).json()["messages"]
        assert [m["role"] for m in before] == ["user", "assistant", "tool", "assistant"]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    process = _start_server(port, db)
    try:
        after = httpx.get(f"{url}/threads/t1/messages?format=agui", timeout=5).json()["messages"]
        assert after == before
        httpx.post(f"{url}/run", json=run_body("and 4 * 4", run_id="r2"), timeout=10)
        grown = httpx.get(f"{url}/threads/t1/messages?format=agui", timeout=5).json()["messages"]
        assert grown[: len(before)] == before and len(grown) == len(before) + 4
    finally:
        process.terminate()
        process.wait(timeout=10)
