"""Regenerate and edit (``forwardedProps.replaceFrom``) and the branch routes, over HTTP on
SQLite and PostgreSQL, with a model agent talking to the OpenAI-compatible fake: the model
sees only the current branch."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from tests.agents.fake_openai import FakeOpenAI, text
from tests.branches.conftest import client
from tests.helpers import LiveServer, parse_sse

from iobridge.auth import ApiKeyEntry, AuthSettings, hash_api_key

Serve = Callable[..., LiveServer]


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _model(fake: FakeOpenAI) -> dict[str, Any]:
    return {"id": "model", "model": "openai:fake-model", "base_url": fake.base_url,
            "api_key_env": "FAKE_LLM_KEY"}


def _run(http: httpx.Client, thread: str, messages: list[dict[str, Any]],
         **props: Any) -> list[dict[str, Any]]:
    body = {"threadId": thread, "runId": f"r-{uuid.uuid4().hex[:8]}", "messages": messages,
            "tools": [], "context": [], "forwardedProps": {"agentId": "model", **props}}
    response = http.post("/run", json=body)
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


def _user(i: str, content: str) -> dict[str, Any]:
    return {"id": i, "role": "user", "content": content}


def _agui(http: httpx.Client, thread: str, **params: str) -> list[dict[str, Any]]:
    page = http.get(f"/threads/{thread}/messages", params={"format": "agui", **params})
    assert page.status_code == 200, page.text
    return list(page.json()["messages"])


def _seen(fake: FakeOpenAI) -> list[tuple[str, str]]:
    """What the model was shown in its last request: (role, content), no system prompt."""
    return [(m["role"], m["content"]) for m in fake.requests[-1]["messages"]
            if m["role"] != "system"]


@pytest.fixture
def conversation(
    server: Serve, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LiveServer, httpx.Client, str, list[dict[str, Any]]]]:
    """A thread with two turns: first / answer one, second / answer two."""
    monkeypatch.setenv("FAKE_LLM_KEY", "not-a-real-key")
    live = server(agents=[_model(fake_llm)])
    with client(live) as http:
        thread = f"br-{uuid.uuid4().hex[:10]}"
        fake_llm.push(text("answer one"), text("answer two"))
        _run(http, thread, [_user("u1", "first")])
        _run(http, thread, [_user("u2", "second")])
        stored = _agui(http, thread)
        assert [m["content"] for m in stored] == ["first", "answer one", "second", "answer two"]
        yield live, http, thread, stored


def test_regenerate_keeps_the_old_reply_as_a_branch_and_the_model_sees_the_new_one_only(
    conversation: Any, fake_llm: FakeOpenAI
) -> None:
    _, http, thread, before = conversation
    old_reply = before[3]
    fake_llm.push(text("answer two, again"))
    _run(http, thread, [], replaceFrom=old_reply["id"])
    assert _seen(fake_llm) == [("user", "first"), ("assistant", "answer one"),
                               ("user", "second")]
    now = _agui(http, thread)
    assert [m["content"] for m in now] == ["first", "answer one", "second", "answer two, again"]
    assert [m["id"] for m in now[:3]] == [m["id"] for m in before[:3]]
    branches = http.get(f"/threads/{thread}/branches").json()["branches"]
    assert [(b["id"], b["fromMessageId"], b["current"]) for b in branches] == [
        ("main", None, False), (branches[1]["id"], old_reply["id"], True)]
    assert all(b["createdAt"].endswith("Z") for b in branches)
    assert _agui(http, thread, branch="main") == before
    assert _agui(http, thread, branch=branches[1]["id"]) == now
    mastra = http.get(f"/threads/{thread}/messages", params={"branch": "main"}).json()
    assert [m["id"] for m in mastra["messages"]][-1] == old_reply["id"]
    paged = http.get(f"/threads/{thread}/messages",
                     params={"branch": "main", "format": "agui", "limit": "2"}).json()
    assert [m["content"] for m in paged["messages"]] == ["second", "answer two"]
    assert paged["nextCursor"] == before[2]["id"]


def test_edit_and_switch_back_the_model_follows_the_current_branch(
    conversation: Any, fake_llm: FakeOpenAI
) -> None:
    _, http, thread, before = conversation
    fake_llm.push(text("edited answer"))
    _run(http, thread, [_user("u2e", "second, edited")], replaceFrom="u2")
    assert _seen(fake_llm) == [("user", "first"), ("assistant", "answer one"),
                               ("user", "second, edited")]
    assert [m["content"] for m in _agui(http, thread)] == [
        "first", "answer one", "second, edited", "edited answer"]
    switched = http.patch(f"/threads/{thread}", json={"currentBranch": "main"})
    assert switched.status_code == 200, switched.text
    assert _agui(http, thread) == before
    fake_llm.push(text("third answer"))
    _run(http, thread, [_user("u3", "third")])
    assert _seen(fake_llm) == [("user", "first"), ("assistant", "answer one"),
                               ("user", "second"), ("assistant", "answer two"),
                               ("user", "third")]
    edited = [b for b in http.get(f"/threads/{thread}/branches").json()["branches"]
              if b["fromMessageId"] == "u2"]
    assert len(edited) == 1 and not edited[0]["current"]
    assert [m["content"] for m in _agui(http, thread, branch=edited[0]["id"])] == [
        "first", "answer one", "second, edited", "edited answer"]


def test_bad_replace_from_and_branch_ids_change_nothing(
    conversation: Any,
) -> None:
    _, http, thread, before = conversation
    body = {"threadId": thread, "runId": "r-bad", "messages": [_user("ux", "x")], "tools": [],
            "context": [], "forwardedProps": {"agentId": "model", "replaceFrom": "nope"}}
    refused = http.post("/run", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "INVALID_REPLACE_FROM"
    for bad in (7, ""):
        refused = http.post("/run", json={**body, "forwardedProps": {"replaceFrom": bad}})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "INVALID_REPLACE_FROM"
    new_thread = http.post("/run", json={**body, "threadId": "fresh"})
    assert new_thread.status_code == 400  # nothing to replace on a thread that does not exist
    assert http.get("/threads/fresh").status_code == 404
    assert _agui(http, thread) == before
    assert len(http.get(f"/threads/{thread}/branches").json()["branches"]) == 1
    missing = http.patch(f"/threads/{thread}", json={"currentBranch": "nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "BRANCH_NOT_FOUND"
    assert http.get(f"/threads/{thread}/messages",
                    params={"branch": "nope"}).json()["error"]["code"] == "BRANCH_NOT_FOUND"
    assert http.patch(f"/threads/{thread}", json={"currentBranch": 3}).status_code == 400
    assert http.get("/threads/nope/branches").status_code == 404


def test_the_branch_bound_answers_400_and_stores_nothing(
    server: Serve, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLM_KEY", "not-a-real-key")
    live = server(agents=[_model(fake_llm)], max_branches_per_thread=2)
    with client(live) as http:
        thread = f"br-{uuid.uuid4().hex[:10]}"
        fake_llm.push(text("one"), text("two"))
        _run(http, thread, [_user("u1", "first")])
        a1 = _agui(http, thread)[-1]["id"]
        _run(http, thread, [], replaceFrom=a1)
        before = _agui(http, thread)
        body = {"threadId": thread, "runId": "r-full", "messages": [], "tools": [],
                "context": [], "forwardedProps": {"agentId": "model",
                                                  "replaceFrom": before[-1]["id"]}}
        full = http.post("/run", json=body)
        assert full.status_code == 400
        assert full.json()["error"]["code"] == "TOO_MANY_BRANCHES"
        assert _agui(http, thread) == before
        assert len(http.get(f"/threads/{thread}/branches").json()["branches"]) == 2


def test_a_branch_switch_waits_for_no_run_and_other_resources_see_nothing(
    server: Serve,
) -> None:
    from tests.branches.scenarios import Stream, first_body, park_or_stream

    alice, bob = "alice-key-0123456789", "bob-key-0123456789"
    auth = AuthSettings(mode="api-key", api_keys=[
        ApiKeyEntry(sha256=hash_api_key(alice), principal="alice", resource_ids=["alice"]),
        ApiKeyEntry(sha256=hash_api_key(bob), principal="bob", resource_ids=["bob"]),
    ])
    live = server(auth=auth)
    headers = {"Authorization": f"Bearer {alice}"}
    with httpx.Client(base_url=f"{live.url}/io-bridge", timeout=20, headers=headers) as http, \
            httpx.Client(base_url=f"{live.url}/io-bridge", timeout=20,
                         headers={"Authorization": f"Bearer {bob}"}) as other:
        thread = f"br-{uuid.uuid4().hex[:10]}"
        first = first_body(thread, "parked")
        with http.stream("POST", "/run", json=first) as response:
            s1 = Stream(response)
            park_or_stream(s1, "parked")
            busy = http.patch(f"/threads/{thread}", json={"currentBranch": "main"})
            assert busy.status_code == 409
            assert busy.json()["error"]["code"] == "THREAD_BUSY"
            assert http.post(f"/runs/{first['runId']}/cancel", json={}).status_code == 202
            s1.rest()
        assert http.get(f"/threads/{thread}/branches").status_code == 200
        for answer in (other.get(f"/threads/{thread}/branches"),
                       other.get(f"/threads/{thread}/messages", params={"branch": "main"}),
                       other.patch(f"/threads/{thread}", json={"currentBranch": "main"})):
            assert answer.status_code == 404
            assert answer.json()["error"]["code"] == "THREAD_NOT_FOUND"
        stolen = {**first_body(thread, "parked"), "forwardedProps": {
            "replaceFrom": first["messages"][0]["id"]}}
        assert other.post("/run", json=stolen).status_code == 404
        assert len(http.get(f"/threads/{thread}/messages",
                            params={"format": "agui"}).json()["messages"]) == 3
