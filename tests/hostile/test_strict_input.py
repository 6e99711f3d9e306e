"""Strict ids and text on SQLite and PostgreSQL: a clear 4xx, and nothing stored.

U+0000 is refused everywhere (PostgreSQL cannot store it, SQLite could): so every store
answers the same, and before anything is written.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from tests.helpers import run_body

from iobridge.protocol.options import parse_run_options
from iobridge.protocol.run_input import RunInput
from iobridge.runtime.thread_memory import StoreMemory

from .conftest import Rig

BASE = "/io-bridge"


async def assert_nothing_stored(rig: Rig, thread_id: str = "t1") -> None:
    assert await rig.store.get_thread(thread_id) is None
    assert await rig.store.list_messages(thread_id) == []
    threads, _ = await rig.store.list_threads(None)
    assert threads == []


@pytest.mark.parametrize(
    "body",
    [{"id": "t", "title": "a\x00b"}, {"id": "t", "metadata": {"k": "\x00"}},
     {"id": "t", "metadata": {"k\x00": 1}}, {"id": "t", "metadata": {"k": [{"deep": "\x00"}]}}],
    ids=["title", "metadata-value", "metadata-key", "metadata-deep"],
)
async def test_nul_in_a_new_thread_is_refused(rig: Rig, body: dict[str, Any]) -> None:
    response = await rig.client.post(f"{BASE}/threads", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_TEXT"
    await assert_nothing_stored(rig, "t")


@pytest.mark.parametrize("body", [{"title": "\x00"}, {"metadata": {"a": "b\x00"}}])
async def test_nul_in_a_thread_update_is_refused(rig: Rig, body: dict[str, Any]) -> None:
    created = await rig.client.post(f"{BASE}/threads", json={"id": "t", "title": "mine"})
    assert created.status_code == 201
    response = await rig.client.patch(f"{BASE}/threads/t", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_TEXT"
    assert (await rig.client.get(f"{BASE}/threads/t")).json() == created.json()


def _run(messages: list[dict[str, Any]], **props: Any) -> dict[str, Any]:
    body = run_body("unused", **props)
    body["messages"] = messages
    return body


@pytest.mark.parametrize(
    ("body", "code"),
    [(_run([{"id": "u1", "role": "user", "content": "hi\x00"}],
           memoryOptions={"generateTitle": True}), "INVALID_TEXT"),
     (_run([{"id": "u1", "role": "user", "content": [{"type": "text", "text": "\x00"}]}],
           memoryOptions={"generateTitle": True}), "INVALID_TEXT"),
     (_run([{"id": "a1", "role": "assistant", "toolCalls": [
         {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"id": "m1", "role": "tool", "toolCallId": "c1\x00", "content": "x"}]),
      "INVALID_TEXT"),
     (_run([{"id": "m1", "role": "future\x00role", "content": "x"}]), "INVALID_TEXT"),
     (_run([{"id": "m1", "role": "future\nrole", "content": "x"}]), "INVALID_REQUEST"),
     (_run([{"id": "u\n1", "role": "user", "content": "x"}]), "INVALID_REQUEST"),
     ({**run_body("hi"), "threadId": "t\x001"}, "INVALID_ID"),
     ({**run_body("hi"), "threadId": "t\n1"}, "INVALID_ID"),
     ({**run_body("hi"), "runId": "r\x001"}, "INVALID_ID"),
     ({**run_body("hi"), "runId": "r1\nINFO forged log line"}, "INVALID_ID")],
    ids=["content-generate-title", "content-part", "tool-call-id", "unknown-role-nul",
         "unknown-role-newline", "message-id-newline", "thread-id-nul", "thread-id-newline",
         "run-id-nul", "run-id-newline"],
)
async def test_unstorable_run_input_is_refused_and_nothing_is_stored(
    rig: Rig, body: dict[str, Any], code: str
) -> None:
    response = await rig.client.post(f"{BASE}/run", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code
    await assert_nothing_stored(rig)  # also lists every thread: none under any id
    assert rig.app.state.backend.runtime.active_runs == 0


async def test_a_refused_message_leaves_no_empty_thread(rig: Rig) -> None:
    # Past the wire parser (a Python caller builds RunInput itself), the store's check
    # still refuses the message, and before the thread is created.
    memory = StoreMemory(rig.store)
    bad = RunInput(thread_id="t1", run_id="r1", messages=[{"id": "u1", "role": ""}])
    with pytest.raises(Exception) as info:
        await memory.begin(bad, parse_run_options({}), "default", "demo")
    assert getattr(info.value, "code", None) == "INVALID_MESSAGE"
    await assert_nothing_stored(rig)


async def test_a_non_string_agent_id_is_refused(rig: Rig) -> None:
    for agent_id in (5, ["demo"], {"id": "demo"}, True):
        response = await rig.client.post(f"{BASE}/run", json=run_body("hi", agentId=agent_id))
        assert response.status_code == 400, agent_id
        assert response.json()["error"]["code"] == "INVALID_ID"
    await assert_nothing_stored(rig)


async def test_a_listing_cursor_with_a_nul_thread_id_is_invalid(rig: Rig) -> None:
    forged = base64.urlsafe_b64encode(orjson.dumps([0, "a\x00b"])).rstrip(b"=").decode()
    response = await rig.client.get(f"{BASE}/threads", params={"cursor": forged})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_CURSOR"


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [("/threads/a%00b", {}, "INVALID_ID"), ("/threads/a%0Ab/messages", {}, "INVALID_ID"),
     ("/threads", {"agentId": "\x00"}, "INVALID_ID"),
     ("/threads", {"resourceId": "r\n1"}, "INVALID_ID"), ("/agents/%00", {}, "INVALID_ID"),
     # ``before`` is a page cursor (a message id) on the messages route.
     ("/threads/t/messages", {"before": "\x00"}, "INVALID_CURSOR")],
)
async def test_ids_in_paths_and_queries_are_invalid_ids(
    rig: Rig, path: str, params: dict[str, str], code: str
) -> None:
    await rig.store.create_thread("t", resource_id="default")
    response = await rig.client.get(BASE + path, params=params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


async def test_a_run_that_is_accepted_still_completes(rig: Rig) -> None:
    response = await rig.client.post(
        f"{BASE}/run", json=run_body("hello", memoryOptions={"generateTitle": True})
    )
    assert response.status_code == 200
    assert '"RUN_FINISHED"' in response.text
    thread = await rig.store.get_thread("t1")
    assert thread is not None and thread.title == "hello"




@pytest.mark.parametrize(
    ("query", "header"),
    [({"after": "²"}, None), (None, b"\xb2"), ({"after": "9" * 5000}, None),
     (None, b"1" * 5000), ({"after": "٣"}, None), ({"after": "-1"}, None),
     ({"after": "1e3"}, None), ({"after": " 1"}, None), (None, b"99999999999999999999")],
    ids=["superscript-query", "latin1-header", "5000-digits", "5000-digit-header",
         "arabic-digit", "negative", "exponent", "space", "past-int64"],
)
async def test_bad_resume_cursors_are_400(
    rig: Rig, query: dict[str, str] | None, header: bytes | None
) -> None:
    started = await rig.client.post(f"{BASE}/run", json=run_body("hello"))
    assert started.status_code == 200
    headers = {"last-event-id": header} if header is not None else {}
    response = await rig.client.get(f"{BASE}/runs/r1/events", params=query, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_CURSOR"
    good = await rig.client.get(f"{BASE}/runs/r1/events", params={"after": "1"})
    assert good.status_code == 200 and '"RUN_FINISHED"' in good.text
