"""Interrupts and resume end to end: a live server on loopback over SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, RawEvent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.errors import AgentError
from iobridge.http.app import create_app
from iobridge.store import SqlThreadStore
from iobridge.store.sqlalchemy_store import make_engine

pytestmark = pytest.mark.timeout(60)


async def two_step(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Asks twice, one run each; the third run sees both answers."""
    first = await ctx.interrupt("approval", message="Step one?")
    second = await ctx.interrupt("input", message="Your name?", id="name")
    yield f"one={first.payload} name={second.payload} resumes={len(ctx.resume)}"


async def two_at_once(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Ends with two interrupts in one outcome (as an upstream AG-UI agent may)."""
    if ctx.resuming:
        yield " ".join(f"{r.interrupt_id}={r.status}" for r in ctx.resume)
        return
    yield RawEvent(event={"type": "RUN_FINISHED", "outcome": {"type": "interrupt", "interrupts": [
        {"id": "a", "reason": "approval"}, {"id": "b", "reason": "approval"}]}})


FLAKY_CALLS: list[int] = []


async def flaky(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Fails the first time it is resumed, succeeds the second."""
    answer = await ctx.interrupt("approval")
    FLAKY_CALLS.append(1)
    if len(FLAKY_CALLS) == 1:
        raise AgentError("the tool backend is down", code="BACKEND_DOWN")
    yield f"done {answer.payload}"


AGENTS = [FunctionAgent(two_step, id="two-step"), FunctionAgent(two_at_once, id="two"),
          FunctionAgent(flaky, id="flaky")]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[str]:
    """A real server on loopback over a real SQLite file or PostgreSQL schema."""
    if request.param == "sqlite":
        folder: Path = tmp_path_factory.mktemp("interrupts")
        settings = Settings(database_url=f"sqlite+aiosqlite:///{folder}/db", default_agent="demo")
        app = create_app(Backend(settings, agents=AGENTS))
    else:
        schema = asyncio.run(shared_pg_schema())
        engine = make_engine(
            postgres_url(), connect_args={"server_settings": {"search_path": schema}}
        )
        # The engine connects lazily, inside the server's own loop.
        app = create_app(Backend(Settings(database_url="memory://", default_agent="demo"),
                                 agents=AGENTS, store=SqlThreadStore(engine)))
    with LiveServer(app) as server:
        yield server.url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=20) as c:
        yield c


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def run(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post("/io-bridge/run", json=body)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def resume_body(thread: str, run_id: str, *entries: dict[str, Any], **props: Any,
                ) -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "messages": [], "resume": list(entries),
            "forwardedProps": props}


def resolved(interrupt_id: str, payload: Any = None) -> dict[str, Any]:
    entry = {"interruptId": interrupt_id, "status": "resolved"}
    return entry if payload is None else {**entry, "payload": payload}


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def messages(client: httpx.Client, thread: str) -> list[dict[str, Any]] | None:
    """The thread's stored messages (``None``: no such thread)."""
    response = client.get(f"/io-bridge/threads/{thread}/messages", params={"format": "agui"})
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return response.json()["messages"]  # type: ignore[no-any-return]


