"""What an upstream AG-UI server sends is bounded like a client's request, and every run ends.

Measured on af03d35: a ~1.4 KB STATE_DELTA of 22 ``copy`` operations from the root froze the
server for 21.4 s at 1.6 GB; an endless upstream grew the process by ~75 MiB/s until the
upstream timeout; a RUN_FINISHED whose ``result`` nested past the encoder's limit left the run
log without a terminal event, for every follower and resume. Each case below ends the run
with a clear RUN_ERROR instead (the runs use a 10 s upstream timeout, so the old behaviour
fails with ``UPSTREAM_TIMEOUT`` rather than hanging).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from tests.agents.upstream_apps import Script, frames, scripted_upstream
from tests.helpers import LiveServer, app_client, parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents import upstream as upstream_module
from iobridge.agents.upstream import AgUiUpstreamAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

from . import endless_upstream as endless

BASE = "/io-bridge"
RUN_FINISHED = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


def upstream_agent(url: str) -> AgUiUpstreamAgent:
    return AgUiUpstreamAgent(url, id="up", timeout=10)


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def run_through(server: Any, body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        response = await client.post(f"{BASE}/run", json=body or run_body("go", agentId="up"))
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    verify_events(events)
    return events


async def stored(server: Any) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        page = await client.get(f"{BASE}/threads/t1/messages", params={"format": "agui"})
    return list(page.json()["messages"])


@contextmanager
def endless_upstream(event: Callable[[int], dict[str, Any]]) -> Iterator[str]:
    """An upstream that sends ``event(n)`` for n = 0, 1, ... until the client goes away."""
    with LiveServer(endless.app(event)) as server:  # type: ignore[arg-type]
        yield f"{server.url}/agui"


# -- STATE_DELTA: bounded while it applies ----------------------------------------------------

def doubling_patch(copies: int) -> list[dict[str, Any]]:
    return [{"op": "copy", "from": "", "path": f"/k{i}"} for i in range(copies)]


async def test_a_doubling_state_delta_ends_the_run_at_the_bound(serve: Any) -> None:
    patch = doubling_patch(22)
    assert len(json.dumps(patch)) < 1500  # the measured attack: ~1.4 KB
    script = Script(chunks=frames({"type": "STATE_SNAPSHOT", "snapshot": {"a": "x" * 40}},
                                  {"type": "STATE_DELTA", "delta": patch}, RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)])
        events = await run_through(server)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "STATE_TOO_LARGE"
    assert not [e for e in events if e["type"] == "STATE_DELTA"]  # never shown
    # The thread keeps the state the client was shown (the snapshot), not a half patch.
    thread = server.app.state.backend.store
    assert (await thread.get_thread("t1")).state == {"a": "x" * 40}


async def test_a_state_delta_over_the_operation_bound_ends_the_run(serve: Any) -> None:
    patch = [{"op": "test", "path": "", "value": {}}] * 11
    script = Script(chunks=frames({"type": "STATE_DELTA", "delta": patch}, RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)], max_state_patch_ops=10)
        events = await run_through(server)
    assert events[-1]["code"] == "STATE_DELTA_TOO_LARGE"
    script = Script(chunks=frames({"type": "STATE_DELTA", "delta": patch[:10]}, RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)], max_state_patch_ops=10)
        events = await run_through(server, run_body("go", agentId="up", run_id="r2"))
    assert events[-1]["type"] == "RUN_FINISHED"


# -- the loop keeps turning while an upstream's events are handled --------------------------------

async def test_the_reader_yields_to_the_loop_between_the_events_of_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Events already received are handled without a suspension in between: the reader
    yields once it has worked ``YIELD_SECONDS``. With a clock that passes a second at every
    reading it yields after every event, which a task counting the loop's turns sees (on
    af03d35, and with the yield every 200 events this replaced, a handful of turns: one
    per read)."""
    clock = SimpleNamespace(now=0.0)

    def perf_counter() -> float:
        clock.now += 1.0
        return clock.now

    monkeypatch.setattr(upstream_module, "time", SimpleNamespace(perf_counter=perf_counter))
    events = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}] * 2000
    script = Script(chunks=[b"".join(frames(*events, RUN_FINISHED))])  # one write
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    with scripted_upstream(script) as upstream:
        app = create_app(Backend(Settings(database_url="memory://"),
                                 agents=[upstream_agent(upstream.url)]))
        async with app_client(app) as client:
            counter = asyncio.create_task(count_turns())
            response = await client.post(f"{BASE}/run", json=run_body("go", agentId="up"))
            counter.cancel()
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    assert turns >= len(events), turns


