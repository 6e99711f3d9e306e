"""The writes of a run's SSE response: the batch holding the terminal event ends the body.

uvicorn writes each ASGI message at once, so the messages the response sends are its socket
writes; a recorder around the real app (served over loopback) sees them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, parse_sse, run_body, types

from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http import event_stream
from iobridge.http.app import create_app


class Recorder:
    """ASGI middleware keeping every body message the app sends, per request path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: dict[str, list[tuple[bytes, bool]]] = {}
        #: The ``receive`` calls of each path: the type of message each returned, or
        #: ``"waiting"`` (still waiting, or cancelled while it waited).
        self.received: dict[str, list[str]] = {}
        #: How each request's app call ended: ``"returned"`` or what it raised.
        self.ended: dict[str, list[str]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kept = self.bodies.setdefault(scope["path"], [])
        received = self.received.setdefault(scope["path"], [])

        async def record(message: Any) -> None:
            if message["type"] == "http.response.body":
                kept.append((message.get("body", b""), message.get("more_body", False)))
            await send(message)

        async def counted() -> Any:
            index = len(received)
            received.append("waiting")
            message = await receive()
            received[index] = message["type"]
            return message

        ended = self.ended.setdefault(scope["path"], [])
        try:
            await self.app(scope, counted, record)
        except BaseException as exc:
            ended.append(type(exc).__name__)
            raise
        ended.append("returned")


async def five(ctx: Any) -> AsyncIterator[AgentOutput]:
    for word in ("one ", "two ", "three ", "four ", "five"):
        yield word


async def broken(ctx: Any) -> AsyncIterator[AgentOutput]:
    yield "partial"
    raise RuntimeError("boom")


async def slow(ctx: Any) -> AsyncIterator[AgentOutput]:
    yield "wait "
    await asyncio.sleep(event_stream.WATCH_AFTER * 3)
    yield "done"


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[LiveServer, Recorder]]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/iobridge.db")
    app = Recorder(
        create_app(Backend(
            settings,
            agents=[FunctionAgent(five, id="five"), FunctionAgent(broken, id="broken"),
                    FunctionAgent(slow, id="slow"),
                    FunctionAgent(five, id="durable", durable=True)],
        ))
    )
    server = LiveServer(app)  # type: ignore[arg-type]
    with server:
        yield server, app


def assert_ends_with_terminal(messages: list[tuple[bytes, bool]], terminal: str) -> None:
    """The last message carries the terminal event and ends the body; none follows it."""
    assert messages, "no body was sent"
    *earlier, (last_body, more) = messages
    assert more is False
    data = [line for line in last_body.decode().splitlines() if line.startswith("data: ")]
    assert json.loads(data[-1][6:])["type"] == terminal
    assert all(more_body for _, more_body in earlier)
    assert all(body for body, _ in messages)  # no empty write to end the body


async def test_terminal_event_and_body_end_share_one_write(
    recorded: tuple[LiveServer, Recorder],
) -> None:
    server, app = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("hi", agentId="five"))
    events = parse_sse(response.text)
    assert types(events)[0] == "RUN_STARTED"
    assert types(events)[-1] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == (
        "one two three four five"
    )
    assert_ends_with_terminal(app.bodies["/io-bridge/run"], "RUN_FINISHED")


async def test_failed_run_ends_its_body_with_run_error(
    recorded: tuple[LiveServer, Recorder],
) -> None:
    server, app = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("x", agentId="broken"))
    assert types(parse_sse(response.text))[-1] == "RUN_ERROR"
    assert_ends_with_terminal(app.bodies["/io-bridge/run"], "RUN_ERROR")


async def test_resume_of_an_ended_run_ends_with_its_terminal_batch(
    recorded: tuple[LiveServer, Recorder],
) -> None:
    server, app = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/io-bridge/run", json=run_body("hi", agentId="five"))
        resumed = await client.get("/io-bridge/runs/r1/events", headers={"Last-Event-ID": "2"})
    assert resumed.status_code == 200
    ids = [line[4:] for line in resumed.text.splitlines() if line.startswith("id: ")]
    total = sum(line.startswith("id: ") for line in first.text.splitlines())
    assert ids == [str(n) for n in range(3, total + 1)]  # exactly the events after 2
    assert_ends_with_terminal(app.bodies["/io-bridge/runs/r1/events"], "RUN_FINISHED")


