"""Thread and message routes (Level 3) of ``create_app`` (lifespan running) over a SQLite
file and PostgreSQL, auth mode none."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import SQL_BACKENDS, open_backend
from tests.helpers import LiveServer, app_client, parse_sse, run_body

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import ThreadStore

BASE = "/io-bridge"
#: Every POST/PATCH declares a JSON body, even an empty one (cross-site guard).
JSON = {"content-type": "application/json"}


@pytest.fixture(params=SQL_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
async def client(store: ThreadStore) -> AsyncIterator[httpx.AsyncClient]:
    agents = [FunctionAgent(_reply, id=agent_id) for agent_id in ("alpha", "beta")]
    async with app_client(create_app(Backend(Settings(), agents=agents, store=store))) as c:
        yield c


async def _reply(ctx: Any) -> str:
    return "ok"


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code


async def test_crud_roundtrip(client: httpx.AsyncClient, store: ThreadStore) -> None:
    created = await client.post(
        f"{BASE}/threads",
        json={"id": "t1", "title": "First", "metadata": {"pinned": True}, "resourceId": "u1"},
    )
    assert created.status_code == 201
    thread = created.json()
    assert thread["id"] == "t1" and thread["resourceId"] == "u1"
    assert (thread["title"], thread["metadata"]) == ("First", {"pinned": True})
    assert thread["createdAt"].endswith("Z") and "agentId" not in thread

    got = await client.get(f"{BASE}/threads/t1")
    assert got.status_code == 200 and got.json() == thread

    patched = await client.patch(f"{BASE}/threads/t1", json={"title": "Renamed"})
    assert patched.status_code == 200
    assert patched.json()["title"] == "Renamed"
    assert patched.json()["metadata"] == {"pinned": True}
    assert patched.json()["updatedAt"] >= thread["updatedAt"]
    patched = await client.patch(f"{BASE}/threads/t1", json={"metadata": {"n": 1}})
    assert (patched.json()["title"], patched.json()["metadata"]) == ("Renamed", {"n": 1})

    listed = await client.get(f"{BASE}/threads", params={"resourceId": "u1"})
    assert listed.json() == {"threads": [patched.json()]}

    deleted = await client.delete(f"{BASE}/threads/t1")
    assert deleted.status_code == 204 and deleted.content == b""
    assert_error(await client.get(f"{BASE}/threads/t1"), 404, "THREAD_NOT_FOUND")
    assert_error(await client.delete(f"{BASE}/threads/t1"), 404, "THREAD_NOT_FOUND")
    assert await store.get_thread("t1") is None


async def test_create_defaults(client: httpx.AsyncClient) -> None:
    response = await client.post(f"{BASE}/threads", headers=JSON)  # no body at all
    assert response.status_code == 201
    thread = response.json()
    assert len(thread["id"]) == 36  # a UUID
    assert (thread["resourceId"], thread["title"], thread["metadata"]) == ("default", "", {})
    listed = (await client.get(f"{BASE}/threads")).json()["threads"]
    assert [t["id"] for t in listed] == [thread["id"]]


async def test_create_existing_id_is_409_and_keeps_original(client: httpx.AsyncClient) -> None:
    first = (await client.post(f"{BASE}/threads", json={"id": "t1", "title": "A"})).json()
    again = await client.post(f"{BASE}/threads", json={"id": "t1", "title": "B"})
    assert_error(again, 409, "THREAD_EXISTS")
    assert (await client.get(f"{BASE}/threads/t1")).json() == first


async def test_agent_id_is_checked_and_filters(client: httpx.AsyncClient) -> None:
    unknown = await client.post(f"{BASE}/threads", json={"agentId": "nope"})
    assert_error(unknown, 404, "AGENT_NOT_FOUND")
    assert (await client.get(f"{BASE}/threads")).json() == {"threads": []}
    for thread_id, agent_id in (("a1", "alpha"), ("b1", "beta"), ("a2", "alpha")):
        created = await client.post(f"{BASE}/threads", json={"id": thread_id, "agentId": agent_id})
        assert created.status_code == 201 and created.json()["agentId"] == agent_id
    await client.post(f"{BASE}/threads", json={"id": "none"})
    # A run records its agent on the thread it creates.
    ran = await client.post(f"{BASE}/run", json=run_body("hi", thread_id="b2", agentId="beta"))
    assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"

    async def listed(**params: Any) -> list[str]:
        response = await client.get(f"{BASE}/threads", params=params)
        assert response.status_code == 200, response.text
        return [t["id"] for t in response.json()["threads"]]

    assert sorted(await listed(agentId="alpha")) == ["a1", "a2"]
    assert sorted(await listed(agentId="beta")) == ["b1", "b2"]
    assert await listed(agentId="nobody") == []
    assert sorted(await listed()) == ["a1", "a2", "b1", "b2", "none"]


async def test_list_pages_with_next_cursor(client: httpx.AsyncClient) -> None:
    for i in range(25):
        await client.post(f"{BASE}/threads", json={"id": f"t{i:02d}", "resourceId": "r"})
    await client.post(f"{BASE}/threads", json={"id": "elsewhere", "resourceId": "other"})
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"resourceId": "r", "limit": 10}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get(f"{BASE}/threads", params=params)).json()
        pages += 1
        seen += [t["id"] for t in body["threads"]]
        cursor = body.get("nextCursor")
        if cursor is None:
            assert "nextCursor" not in body
            break
    assert pages == 3
    assert seen == [f"t{i:02d}" for i in reversed(range(25))]
    default_page = (await client.get(f"{BASE}/threads", params={"resourceId": "r"})).json()
    assert len(default_page["threads"]) == 20 and "nextCursor" in default_page


async def test_messages_route(client: httpx.AsyncClient, store: ThreadStore) -> None:
    await client.post(f"{BASE}/threads", json={"id": "t1"})
    history: list[dict[str, Any]] = [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "r1", "role": "reasoning", "content": "thinking"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "done"},
        {"id": "x1", "role": "activity", "activityType": "progress", "content": {"pct": 100}},
        {"id": "a2", "role": "assistant", "content": "All done"},
    ]
    await store.append_messages("t1", history)
    all_messages = await client.get(f"{BASE}/threads/t1/messages?format=agui")
    assert all_messages.json() == {"messages": history}
    last_two = await client.get(
        f"{BASE}/threads/t1/messages", params={"limit": 2, "format": "agui"}
    )
    assert last_two.json() == {"messages": history[-2:], "nextCursor": "x1"}
    page = await client.get(
        f"{BASE}/threads/t1/messages", params={"limit": 2, "before": "t1", "format": "agui"}
    )
    assert page.json() == {"messages": history[1:3], "nextCursor": "r1"}
    missing = await client.get(f"{BASE}/threads/none/messages")
    assert_error(missing, 404, "THREAD_NOT_FOUND")


BAD_REQUESTS: list[tuple[str, str, dict[str, Any], str]] = [
    ("post", "/threads", {"content": b"{not json", "headers": JSON}, "INVALID_JSON"),
    ("post", "/threads", {"json": [1, 2]}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"title": 5}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"metadata": [1]}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"metadata": "x"}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"title": "x" * 1025}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"metadata": {"k": "x" * 70000}}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"id": ""}}, "INVALID_ID"),
    ("post", "/threads", {"json": {"id": "x" * 257}}, "INVALID_ID"),
    ("post", "/threads", {"json": {"id": "a\nb"}}, "INVALID_ID"),
    ("post", "/threads", {"json": {"id": 7}}, "INVALID_REQUEST"),
    ("post", "/threads", {"json": {"resourceId": "\x07"}}, "INVALID_ID"),
    ("post", "/threads", {"json": {"agentId": ""}}, "INVALID_ID"),
    ("get", "/threads", {"params": {"limit": "0"}}, "INVALID_REQUEST"),
    ("get", "/threads", {"params": {"limit": "101"}}, "INVALID_REQUEST"),
    ("get", "/threads", {"params": {"limit": "ten"}}, "INVALID_REQUEST"),
    ("get", "/threads", {"params": {"cursor": "garbage"}}, "INVALID_CURSOR"),
    ("get", "/threads", {"params": {"cursor": "x" * 3000}}, "INVALID_CURSOR"),
    ("get", "/threads", {"params": {"resourceId": ""}}, "INVALID_ID"),
    ("get", "/threads/" + "x" * 257, {}, "INVALID_ID"),
    ("get", "/threads/a%01b", {}, "INVALID_ID"),
    ("patch", "/threads/keep", {"json": {"title": ["x"]}}, "INVALID_REQUEST"),
    ("patch", "/threads/keep", {"json": {"metadata": 3}}, "INVALID_REQUEST"),
    ("patch", "/threads/keep", {"content": b"[]", "headers": JSON}, "INVALID_REQUEST"),
    ("delete", "/threads/" + "x" * 257, {}, "INVALID_ID"),
    ("get", "/threads/keep/messages", {"params": {"limit": "0"}}, "INVALID_REQUEST"),
    ("get", "/threads/keep/messages", {"params": {"limit": "1001"}}, "INVALID_REQUEST"),
    ("get", "/threads/keep/messages", {"params": {"before": "nope"}}, "INVALID_CURSOR"),
]


# Input checks happen before the store is touched; one SQL backend is enough here.
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "path", "kwargs", "code"), BAD_REQUESTS)
async def test_bad_input_is_400_envelope_and_changes_nothing(
    client: httpx.AsyncClient,
    store: ThreadStore,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    code: str,
) -> None:
    await client.post(f"{BASE}/threads", json={"id": "keep", "title": "T", "metadata": {"a": 1}})
    await store.append_messages("keep", [{"id": "m1", "role": "user", "content": "hi"}])
    before = (await client.get(f"{BASE}/threads")).json()

    response = await client.request(method.upper(), f"{BASE}{path}", **kwargs)

    assert_error(response, 400, code)
    assert (await client.get(f"{BASE}/threads")).json() == before
    messages = (await client.get(f"{BASE}/threads/keep/messages?format=agui")).json()["messages"]
    assert [m["id"] for m in messages] == ["m1"]


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post(
        f"{BASE}/threads", content=b" " * (300 * 1024) + b"{}", headers=JSON
    )
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert (await client.get(f"{BASE}/threads")).json() == {"threads": []}


async def test_resource_scoping_in_mode_none(client: httpx.AsyncClient) -> None:
    await client.post(f"{BASE}/threads", json={"id": "t1", "resourceId": "alice"})
    assert (await client.get(f"{BASE}/threads")).json() == {"threads": []}
    bob = await client.get(f"{BASE}/threads", params={"resourceId": "bob"})
    assert bob.json() == {"threads": []}
    # Naming another resource on a thread route is a 404, like a missing thread.
    wrong = await client.get(f"{BASE}/threads/t1", params={"resourceId": "bob"})
    assert_error(wrong, 404, "THREAD_NOT_FOUND")
    right = await client.get(f"{BASE}/threads/t1", params={"resourceId": "alice"})
    assert right.status_code == 200


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_page_sizes_at_their_upper_bound_are_accepted(
    client: httpx.AsyncClient, store: ThreadStore
) -> None:
    await client.post(f"{BASE}/threads", json={"id": "t"})
    listed = await client.get(f"{BASE}/threads", params={"limit": "100"})
    assert listed.status_code == 200 and [t["id"] for t in listed.json()["threads"]] == ["t"]
    messages = await client.get(f"{BASE}/threads/t/messages",
                                params={"limit": "1000", "format": "agui"})
    assert messages.status_code == 200 and messages.json()["messages"] == []
    refused = await client.get(f"{BASE}/threads", params={"limit": "101"})
    assert refused.json()["error"]["message"] == "limit must be between 1 and 100"
    word = await client.get(f"{BASE}/threads", params={"limit": "ten"})
    assert word.json()["error"]["message"] == "limit must be an integer"


async def test_a_thread_read_after_run_started_waits_for_the_runs_start_write(
    tmp_path: Path,
) -> None:
    """The start write (the new thread, the run's input) is begun before RUN_STARTED and not
    awaited: a client reading the thread (or listing its threads) at once gets it, not 404,
    however slow the write. Another resource's reads do not wait for it and see nothing."""
    database = tmp_path / "t.db"
    settings = Settings(database_url=f"sqlite+aiosqlite:///{database}")
    with LiveServer(create_app(Backend(settings, agents=[FunctionAgent(_reply, id="a")]))) as live:
        # Another connection holds SQLite's write lock: the run's writes wait for it (reads,
        # under WAL, do not).
        lock = sqlite3.connect(database, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            async with httpx.AsyncClient(base_url=live.url + BASE, timeout=30) as http:
                body = run_body("hello", thread_id="fresh", resourceId="alice")
                async with http.stream("POST", "/run", json=body) as response:
                    lines = response.aiter_lines()
                    while "RUN_STARTED" not in await anext(lines):
                        pass
                    alice = {"resourceId": "alice"}
                    own = asyncio.create_task(http.get("/threads/fresh", params=alice))
                    listed = asyncio.create_task(http.get("/threads", params=alice))
                    foreign = await http.get("/threads/fresh", params={"resourceId": "bob"})
                    assert_error(foreign, 404, "THREAD_NOT_FOUND")
                    others = await http.get("/threads", params={"resourceId": "bob"})
                    assert others.json() == {"threads": []}
                    await asyncio.sleep(0.2)
                    assert not own.done(), own.result().text
                    assert not listed.done(), listed.result().text
                    lock.execute("ROLLBACK")
                    thread = await own
                    assert thread.status_code == 200, thread.text
                    assert thread.json()["resourceId"] == "alice"
                    assert [t["id"] for t in (await listed).json()["threads"]] == ["fresh"]
                    messages = await http.get("/threads/fresh/messages",
                                              params={"resourceId": "alice", "format": "agui"})
                    assert [m["content"] for m in messages.json()["messages"]][:1] == ["hello"]
                # Settled writes are not kept.
                assert live.runtime.start_writes("fresh") == {}
        finally:
            lock.close()


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _tool(message_id: str, call_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "tool", "toolCallId": call_id, "content": "done"}


#: A conversation with tool calls: a1's three results and a3's one.
CALLS: list[dict[str, Any]] = [
    {"id": "u1", "role": "user", "content": "hi"},
    {"id": "u2", "role": "user", "content": "do three things"},
    {"id": "a1", "role": "assistant", "toolCalls": [_call("c1"), _call("c2"), _call("c3")]},
    _tool("t1", "c1"), _tool("t2", "c2"), _tool("t3", "c3"),
    {"id": "a2", "role": "assistant", "content": "done"},
    {"id": "u3", "role": "user", "content": "one more"},
    {"id": "a3", "role": "assistant", "toolCalls": [_call("c4")]},
    _tool("t4", "c4"),
]
#: A history that starts with tool results (their call was never stored).
ORPHANS: list[dict[str, Any]] = [
    _tool("t0", "c0"), _tool("t1", "c1"),
    {"id": "u1", "role": "user", "content": "and then?"},
    {"id": "a1", "role": "assistant", "content": "nothing"},
]
HISTORIES = {"calls": CALLS, "orphans": ORPHANS}
# (history, query, the page's message ids, its nextCursor). A page never starts inside a
# run of tool results whose call is older: it grows back to the assistant message.
PAGES: list[tuple[str, dict[str, Any], list[str], str | None]] = [
    ("calls", {"limit": 1}, ["a3", "t4"], "a3"),
    ("calls", {"limit": 2, "before": "a2"}, ["a1", "t1", "t2", "t3"], "a1"),
    ("calls", {"limit": 2, "before": "t3"}, ["a1", "t1", "t2"], "a1"),
    ("calls", {"limit": 3, "before": "u3"}, ["a1", "t1", "t2", "t3", "a2"], "a1"),
    ("calls", {"limit": 1, "before": "t2"}, ["a1", "t1"], "a1"),
    ("calls", {"limit": 9}, [m["id"] for m in CALLS[1:]], "u2"),
    ("calls", {"limit": 10}, [m["id"] for m in CALLS], None),
    ("calls", {"limit": 50}, [m["id"] for m in CALLS], None),
    ("calls", {"limit": 2, "before": "u2"}, ["u1"], None),
    ("calls", {"limit": 2, "before": "u1"}, [], None),
    ("calls", {"before": "a2"}, ["u1", "u2", "a1", "t1", "t2", "t3"], None),
    ("calls", {"before": "u1"}, [], None),
    ("orphans", {"limit": 1, "before": "u1"}, ["t0", "t1"], None),
    ("orphans", {"limit": 2, "before": "a1"}, ["t0", "t1", "u1"], None),
]


async def _message_page(
    client: httpx.AsyncClient, thread_id: str, **params: Any
) -> tuple[list[str], str | None]:
    response = await client.get(
        f"{BASE}/threads/{thread_id}/messages", params={"format": "agui", **params}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return [m["id"] for m in body["messages"]], body.get("nextCursor")


async def _current_and_earlier(
    client: httpx.AsyncClient, store: ThreadStore, history: list[dict[str, Any]]
) -> None:
    """Thread ``now`` holds ``history`` on its current branch; thread ``then`` on its
    earlier branch ``main`` (a regenerate from the first message started branch ``b1``)."""
    for thread_id in ("now", "then"):
        await client.post(f"{BASE}/threads", json={"id": thread_id})
        await store.append_messages(thread_id, history)
    await store.fork_branch("then", history[0]["id"], "b1", max_branches=4)
    await store.append_messages("then", [{"id": "n1", "role": "user", "content": "new"}])


@pytest.mark.parametrize(("history", "query", "ids", "cursor"), PAGES)
async def test_message_pages_of_the_current_and_an_earlier_branch(
    client: httpx.AsyncClient,
    store: ThreadStore,
    history: str,
    query: dict[str, Any],
    ids: list[str],
    cursor: str | None,
) -> None:
    await _current_and_earlier(client, store, HISTORIES[history])
    assert await _message_page(client, "now", **query) == (ids, cursor)
    assert await _message_page(client, "then", branch="main", **query) == (ids, cursor)
    # Naming the current branch reads it like naming none.
    assert await _message_page(client, "now", branch="main", **query) == (ids, cursor)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_page_grows_back_over_tool_results_only_up_to_the_page_bound(
    client: httpx.AsyncClient, store: ThreadStore
) -> None:
    results = [_tool(f"t{i}", f"c{i}") for i in range(1001)]
    history: list[dict[str, Any]] = [
        {"id": "u0", "role": "user", "content": "call f 1001 times"},
        {"id": "a0", "role": "assistant", "toolCalls": [_call(f"c{i}") for i in range(1001)]},
        *results,
    ]
    await _current_and_earlier(client, store, history)
    newest = [m["id"] for m in results[1:]]
    for query in ({"limit": 999}, {"limit": 1000}):
        assert await _message_page(client, "now", **query) == (newest, "t1")
        assert await _message_page(client, "then", branch="main", **query) == (newest, "t1")
    rest = ["u0", "a0", "t0"]
    assert await _message_page(client, "now", limit=10, before="t1") == (rest, None)
    earlier = await _message_page(client, "then", branch="main", limit=10, before="t1")
    assert earlier == (rest, None)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_an_earlier_branch_refuses_unknown_branches_and_cursors(
    client: httpx.AsyncClient, store: ThreadStore
) -> None:
    await _current_and_earlier(client, store, CALLS)
    url = f"{BASE}/threads/then/messages"
    unknown = await client.get(url, params={"branch": "nope"})
    assert_error(unknown, 404, "BRANCH_NOT_FOUND")
    assert "'nope'" in unknown.json()["error"]["message"]
    too_long = await client.get(url, params={"branch": "x" * 257})
    assert_error(too_long, 400, "INVALID_ID")
    assert too_long.json()["error"]["message"].startswith("branch ")
    empty = await client.get(url, params={"branch": ""})
    assert_error(empty, 400, "INVALID_ID")
    assert empty.json()["error"]["message"].startswith("branch ")
    # n1 is a message of the current branch only; "zz" of none.
    for before in ("n1", "zz"):
        for limit in ({}, {"limit": 2}):
            refused = await client.get(url, params={"branch": "main", "before": before, **limit})
            assert_error(refused, 400, "INVALID_CURSOR")
            assert repr(before) in refused.json()["error"]["message"]
    assert await _message_page(client, "then", branch="b1", before="n1") == ([], None)
    switch = await client.patch(f"{BASE}/threads/then", json={"currentBranch": "nope"})
    assert_error(switch, 404, "BRANCH_NOT_FOUND")
    assert "'nope'" in switch.json()["error"]["message"]
    switched = await client.patch(f"{BASE}/threads/then", json={"currentBranch": "main"})
    assert switched.status_code == 200, switched.text
    assert await _message_page(client, "then", limit=1) == (["a3", "t4"], "a3")
