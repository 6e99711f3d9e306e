"""A stock ``@ag-ui/client`` regenerate (its last reply dropped, the run sent again) against
``diverging_history = "branch"`` (the same as an explicit ``replaceFrom``) and the default
(``merge``: nothing changes for it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import run_node, running_server

from agui_verify import verify_events


@pytest.fixture(scope="module")
def branching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("e2e-branching"),
                        env={"IOBRIDGE_DIVERGING_HISTORY": "branch"}) as url:
        yield url


def _regenerate(base_url: str) -> dict[str, Any]:
    thread = f"thread-{uuid.uuid4().hex[:12]}"
    turns = [{"runId": f"run-{uuid.uuid4().hex[:12]}", "text": t} for t in ("first", "second")]
    report = run_node("run_regenerate.mjs", {
        "baseUrl": base_url, "threadId": thread, "turns": turns,
        "regenerateRunId": f"run-{uuid.uuid4().hex[:12]}", "timeoutMs": 20000,
    }, timeout=40)
    regenerated = report["regenerated"]
    verify_events(regenerated["events"], thread_id=thread, run_id=regenerated["runId"])
    report["threadId"] = thread
    return report


def _thread(base_url: str, thread: str, **params: str) -> list[dict[str, Any]]:
    page = httpx.get(f"{base_url}/io-bridge/threads/{thread}/messages",
                     params={"format": "agui", **params}, timeout=10)
    assert page.status_code == 200, page.text
    return list(page.json()["messages"])


def _branches(base_url: str, thread: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{base_url}/io-bridge/threads/{thread}/branches", timeout=10)
    assert listed.status_code == 200, listed.text
    return list(listed.json()["branches"])


def _shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in messages]


def test_a_diverging_client_branches_like_an_explicit_replace_from(branching: str) -> None:
    report = _regenerate(branching)
    thread = report["threadId"]
    old_reply = report["turns"][1]["newMessages"][-1]
    # The client sent the stored history up to the last user message, nothing new.
    assert report["regenerated"]["sent"] == report["turns"][1]["sent"]
    current = _thread(branching, thread)
    assert [m["role"] for m in current] == ["user", "assistant", "user", "assistant"]
    assert current[-1]["id"] != old_reply["id"]
    branches = _branches(branching, thread)
    assert [(b["id"], b["fromMessageId"], b["current"]) for b in branches] == [
        ("main", None, False), (branches[1]["id"], old_reply["id"], True)]
    earlier = _thread(branching, thread, branch="main")
    assert [m["id"] for m in earlier][-1] == old_reply["id"]
    assert [m["id"] for m in earlier[:3]] == [m["id"] for m in current[:3]]

    # The same conversation regenerated with an explicit replaceFrom on another thread.
    other = f"thread-{uuid.uuid4().hex[:12]}"
    sent: list[dict[str, Any]] = []
    for text in ("first", "second"):
        sent.append({"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": text})
        done = httpx.post(f"{branching}/io-bridge/run", timeout=20, json={
            "threadId": other, "runId": f"r-{uuid.uuid4().hex[:8]}", "messages": sent,
            "tools": [], "context": [], "forwardedProps": {}})
        assert done.status_code == 200
        sent = _thread(branching, other)
    explicit = httpx.post(f"{branching}/io-bridge/run", timeout=20, json={
        "threadId": other, "runId": f"r-{uuid.uuid4().hex[:8]}", "messages": [],
        "tools": [], "context": [], "forwardedProps": {"replaceFrom": sent[-1]["id"]}})
    assert explicit.status_code == 200
    assert _shape(_thread(branching, other)) == _shape(current)
    assert _shape(_thread(branching, other, branch="main")) == _shape(earlier)
    assert [(b["id"] == "main", b["current"]) for b in _branches(branching, other)] == [
        (True, False), (False, True)]


def test_by_default_a_diverging_client_changes_nothing(server: str) -> None:
    report = _regenerate(server)
    thread = report["threadId"]
    stored = _thread(server, thread)
    # Today's behaviour: the omitted reply stays, the new one is added after it.
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant",
                                           "assistant"]
    assert stored[3]["id"] == report["turns"][1]["newMessages"][-1]["id"]
    assert [b["id"] for b in _branches(server, thread)] == ["main"]


def test_a_client_that_sends_only_the_new_message_never_branches(
    branching: str, tmp_path: Path
) -> None:
    thread = f"thread-{uuid.uuid4().hex[:12]}"
    for text in ("first", "second"):
        done = httpx.post(f"{branching}/io-bridge/run", timeout=20, json={
            "threadId": thread, "runId": f"r-{uuid.uuid4().hex[:8]}",
            "messages": [{"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}],
            "tools": [], "context": [], "forwardedProps": {}})
        assert done.status_code == 200
    assert [m["role"] for m in _thread(branching, thread)] == ["user", "assistant"] * 2
    assert [b["id"] for b in _branches(branching, thread)] == ["main"]
