"""``forwardedProps.messagesSnapshot``: history for AG-UI clients that reconnect or reload."""

from __future__ import annotations

from typing import Any

import httpx
from tests.helpers import parse_sse, run_body, types


async def stored(client: httpx.AsyncClient, thread_id: str = "t1") -> list[dict[str, Any]]:
    response = await client.get(f"/io-bridge/threads/{thread_id}/messages?format=agui")
    return response.json()["messages"]  # type: ignore[no-any-return]


async def run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/io-bridge/run", json=body)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


async def test_a_run_with_nothing_new_only_hydrates(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await run(client, run_body("what is 2 + 2", run_id="r1"))
        history = await stored(client)
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]

        empty = run_body("", run_id="r2", messagesSnapshot=True)
        empty["messages"] = []
        events = await run(client, empty)
        assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert events[1]["messages"] == history

        resent = run_body("", run_id="r3", messagesSnapshot=True)
        resent["messages"] = history  # a stock client re-sending what it has
        events = await run(client, resent)
        assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert await stored(client) == history


async def test_a_new_message_is_in_the_snapshot_and_gets_an_answer(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await run(client, run_body("hello", run_id="r1"))
        events = await run(client, run_body("and 3 * 3", run_id="r2", messagesSnapshot=True))
        assert types(events)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        assert [m["id"] for m in events[1]["messages"]][-1] == "u-r2"
        assert types(events).count("MESSAGES_SNAPSHOT") == 1
        assert "TOOL_CALL_RESULT" in types(events) and events[-1]["type"] == "RUN_FINISHED"
        history = await stored(client)
        assert history[: len(events[1]["messages"])] == events[1]["messages"]
        assert history[-1]["content"] == "3 * 3 = 9."


async def test_a_new_thread_with_the_flag_still_runs_the_agent(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        body = run_body("", run_id="r1", thread_id="fresh", messagesSnapshot=True)
        body["messages"] = []
        events = await run(client, body)
        assert types(events)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        assert events[1]["messages"] == []
        assert "TEXT_MESSAGE_CONTENT" in types(events)


async def test_a_bad_flag_is_refused_and_nothing_is_stored(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post(
            "/io-bridge/run", json=run_body("hi", thread_id="t-bad", messagesSnapshot="yes")
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "INVALID_FORWARDED_PROPS"
        assert (await client.get("/io-bridge/threads/t-bad")).status_code == 404