async def test_a_stream_is_watched_for_a_disconnect_only_once_it_lasts(
    recorded: tuple[LiveServer, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run over before WATCH_AFTER never starts the disconnect watcher (only the body is
    received); one that lasts longer has a watcher waiting on ``receive`` by then, and a
    client that leaves it is seen: the watcher gets ``http.disconnect``."""
    # Long enough that the short run ends first on a loaded machine (it takes milliseconds).
    monkeypatch.setattr(event_stream, "WATCH_AFTER", 0.5)
    server, app = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        short = await client.post("/io-bridge/run", json=run_body("hi", agentId="five"))
        assert types(parse_sse(short.text))[-1] == "RUN_FINISHED"
        assert app.received["/io-bridge/run"] == ["http.request"]
        app.received.clear()
        async with client.stream(
            "POST", "/io-bridge/run", json=run_body("hi", agentId="slow", runId="r2")
        ) as response:
            async for line in response.aiter_lines():
                if "TEXT_MESSAGE_CONTENT" in line:
                    break  # the first delta is out: leave mid-run
    for _ in range(200):
        if app.received.get("/io-bridge/run", [])[-1:] == ["http.disconnect"] and len(
            app.ended["/io-bridge/run"]) == 2:
            break
        await asyncio.sleep(0.02)
    assert app.received["/io-bridge/run"] == ["http.request", "http.disconnect"]
    # The stream a client left ends its request quietly (no cancellation for the server to
    # log as an ASGI error).
    assert app.ended["/io-bridge/run"] == ["returned", "returned"]


async def test_a_short_run_in_memory_is_three_writes() -> None:
    """On the in-memory store a chat turn whose agent never waits leaves as RUN_STARTED (at
    once: time to first event), one batch with the agent's output, and the terminal event
    with the body's end once the run's store write (one task, as on every store) settled."""
    app = Recorder(create_app(Backend(Settings(database_url="memory://"),
                              agents=[FunctionAgent(five, id="five")])))
    with LiveServer(app) as server:  # type: ignore[arg-type]
        async with httpx.AsyncClient(base_url=server.url) as client:
            response = await client.post("/io-bridge/run", json=run_body("hi", agentId="five"))
            thread = await client.get("/io-bridge/threads/t1/messages")
    assert types(parse_sse(response.text))[-1] == "RUN_FINISHED"
    bodies = app.bodies["/io-bridge/run"]
    assert [
        [json.loads(line[6:])["type"] for line in body.decode().splitlines()
         if line.startswith("data: ")]
        for body, _ in bodies
    ] == [
        ["RUN_STARTED"],
        ["TEXT_MESSAGE_START", *["TEXT_MESSAGE_CONTENT"] * 5, "TEXT_MESSAGE_END"],
        ["RUN_FINISHED"],
    ]
    assert_ends_with_terminal(bodies, "RUN_FINISHED")
    # Stored before the terminal event left: the thread holds the turn.
    assert [m["role"] for m in thread.json()["messages"]] == ["user", "assistant"]


async def test_a_durable_runs_event_ids_carry_what_is_open(
    recorded: tuple[LiveServer, Recorder],
) -> None:
    """A durable run's SSE ids say what the client has open after each event (its text
    message while it streams), the cursor a resume from another process needs."""
    server, _ = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.post("/io-bridge/run", json=run_body("hi", agentId="durable"))
    lines = response.text.splitlines()
    ids = {json.loads(data[6:])["type"]: line[4:] for line, data in itertools.pairwise(lines)
           if line.startswith("id: ") and data.startswith("data: ")}
    message_id = next(json.loads(line[6:])["messageId"] for line in lines
                      if '"TEXT_MESSAGE_START"' in line)
    assert ids["RUN_STARTED"] == "1"
    assert ids["TEXT_MESSAGE_START"].endswith(f"~t::{message_id}")
    assert ids["TEXT_MESSAGE_CONTENT"].endswith(f"~t::{message_id}")
    assert "~" not in ids["TEXT_MESSAGE_END"] and "~" not in ids["RUN_FINISHED"]


async def test_a_resume_after_the_terminal_event_is_an_empty_ended_body(
    recorded: tuple[LiveServer, Recorder],
) -> None:
    """Nothing is left after the cursor of an ended run's last event: the stream ends at once,
    its body closed by one empty write (not held open, no event sent again)."""
    server, app = recorded
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/io-bridge/run", json=run_body("hi", agentId="five"))
        total = sum(line.startswith("id: ") for line in first.text.splitlines())
        resumed = await client.get("/io-bridge/runs/r1/events",
                                   headers={"Last-Event-ID": str(total)})
    assert resumed.status_code == 200
    assert resumed.headers["content-type"].startswith("text/event-stream")
    assert resumed.text == ""
    assert app.bodies["/io-bridge/runs/r1/events"] == [(b"", False)]
