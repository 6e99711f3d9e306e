"""Continuing a durable run in another Backend, in one test process on a real SQLite file
(and a real Redis server for the hand-off between replicas): what the continued run is given
back (its input, the results posted before, the timeout's error for a result that never
came), who may continue it, and how a drained replica hands a producing run to its peer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.cluster.replicas import redis_server
from tests.durable.streams import parked
from tests.durable.test_durable_backend import WEATHER

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StepFinished, StepStarted
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import ConflictError, NotFoundError
from iobridge.runtime.run import Run
from iobridge.store.migrate import upgrade

KEY = ("anonymous", "r1")


async def database(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'revival.db'}"
    await upgrade(url)
    return url


def body(agent: str, **more: Any) -> dict[str, Any]:
    return {"threadId": "t1", "runId": "r1", "tools": [WEATHER], "state": {"n": 1},
            "context": [{"description": "unit", "value": "celsius"}],
            "messages": [{"id": "u1", "role": "user", "content": "weather?"}],
            "forwardedProps": {"agentId": agent, "tone": "dry"}, **more}


async def events_of(run: Run, until: str = "RUN_FINISHED", times: int = 1
                    ) -> list[dict[str, Any]]:
    """The run's events from its log's first (a continued run's) up to the ``times``-th
    ``until``, a RUN_ERROR or the log's end."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(20):  # a hang guard, not a timing check
        async for batch in run.log.follow(run.log.first_seq - 1):
            for _, data in batch:
                seen.append(orjson.loads(data))
                kind = seen[-1]["type"]
                times -= kind == until
                if kind == "RUN_ERROR" or not times:
                    return seen
    return seen


async def continued(b: Backend) -> Run:
    """The run ``r1`` once this Backend has it (continued at start or taken over)."""
    async with asyncio.timeout(20):  # a hang guard, not a timing check
        while True:
            with contextlib.suppress(NotFoundError):
                if isinstance(run := b.get_run(ANONYMOUS, "r1"), Run):
                    return run
            await asyncio.sleep(0.02)


def results(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(e["toolCallId"], e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]


def error(message: str) -> str:
    return json.dumps({"error": message})


def three_calls(seen: list[RunContext], gate: asyncio.Event) -> FunctionAgent:
    """A durable agent that asks the client three things at once, then says what it got
    (once ``gate`` is set)."""

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        seen.append(ctx)
        got = [m for m in ctx.messages if m["role"] == "tool"]
        if not got:
            got = await asyncio.gather(*(
                ctx.call_tool("get_weather", {"city": city}, tool_call_id=f"call-{tag}")
                for tag, city in (("a", "Oslo"), ("b", "Rome"), ("c", "Bergen"))))
        await gate.wait()
        yield f"got {len(got)}"

    return FunctionAgent(asks, id="asks", durable=True)


async def test_a_continued_run_gets_its_input_back_and_each_result_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Parked on three calls: one answered (as an error) before its process stopped, two
    posted while no process held the run. The next Backend continues the run with the input
    it started with and the state at its point, gives the two posted results in the order
    they were posted (not the calls' order), takes a point there (nothing is asked again)
    and goes on."""
    url = await database(tmp_path)
    settings = Settings(database_url=url)
    seen: list[RunContext] = []
    gate = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="iobridge"):
        async with Backend(settings, agents=[three_calls(seen, gate)]) as first:
            await first.start_run(ANONYMOUS, body("asks", parentRunId="p0"))
            await parked(first, *KEY)
            await first.submit_tool_result(ANONYMOUS, "r1", "call-b",
                                           {"content": "rain", "isError": True})
        # No process holds the run (no agent here to continue it): results stored now.
        async with Backend(settings) as keeper:
            assert await keeper.store.record_tool_result(*KEY, "call-c", "snow", True)
            assert await keeper.store.record_tool_result(*KEY, "call-a", "sun", False)
        async with Backend(settings, agents=[three_calls(seen, gate)]) as second:
            run = await continued(second)
            assert run.results_posted and run.ids is not None and run.ids.epoch == 1
            head = await events_of(run, "TOOL_CALL_RESULT", times=2)
            assert results(head) == [("call-c", "snow"), ("call-a", "sun")]
            # The point after the results: running, nothing waited on.
            async with asyncio.timeout(10):  # a hang guard, not a timing check
                while (now := await second.store.load_checkpoint(*KEY)) is None or (
                    now.phase != "running"
                ):
                    await asyncio.sleep(0.02)
            assert (now.point["pending"], now.epoch) == ([], 1)
            gate.set()
            tail = await events_of(run)
            assert tail[-1]["type"] == "RUN_FINISHED"
            stored = await second.store.list_messages("t1")
    first_ctx, again = seen[0], seen[-1]
    assert len(seen) == 2
    for ctx in (first_ctx, again):
        assert [t["name"] for t in ctx.frontend_tools] == ["get_weather"]
        assert ctx.context == [{"description": "unit", "value": "celsius"}]
        assert ctx.forwarded_props == {"agentId": "asks", "tone": "dry"}
        assert ctx.state == {"n": 1}
    tools = {m["toolCallId"]: m for m in stored if m["role"] == "tool"}
    assert {k: (m["content"], m.get("error")) for k, m in tools.items()} == {
        "call-a": ("sun", None), "call-b": ("rain", "rain"), "call-c": ("snow", "snow")}
    assert stored[-1]["content"] == "got 3"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run r1")]
    assert "run r1 suspended at its last durable point" in said
    assert "run r1 continued from its parked checkpoint (epoch 1)" in said


async def test_a_continued_run_whose_client_never_answers_gets_the_timeout_error(
    tmp_path: Path,
) -> None:
    url = await database(tmp_path)
    gate = asyncio.Event()
    gate.set()
    async with Backend(Settings(database_url=url), agents=[three_calls([], gate)]) as first:
        await first.start_run(ANONYMOUS, body("asks"))
        await parked(first, *KEY)
    settings = Settings(database_url=url, tool_timeout=0.3)
    async with Backend(settings, agents=[three_calls([], gate)]) as second:
        events = await events_of(await continued(second))
        stored = await second.store.list_messages("t1")
    timed_out = error("the tool timed out waiting for the client")
    assert results(events) == [(f"call-{c}", timed_out) for c in "abc"]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert [(m["content"], m["error"]) for m in stored if m["role"] == "tool"] == [
        (timed_out, timed_out)] * 3


async def test_a_run_taken_over_elsewhere_is_not_continued_from_its_old_checkpoint(
    tmp_path: Path,
) -> None:
    """A process that comes with a checkpoint another one has since continued is refused by
    the store's compare-and-set, and keeps nothing of the attempt."""
    url = await database(tmp_path)
    settings = Settings(database_url=url, max_active_runs_per_principal=1)
    seen: list[RunContext] = []
    agent = three_calls(seen, asyncio.Event())
    async with Backend(settings, agents=[agent]) as first:
        await first.start_run(ANONYMOUS, body("asks"))
        await parked(first, *KEY)
        old = await first.store.load_checkpoint(*KEY)
    assert old is not None and old.epoch == 0
    async with Backend(settings, agents=[agent]) as second, Backend(settings) as late:
        assert (await continued(second)).ids is not None
        with pytest.raises(ConflictError) as refused:
            await late.runtime.revive(old, agent)
        assert (refused.value.code, refused.value.message) == (
            "RUN_ALREADY_RUNNING", "the run was taken over elsewhere")
        assert late.runtime.active_runs == 0 and not late.runtime.is_live(KEY)
        with pytest.raises(NotFoundError):
            late.get_run(ANONYMOUS, "r1")
        now = await second.store.load_checkpoint(*KEY)
        assert now is not None and now.epoch == 1
        # Its slot is free: the caller can start another run there.
        other = await late.start_run(ANONYMOUS, {**body("asks"), "threadId": "t2", "runId": "r2",
                                                 "forwardedProps": {}})
        assert (await events_of(other))[-1]["type"] == "RUN_FINISHED"


async def test_a_stored_run_whose_thread_got_busy_is_refused_and_stops_nothing(
    tmp_path: Path,
) -> None:
    """A run begun on the thread while the stored run was held nowhere keeps it: a result
    posted to the stored run is refused with THREAD_BUSY (the run is not queued, nor does
    it stop the other), and nothing of the post is kept; once the thread is free, the same
    post continues it."""
    url = await database(tmp_path)
    gate, held = asyncio.Event(), asyncio.Event()

    async def holds(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await held.wait()
        yield "held"

    agents = [three_calls([], gate), FunctionAgent(holds, id="holds")]
    async with Backend(Settings(database_url=url), agents=agents) as b:
        run = await b.start_run(ANONYMOUS, body("asks"))
        await parked(b, *KEY)
        b.runtime.suspend_durable()
        async with asyncio.timeout(10):
            while not run.done:
                await asyncio.sleep(0.02)
        other = await b.start_run(ANONYMOUS, {**body("holds"), "runId": "r2"})
        with pytest.raises(ConflictError) as busy:
            await b.submit_tool_result(ANONYMOUS, "r1", "call-a", {"content": "sun"})
        assert busy.value.code == "THREAD_BUSY"
        checkpoint = await b.store.load_checkpoint(*KEY)
        assert checkpoint is not None and (checkpoint.epoch, checkpoint.results) == (0, {})
        assert not other.done
        held.set()
        assert [e["type"] for e in await events_of(other)][-1] == "RUN_FINISHED"
        gate.set()
        for call in ("call-a", "call-b", "call-c"):
            await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
        again = b.get_run(ANONYMOUS, "r1")
        assert isinstance(again, Run) and again is not run
        assert (await events_of(again))[-1]["type"] == "RUN_FINISHED"
        said = [m.get("content") for m in await b.store.list_messages("t1")]
    assert said[-1] == "got 3" and "held" in said


def stepping(gate: asyncio.Event, *, wait_at_point: bool) -> FunctionAgent:
    """A durable agent of two steps that goes on from the messages it is given; it waits for
    ``gate`` right at its durable point (step "one" finished), or in step "two"."""

    async def steps(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not any(m["role"] == "assistant" for m in ctx.messages):
            yield StepStarted(name="one")
            yield "first"
            yield StepFinished(name="one")
        if wait_at_point:
            await gate.wait()
        yield StepStarted(name="two")
        if not wait_at_point:
            await gate.wait()
        yield "second"
        yield StepFinished(name="two")

    return FunctionAgent(steps, id="steps", durable=True)


@pytest.mark.parametrize(("wait_at_point", "max_takeovers", "ends"), [
    (True, 0, "RUN_FINISHED"),  # let go exactly at its point: nothing re-executed, not counted
    (False, 1, "RUN_FINISHED"),  # step "two" re-executed: one takeover, as many as allowed
    (False, 0, "RUN_ERROR"),  # one more than allowed: lost
])
async def test_a_drained_replica_hands_its_producing_run_to_a_peer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, wait_at_point: bool, max_takeovers: int,
    ends: str,
) -> None:
    """A replica that stops lets its producing durable run go at its last point and asks a
    live peer to continue it; the peer takes it over at once (no client asked) and counts
    the takeover only if it re-executes part of the run."""
    url = await database(tmp_path)
    opened = asyncio.Event()  # the peer's agent: held until the peer is seen holding the run
    with redis_server(tmp_path) as redis_url, caplog.at_level(logging.INFO, logger="iobridge"):
        settings = Settings(database_url=url, redis_url=redis_url, redis_prefix="hand",
                            drain_seconds=0.2, max_takeovers=max_takeovers)
        async with Backend(settings, agents=[stepping(opened, wait_at_point=True)]) as peer:
            first = Backend(settings, agents=[stepping(asyncio.Event(),
                                                       wait_at_point=wait_at_point)])
            async with first:
                run = await first.start_run(ANONYMOUS, {**body("steps")})
                kinds = [e["type"] for e in await (
                    events_of(run, "STEP_FINISHED") if wait_at_point
                    else events_of(run, "STEP_STARTED", times=2))]
                await asyncio.sleep(0.2)  # the point's write
            assert run.log.closed and kinds[-1] == ("STEP_FINISHED" if wait_at_point
                                                    else "STEP_STARTED")
            taken = await continued(peer)
            assert taken.ids is not None and taken.ids.epoch == 1
            opened.set()
            events = await events_of(taken)
            stored = await peer.store.list_messages("t1")
    assert events[-1]["type"] == ends
    if ends == "RUN_ERROR":
        assert events[-1]["code"] == "RUN_LOST"
        assert [m.get("content") for m in stored] == ["weather?", "first"]
    else:
        assert [m.get("content") for m in stored] == ["weather?", "first", "second"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run r1")]
    assert "run r1 suspended at its last durable point" in said
    assert "run r1 continued from its running checkpoint (epoch 1)" in said