async def test_the_tls_context_is_built_once_per_agent_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx loads the CA bundle for every client it builds (30-70 ms of the loop per run on
    af03d35): the agent builds its context once, in a worker thread."""
    built: list[bool] = []
    create = httpx.create_ssl_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(threading.current_thread() is threading.main_thread())
        return create(*args, **kwargs)

    monkeypatch.setattr(httpx, "create_ssl_context", counting)
    with scripted_upstream(Script(chunks=frames(RUN_FINISHED))) as upstream:
        app = create_app(Backend(Settings(database_url="memory://"),
                                 agents=[upstream_agent(upstream.url)]))
        async with app_client(app) as client:
            for run_id in ("r1", "r2", "r3"):
                body = run_body("go", agentId="up", run_id=run_id, thread_id=run_id)
                response = await client.post(f"{BASE}/run", json=body)
                assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    assert built == [False]


# -- every run ends with a terminal event -----------------------------------------------------

async def test_a_result_nested_past_the_limit_still_ends_the_run(serve: Any) -> None:
    script = Script(chunks=frames({**RUN_FINISHED, "result": nested(300)}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)])
        events = await run_through(server)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            replay = parse_sse((await client.get(f"{BASE}/runs/r1/events")).text)
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "UPSTREAM_PROTOCOL_ERROR"
    assert replay == events  # a resume sees the same terminal event


async def test_a_result_at_the_limit_is_the_runs_result(serve: Any) -> None:
    # The event is one level; its result may nest 63 below it.
    script = Script(chunks=frames({**RUN_FINISHED, "result": nested(63)}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)])
        events = await run_through(server)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == nested(63)


async def test_every_field_an_upstream_nests_past_the_limit_ends_the_run_cleanly(
    serve: Any,
) -> None:
    deep = nested(300)
    bad_events = [
        {"type": "STATE_SNAPSHOT", "snapshot": deep},
        {"type": "CUSTOM", "name": "c", "value": deep},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": deep}]},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "extra": deep},
        {"type": "SOMETHING_NEW", "x": deep},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x", "extra": deep},
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 18446744073709551616}},
    ]
    for number, bad in enumerate(bad_events):
        script = Script(chunks=frames({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m",
                                       "delta": "before"}, bad, RUN_FINISHED))
        with scripted_upstream(script) as upstream:
            server = serve(agents=[upstream_agent(upstream.url)])
            events = await run_through(server, run_body("go", agentId="up", run_id=f"r{number}",
                                                        thread_id=f"t{number}"))
        assert events[-1]["code"] == "UPSTREAM_PROTOCOL_ERROR", (bad["type"], events[-1])


async def test_tool_arguments_nested_past_the_limit_are_never_shown(serve: Any) -> None:
    args = json.dumps({"q": nested(100)})
    script = Script(chunks=frames(
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"}, RUN_FINISHED))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)])
        events = await run_through(server)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            mastra = await client.get(f"{BASE}/threads/t1/messages")
    assert events[-1]["code"] == "INVALID_TOOL_ARGS"
    assert "TOOL_CALL_START" not in [e["type"] for e in events]
    assert mastra.status_code == 200


# -- per-run memory: bounded in bytes ----------------------------------------------------------

async def test_an_endless_upstream_ends_at_the_run_output_bound(serve: Any) -> None:
    with endless_upstream(endless.EVENTS["text"]) as url:
        server = serve(agents=[upstream_agent(url)], max_run_output_bytes=64 * 1024)
        events = await run_through(server)
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "RUN_OUTPUT_TOO_LARGE"
    shown = sum(len(e["delta"]) for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert 60 * 1024 < shown <= 64 * 1024
    # The cut-short message is not stored; the thread stays consistent (the user's message).
    assert [m["role"] for m in await stored(server)] == ["user"]


async def test_an_upstream_that_only_closes_messages_ends_at_the_round_bound(
    serve: Any,
) -> None:
    """TEXT_MESSAGE_END of ever new ids shows the client nothing, but the round used to keep
    every id: only the round's own bound stops it."""

    with endless_upstream(endless.EVENTS["close"]) as url:
        server = serve(agents=[upstream_agent(url)], max_upstream_round_bytes=64 * 1024)
        events = await run_through(server)
    assert events[-1]["code"] == "UPSTREAM_TOO_LARGE"
    assert [m["role"] for m in await stored(server)] == ["user"]


async def test_an_upstream_within_the_bounds_finishes(serve: Any) -> None:
    deltas = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * 1000}] * 30
    with scripted_upstream(Script(chunks=frames(*deltas, RUN_FINISHED))) as upstream:
        server = serve(agents=[upstream_agent(upstream.url)], max_run_output_bytes=64 * 1024,
                       max_upstream_round_bytes=64 * 1024)
        events = await run_through(server)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert [m["role"] for m in await stored(server)] == ["user", "assistant"]
