"""Per-run bounds, each at its limit: what a run may compute and hold, and that it always ends.

The state patch is measured in memory (``tracemalloc``), not time: on af03d35 16 doubling
copies from the root built a 3 MiB state of tens of MiB of objects before the size check
(the reproduction with 22 held 1.6 GB); here no more than the state bound is ever built.
The interrupt series is checked over HTTP on SQLite and PostgreSQL: on af03d35 twenty
resumes of 3.9 MB each made a 292 MiB database.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.backends import SQL_BACKENDS, open_backend
from tests.helpers import app_client, parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, CustomEvent, FinalResult
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.protocol.guard import LifecycleGuard
from iobridge.protocol.run_limits import RunLimits

BASE = "/io-bridge"
MIB = 1024 * 1024


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def started(**kwargs: Any) -> LifecycleGuard:
    guard = LifecycleGuard("t", "r", **kwargs)
    guard.start()
    return guard


def test_a_doubling_state_delta_never_builds_more_than_the_bound() -> None:
    # A state of small objects takes ~20 times its JSON size in Python objects: the bound
    # is 64 KiB, so an applier that stops at it stays far below 4 MiB (0.7 MiB measured);
    # the doubling builds 3 MiB of JSON (16 copies) before the size is looked at (16 MiB
    # measured on af03d35).
    guard = started(state={"a": "x" * 40}, max_state_bytes=64 * 1024)
    patch = [{"op": "copy", "from": "", "path": f"/k{i}"} for i in range(16)]
    tracemalloc.start()
    try:
        events = guard.feed({"type": "STATE_DELTA", "delta": patch})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e["type"] for e in events] == ["RUN_ERROR"]
    assert events[0]["code"] == "STATE_TOO_LARGE"
    assert peak < 4 * MIB, peak
    assert guard.shared_state == {"a": "x" * 40}


def test_many_small_deltas_on_a_large_state_track_its_size_without_copying_it() -> None:
    state = {f"k{i}": "v" * 100 for i in range(5000)}  # ~560 KB
    guard = started(state=state, max_state_bytes=MIB)
    tracemalloc.start()
    try:
        for i in range(200):
            guard.feed({"type": "STATE_DELTA",
                        "delta": [{"op": "replace", "path": f"/k{i}", "value": "w"}]})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not guard.ended
    assert len(orjson.dumps(guard.shared_state)) == len(orjson.dumps(state)) - 200 * 99
    # One shallow copy of the top object per delta (its 5,000 slots), never the strings:
    # 2 MiB measured, 11 MiB before (a copy of the whole state per delta).
    assert peak < 4 * MIB, peak


def test_run_output_at_the_bound_and_one_byte_more() -> None:
    limits = RunLimits(max_run_output_bytes=1000)
    guard = started(limits=limits)
    guard.feed({"type": "TEXT_MESSAGE_START", "messageId": "m"})
    spent = guard.output_bytes
    events = guard.feed_text_content("m", "x" * (1000 - spent))
    assert [e["type"] for e in events] == ["TEXT_MESSAGE_CONTENT"]
    events = guard.feed_text_content("m", "y")
    assert [e["type"] for e in events] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert events[-1]["code"] == "RUN_OUTPUT_TOO_LARGE"
    assert guard.feed_text_content("m", "z") == [] and guard.finish() == []


def test_non_ascii_output_counts_in_utf8_bytes() -> None:
    guard = started(limits=RunLimits(max_run_output_bytes=1000))
    guard.feed({"type": "TEXT_MESSAGE_START", "messageId": "m"})
    before = guard.output_bytes
    guard.feed_text_content("m", "é€😀")
    assert guard.output_bytes - before == 2 + 3 + 4


def test_held_back_tool_arguments_count_too() -> None:
    guard = started(limits=RunLimits(max_run_output_bytes=1000))
    guard.feed({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"})
    events = guard.feed({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": " " * 2000})
    assert [e["code"] for e in events] == ["RUN_OUTPUT_TOO_LARGE"]


def test_interrupts_over_their_bound_end_the_run() -> None:
    limits = RunLimits(max_interrupt_bytes=2000)
    interrupt = {"id": "i", "reason": "r", "metadata": {"blob": "x" * 2000}}
    guard = started(limits=limits)
    events = guard.finish(outcome={"type": "interrupt", "interrupts": [interrupt]})
    assert [e["code"] for e in events] == ["INTERRUPTS_TOO_LARGE"]
    small = {"id": "i", "reason": "r", "metadata": {"blob": "x" * 100}}
    events = started(limits=limits).finish(outcome={"type": "interrupt", "interrupts": [small]})
    assert events[-1]["type"] == "RUN_FINISHED"


@pytest.mark.parametrize(
    "result", [nested(300), {"n": 2**70}, {1, 2}, "\ud800"], ids=["deep", "big", "set", "lone"],
)
def test_a_terminal_event_that_cannot_be_encoded_becomes_a_run_error(result: Any) -> None:
    events = started().finish(result=result)
    assert [e["type"] for e in events] == ["RUN_ERROR"]
    assert events[0]["code"] == "INVALID_RESULT"
    orjson.dumps(events[0])


async def test_a_python_agents_unencodable_result_still_ends_the_run(serve: Any) -> None:
    async def deep(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "thinking"
        yield FinalResult(value=nested(300))

    server = serve(agents=[FunctionAgent(deep, id="deep")])
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        events = parse_sse((await client.post(f"{BASE}/run", json=run_body("go"))).text)
        replay = parse_sse((await client.get(f"{BASE}/runs/r1/events")).text)
    verify_events(events)
    assert events[-1]["code"] == "INVALID_RESULT" and replay == events


# -- the interrupt series: bounded in bytes, at the limit --------------------------------------

async def ask_forever(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Asks again after every answer (a form with one more field each time)."""
    answers = [await ctx.interrupt("input", message=f"field {n}?") for n in range(50)]
    yield f"{len(answers)} answers"


