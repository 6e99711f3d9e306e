"""What a continued durable run carries over from its checkpoint besides its messages (in one
test process, on a real SQLite file): the result it reported before it parked, the caller it
counts against, the calls answered before it came here, the point it takes again when it
parked with its model step open, and why it is lost once it was re-executed too often."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.durable.streams import parked
from tests.durable.test_durable_backend import model_agent
from tests.runtime.test_revival import (
    KEY,
    body,
    continued,
    database,
    events_of,
    stepping,
    three_calls,
)

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, FinalResult
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import ConflictError, TooManyRequests


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


async def test_the_result_reported_before_parking_ends_the_continued_run(
    tmp_path: Path,
) -> None:
    async def reports(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not any(m["role"] == "tool" for m in ctx.messages):
            yield FinalResult(value={"plan": "ask first"})
            await ctx.call_tool("get_weather", {"city": "Oslo"}, tool_call_id="call-a")
        yield "done"

    url = await database(tmp_path)
    agent = FunctionAgent(reports, id="reports", durable=True)
    async with Backend(Settings(database_url=url), agents=[agent]) as first:
        await first.start_run(ANONYMOUS, body("reports"))
        await parked(first, *KEY)
    async with Backend(Settings(database_url=url), agents=[agent]) as second:
        run = await continued(second)
        await second.submit_tool_result(ANONYMOUS, "r1", "call-a", {"content": "sun"})
        events = await events_of(run)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == {"plan": "ask first"}


async def test_a_continued_run_counts_against_the_caller_it_started_for(
    tmp_path: Path,
) -> None:
    """Auth mode none: the limit counts per resourceId, and a continued run counts against
    the resource it acted for (not the one principal every caller is)."""

    def acting_for(resource: str, run_id: str) -> dict[str, object]:
        given = body("asks", threadId=f"t-{run_id}", runId=run_id)
        return {**given, "forwardedProps": {**given["forwardedProps"], "resourceId": resource}}

    url = await database(tmp_path)
    settings = Settings(database_url=url, max_active_runs_per_principal=1)
    gate = asyncio.Event()
    async with Backend(settings, agents=[three_calls([], gate)]) as first:
        await first.start_run(ANONYMOUS, acting_for("alice", "r1"))
        await parked(first, "anonymous", "r1")
    async with Backend(settings, agents=[three_calls([], gate)]) as second:
        run = await continued(second)
        with pytest.raises(TooManyRequests) as refused:
            await second.start_run(ANONYMOUS, acting_for("alice", "r2"))
        assert refused.value.code == "TOO_MANY_RUNS"
        await second.start_run(ANONYMOUS, acting_for("bob", "r3"))
        assert second.runtime.active_runs == 2
        gate.set()
        for call in ("call-a", "call-b", "call-c"):
            await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
        assert (await events_of(run))[-1]["type"] == "RUN_FINISHED"


async def test_a_call_answered_before_the_run_came_here_is_not_answered_twice(
    tmp_path: Path,
) -> None:
    url = await database(tmp_path)
    gate = asyncio.Event()
    async with Backend(Settings(database_url=url), agents=[three_calls([], gate)]) as first:
        await first.start_run(ANONYMOUS, body("asks"))
        await parked(first, *KEY)
    async with Backend(Settings(database_url=url)) as keeper:  # no process holds the run
        assert await keeper.store.record_tool_result(*KEY, "call-a", "sun", False)
    async with Backend(Settings(database_url=url), agents=[three_calls([], gate)]) as second:
        run = await continued(second)
        with pytest.raises(ConflictError) as again:
            await second.submit_tool_result(ANONYMOUS, "r1", "call-a", {"content": "rain"})
        assert again.value.code == "TOOL_RESULT_ALREADY_SUBMITTED"
        gate.set()
        for call in ("call-b", "call-c"):
            await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
        events = await events_of(run)
    assert [(e["toolCallId"], e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"
            ] == [("call-a", "sun"), ("call-b", "call-b"), ("call-c", "call-c")]


async def test_a_run_parked_in_its_model_step_is_parked_again_at_a_point_with_nothing_open(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Its step is finished first; the point taken there says what it waits on (each call
    by name, none of its steps open), in the new epoch, before anyone posts."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')), text("Sunny."))
    url = await database(tmp_path)
    run = {**body("planner"), "forwardedProps": {"agentId": "planner"}}
    async with Backend(Settings(database_url=url),
                       agents=[model_agent(fake_openai.base_url)]) as first:
        await first.start_run(ANONYMOUS, run)
        await parked(first, *KEY)
        before = await first.store.load_checkpoint(*KEY)
    assert before is not None and before.point["steps"] == [[None, "model-request-1"]]
    async with Backend(Settings(database_url=url),
                       agents=[model_agent(fake_openai.base_url)]) as second:
        again = await continued(second)
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while (point := await second.store.load_checkpoint(*KEY)) is None or (
                point.epoch != 1 or point.point["steps"]
            ):
                await asyncio.sleep(0.02)
        assert point.phase == "parked"
        assert point.point["pending"] == [
            {**c, "at": point.point["pending"][0]["at"]} for c in before.point["pending"]]
        assert [c["name"] for c in point.point["pending"]] == ["get_weather"]
        call = before.point["pending"][0]["id"]
        await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": "21"})
        assert (await events_of(again))[-1]["type"] == "RUN_FINISHED"


async def test_a_run_re_executed_more_often_than_allowed_is_lost_and_says_why(
    tmp_path: Path,
) -> None:
    url = await database(tmp_path)
    settings = Settings(database_url=url, drain_seconds=0.1, max_takeovers=0)
    async with Backend(settings, agents=[stepping(asyncio.Event(), wait_at_point=False)]
                       ) as first:
        run = await first.start_run(ANONYMOUS, body("steps"))
        await events_of(run, "STEP_STARTED", times=2)
    opened = asyncio.Event()
    opened.set()
    async with Backend(settings, agents=[stepping(opened, wait_at_point=False)]) as second:
        events = await events_of(await continued(second))
    assert (events[-1]["type"], events[-1]["code"], events[-1]["message"]) == (
        "RUN_ERROR", "RUN_LOST", "The run was lost too many times.")