def refused(client: httpx.Client, body: dict[str, Any], code: str) -> dict[str, Any]:
    """POST a run that must be refused before its stream starts, with ``code``."""
    before = messages(client, body["threadId"])
    response = client.post("/io-bridge/run", json=body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code
    # Nothing started, nothing stored.
    assert client.get(f"/io-bridge/runs/{body['runId']}/events").status_code == 404
    assert messages(client, body["threadId"]) == before
    return error


def test_an_approval_interrupt_and_its_resume(client: httpx.Client) -> None:
    thread = new_thread()
    first = run(client, run_body("approve deploy v2", thread_id=thread, run_id=f"{thread}-1"))
    finished = first[-1]
    assert finished["type"] == "RUN_FINISHED"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert finished["outcome"]["type"] == "interrupt"
    assert interrupt["reason"] == "approval"
    assert interrupt["message"] == "Approve: deploy v2?"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert interrupt["metadata"] == {"action": "deploy v2"}
    assert text_of(first) == ""

    second = run(client, resume_body(thread, f"{thread}-2",
                                     resolved(interrupt["id"], {"approved": True})))
    assert text_of(second) == "Approved: deploy v2."
    assert second[-1]["type"] == "RUN_FINISHED" and "outcome" not in second[-1]
    stored = messages(client, thread)
    assert stored is not None
    assert [(m["role"], m.get("content")) for m in stored] == [
        ("user", "approve deploy v2"), ("assistant", "Approved: deploy v2.")]

    # Each interrupt is answered once: the same answer again is refused, nothing stored.
    error = refused(client, resume_body(thread, f"{thread}-3", resolved(interrupt["id"])),
                    "INTERRUPT_ALREADY_ANSWERED")
    assert interrupt["id"] in error["message"]


def test_a_cancelled_or_declined_approval(client: httpx.Client) -> None:
    for status, payload, reply in [("cancelled", None, "Cancelled: it."),
                                   ("resolved", {"approved": False}, "Not approved: it.")]:
        thread = new_thread()
        first = run(client, run_body("approve it", thread_id=thread, run_id=f"{thread}-1"))
        interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
        entry: dict[str, Any] = {"interruptId": interrupt_id, "status": status}
        if payload is not None:
            entry["payload"] = payload
        assert text_of(run(client, resume_body(thread, f"{thread}-2", entry))) == reply


def test_unknown_ids_and_malformed_entries_are_refused_before_the_stream(
    client: httpx.Client,
) -> None:
    thread = new_thread()
    first = run(client, run_body("approve x", thread_id=thread, run_id=f"{thread}-1"))
    interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
    error = refused(client, resume_body(thread, f"{thread}-2", resolved("nope")),
                    "INTERRUPT_NOT_FOUND")
    assert "'nope'" in error["message"]
    refused(client, resume_body(thread, f"{thread}-3", resolved(interrupt_id), resolved("nope")),
            "INTERRUPT_NOT_FOUND")
    refused(client, resume_body(thread, f"{thread}-4", resolved(interrupt_id),
                                resolved(interrupt_id)), "INTERRUPT_ALREADY_ANSWERED")
    refused(client, resume_body(thread, f"{thread}-5",
                                {"interruptId": interrupt_id, "status": "maybe"}),
            "INVALID_REQUEST")
    refused(client, resume_body(thread, f"{thread}-6", {"status": "resolved"}), "INVALID_REQUEST")
    # A resume on a thread that waits for nothing, or on a new thread.
    fresh = new_thread()
    refused(client, resume_body(fresh, f"{fresh}-1", resolved(interrupt_id)),
            "INTERRUPT_NOT_FOUND")
    assert messages(client, fresh) is None
    # None of that consumed the interrupt: the right answer still resumes the run.
    after = run(client, resume_body(thread, f"{thread}-7", resolved(interrupt_id,
                                                                     {"approved": True})))
    assert text_of(after) == "Approved: x."


def test_a_resume_must_answer_every_open_interrupt(client: httpx.Client) -> None:
    thread = new_thread()
    first = run(client, run_body("go", thread_id=thread, run_id=f"{thread}-1", agentId="two"))
    assert [i["id"] for i in first[-1]["outcome"]["interrupts"]] == ["a", "b"]
    error = refused(client, resume_body(thread, f"{thread}-2", resolved("b"), agentId="two"),
                    "INTERRUPT_UNANSWERED")
    assert error["details"] == {"interruptIds": ["a"]}
    both = run(client, resume_body(thread, f"{thread}-3", resolved("b"),
                                   {"interruptId": "a", "status": "cancelled"}, agentId="two"))
    # The agent sees the answers in the order the interrupts were raised.
    assert text_of(both) == "a=cancelled b=resolved"


def test_a_series_of_interrupts_replays_earlier_answers(client: httpx.Client) -> None:
    thread = new_thread()
    first = run(client, run_body("start", thread_id=thread, run_id=f"{thread}-1",
                                 agentId="two-step"))
    one = first[-1]["outcome"]["interrupts"][0]
    second = run(client, resume_body(thread, f"{thread}-2", resolved(one["id"], "yes"),
                                     agentId="two-step"))
    (name,) = second[-1]["outcome"]["interrupts"]
    assert name == {"id": "name", "reason": "input", "message": "Your name?"}
    third = run(client, resume_body(thread, f"{thread}-3", resolved("name", "Ada"),
                                    agentId="two-step"))
    assert text_of(third) == "one=yes name=Ada resumes=1"
    # Both were answered in this series: either id again is refused as answered.
    refused(client, resume_body(thread, f"{thread}-4", resolved(one["id"]), agentId="two-step"),
            "INTERRUPT_ALREADY_ANSWERED")


def test_a_new_message_instead_of_a_resume_abandons_the_interrupts(client: httpx.Client) -> None:
    thread = new_thread()
    first = run(client, run_body("approve x", thread_id=thread, run_id=f"{thread}-1"))
    interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
    other = run(client, run_body("what is 1 + 1", thread_id=thread, run_id=f"{thread}-2"))
    assert text_of(other).endswith("1 + 1 = 2.")
    refused(client, resume_body(thread, f"{thread}-3", resolved(interrupt_id)),
            "INTERRUPT_NOT_FOUND")


def test_a_resumed_run_that_fails_leaves_the_interrupt_open(client: httpx.Client) -> None:
    FLAKY_CALLS.clear()
    thread = new_thread()
    first = run(client, run_body("go", thread_id=thread, run_id=f"{thread}-1", agentId="flaky"))
    interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
    failed = run(client, resume_body(thread, f"{thread}-2", resolved(interrupt_id, 1),
                                     agentId="flaky"))
    assert failed[-1]["type"] == "RUN_ERROR" and failed[-1]["code"] == "BACKEND_DOWN"
    again = run(client, resume_body(thread, f"{thread}-3", resolved(interrupt_id, 2),
                                    agentId="flaky"))
    assert text_of(again) == "done 2"


def test_another_resources_thread_is_not_found_before_its_interrupts(
    client: httpx.Client,
) -> None:
    thread = new_thread()
    first = run(client, run_body("approve x", thread_id=thread, run_id=f"{thread}-1"))
    interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
    body = resume_body(thread, f"{thread}-2", resolved(interrupt_id), resourceId="someone-else")
    response = client.post("/io-bridge/run", json=body)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "THREAD_NOT_FOUND"