def entry_bytes(entry: dict[str, Any]) -> int:
    return len(orjson.dumps(entry))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_the_resume_series_is_bounded_at_the_limit(backend: str, tmp_path: Path) -> None:
    limit = 4096
    async with open_backend(backend, tmp_path) as store:
        app = create_app(Backend(Settings(database_url="memory://", max_interrupt_bytes=limit),
                                 store=store, agents=[FunctionAgent(ask_forever, id="ask")]))
        async with app_client(app) as client:

            async def run(run_id: str, *resume: dict[str, Any]) -> httpx.Response:
                body = run_body("go", run_id=run_id)
                if resume:
                    body["messages"], body["resume"] = [], list(resume)
                return await client.post(f"{BASE}/run", json=body)

            def answer(payload: str) -> dict[str, Any]:
                return {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}

            events = parse_sse((await run("r0")).text)
            series = 2  # the list's brackets
            for number in range(1, 50):
                (interrupt,) = events[-1]["outcome"]["interrupts"]
                grown = series + (1 if number > 1 else 0) + entry_bytes(answer("p" * 1000))
                if grown > limit:
                    break
                series = grown
                events = parse_sse((await run(f"r{number}", answer("p" * 1000))).text)
                assert events[-1]["type"] == "RUN_FINISHED", events[-1]
            # What still fits is taken to the byte; one byte more is refused, nothing changed.
            room = limit - series - 1 - entry_bytes(answer(""))
            over = await run("over", answer("q" * (room + 1)))
            assert over.status_code == 413
            assert over.json()["error"]["code"] == "INTERRUPTS_TOO_LARGE"
            record = (await store.get_thread("t1")).interrupts  # type: ignore[union-attr]
            assert record["open"] == [interrupt]
            at = await run("at", answer("q" * room))
            assert at.status_code == 200
            assert parse_sse(at.text)[-1]["type"] == "RUN_FINISHED"
            record = (await store.get_thread("t1")).interrupts  # type: ignore[union-attr]
            assert len(orjson.dumps(record["answered"])) == limit


# -- events that carry an agent's values as they are ------------------------------------------

@pytest.mark.parametrize(
    "event",
    [{"type": "CUSTOM", "name": "c", "value": nested(300)},
     {"type": "CUSTOM", "name": "c", "value": {"n": 2**70}},
     {"type": "RAW", "event": {"s": {1, 2}}},
     {"type": "SOMETHING_NEW", "x": nested(65)},
     {"type": "ACTIVITY_SNAPSHOT", "messageId": "m", "activityType": "a",
      "content": {"x": "\ud800"}}],
    ids=["custom-deep", "custom-big-int", "raw-set", "unknown-deep", "activity-lone-surrogate"],
)
def test_a_pass_through_event_that_cannot_be_encoded_ends_the_run(event: dict[str, Any]) -> None:
    guard = started()
    guard.feed({"type": "TEXT_MESSAGE_START", "messageId": "m1"})
    events = guard.feed(event)
    assert [e["type"] for e in events] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert events[-1]["code"] == "INVALID_EVENT"
    for out in events:
        orjson.dumps(out)


def test_pass_through_events_at_the_depth_limit_are_emitted() -> None:
    # The event is one level, an unknown type's RAW wrapper one more: what they carry may
    # nest max_json_depth (64) below the event.
    guard = started()
    events = guard.feed({"type": "CUSTOM", "name": "c", "value": nested(64)})
    events += guard.feed({"type": "SOMETHING_NEW", "x": nested(64)})
    assert [e["type"] for e in events] == ["CUSTOM", "RAW"]
    for out in events:
        orjson.dumps(out)


async def test_a_python_agents_unencodable_custom_event_ends_the_run_cleanly(serve: Any) -> None:
    async def agent(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "before"
        yield CustomEvent(name="c", value={"tags": {"a", "b"}})
        yield "never shown"

    server = serve(agents=[FunctionAgent(agent, id="custom")])
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        events = parse_sse((await client.post(f"{BASE}/run", json=run_body("go"))).text)
        replay = parse_sse((await client.get(f"{BASE}/runs/r1/events")).text)
    verify_events(events)
    assert events[-1]["code"] == "INVALID_EVENT" and replay == events
    assert "never shown" not in json.dumps(events)
