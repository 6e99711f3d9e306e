"""Durable points and continuing a run in a new Backend (in one test process, on a real
SQLite file or PostgreSQL): a run parked on a frontend tool outlives its Backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Executable, update
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.cluster.replicas import a_behind_a_relay, redis_server
from tests.durable.streams import Stream, assert_valid_stream, follow, number, parked
from tests.helpers import CollectingSink

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.model import ModelAgent
from iobridge.agents.outputs import AgentOutput, StepFinished, StepStarted
from iobridge.agents.providers import build_model
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import (
    ConflictError,
    EventsNotRetained,
    InputError,
    NotFoundError,
    PayloadTooLarge,
    TooManyRequests,
)
from iobridge.runtime.checkpoints import FORMAT
from iobridge.runtime.cluster import RemoteRun
from iobridge.runtime.run import Run
from iobridge.store import records
from iobridge.store.migrate import upgrade
from iobridge.store.sqlalchemy_store import make_engine

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


def model_agent(base_url: str) -> ModelAgent:
    model = build_model("openai:gpt-4o", base_url=base_url, environ={"K": "sk-x"},
                        api_key_env="K")
    return ModelAgent(id="planner", model=model, model_settings={"max_retries": 0})


def body(thread: str = "t1", run: str = "r1", text: str = "weather in Oslo?") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "tools": [WEATHER], "context": [], "state": {},
            "messages": [{"id": f"u-{run}", "role": "user", "content": text}],
            "forwardedProps": {"agentId": "planner"}}


@contextlib.asynccontextmanager
async def backend(url: str, fake: FakeOpenAI, **settings: Any) -> AsyncIterator[Backend]:
    async with Backend(Settings(database_url=url, **settings),
                       agents=[model_agent(fake.base_url)]) as opened:
        yield opened


async def parked_run(b: Backend, run: dict[str, Any] | None = None) -> Stream:
    """Start ``run`` (``body()``) and wait until it is parked on its tool call: what a client
    had of it, up to its TOOL_CALL_END."""
    run = run or body()
    await b.start_run(ANONYMOUS, run)
    head = await follow(b, run["runId"], until="TOOL_CALL_END")
    await parked(b, "anonymous", run["runId"])
    return head


# What a client coming back to a run that got past its answer meanwhile gets: its open step
# closed, the whole conversation, then the run's end (concluded: caught up from the thread), or
# the shared state and the run's end (the durable point after its answering model step). A test
# that resumes right after answering a tool accepts it: the run may get there first on a loaded
# machine.
CONCLUDED = ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
PAST_THE_ANSWER = ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]


def answered(tail: Stream, thread: list[dict[str, Any]], answer: str, *,
             step_open: bool = True) -> bool:
    """Check that a client which resumed right after answering a tool got ``answer``: as text
    events, or, when the run got past it before the client was back, in the snapshot it was
    caught up with (``CONCLUDED`` or ``PAST_THE_ANSWER``, without the step's end if it had
    none open: the stored ``thread``, no text). Says whether it came in the snapshot."""
    kinds = [e["type"] for _, e in tail]
    said = "".join(e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT")
    skip = 0 if step_open else 1
    if kinds in (CONCLUDED[skip:], PAST_THE_ANSWER[skip:]):
        assert tail[1 - skip][1]["messages"] == thread and not said
        assert thread[-1]["content"] == answer
        return True
    assert said == answer
    return False


async def until(run: Run, kind: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
    """The run's events after ``after`` (or its log's first, a continued run's) up to the
    first of ``kind`` (or the log's end)."""
    seen: list[tuple[int, dict[str, Any]]] = []
    async with asyncio.timeout(20):
        async for batch in run.log.follow(max(after, run.log.first_seq - 1)):
            for seq, data in batch:
                seen.append((seq, orjson.loads(data)))
                if seen[-1][1]["type"] == kind:
                    return seen
    return seen


async def dropped(b: Backend, run_id: str) -> None:
    """The run's checkpoint is dropped soon after its end is stored (not waited for)."""
    async with asyncio.timeout(5):
        while await b.store.load_checkpoint("anonymous", run_id) is not None:
            await asyncio.sleep(0.02)


async def stored(b: Backend, thread: str = "t1") -> list[dict[str, Any]]:
    return await b.store.list_messages(thread)


async def test_a_parked_run_goes_on_in_the_next_backend_and_stores_its_exchange_once(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Let me check."),
                     text("Sunny in ", "Oslo."))
    async with backend(database_url, fake_openai) as first:
        run = await first.start_run(ANONYMOUS, body())
        head = await follow(first, "r1", until="TOOL_CALL_END")
        await asyncio.sleep(0.2)  # the park point's write
        checkpoint = await first.store.load_checkpoint("anonymous", "r1")
        assert checkpoint is not None and checkpoint.phase == "parked"
        call = head[-1][1]["toolCallId"]  # the bridge's id (the provider's stays with it)
        # Parked in its model step: the point says so (the step is finished first by the
        # process that continues the run).
        assert checkpoint.point["pending"] == [
            {"id": call, "name": "get_weather", "at": number(head[-1][0])}]
        assert checkpoint.point["steps"] == [[None, "model-request-1"]]
        assert checkpoint.last_seq == number(head[-1][0])
        # The id of TOOL_CALL_END says what the client has open: the step, and the call.
        assert head[-1][0].endswith(f"!p:{call}") and "~s::model-request-1" in head[-1][0]
    # The first Backend is gone: its run stopped at the point, no terminal event, nothing
    # more stored than the user message.
    assert run.log.closed and run.log.last_seq == checkpoint.last_seq
    async with backend(database_url, fake_openai) as second:
        assert [m["role"] for m in await stored(second)] == ["user"]
        again = second.get_run(ANONYMOUS, "r1")
        assert again.ids is not None and again.ids.epoch == 1
        await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"t":21}'})
        with pytest.raises(ConflictError):
            await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": "again"})
        tail = await follow(second, "r1", after=head[-1][0], until="RUN_FINISHED")
        assert_valid_stream(head + tail, thread_id="t1", run_id="r1")
        messages = await stored(second)
        in_snapshot = answered(tail, messages, "Sunny in Oslo.")
        if not in_snapshot:
            # Caught up: the client's step closed, the conversation at the run's last point,
            # then the run in epoch 1 (ids above 2^32) from there: the park point (the result
            # comes as an event), or the point after the result, if the run got there first.
            kinds = [e["type"] for _, e in tail]
            assert kinds[:3] == ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
            assert kinds[-1] == "RUN_FINISHED" and number(tail[3][0]) > 1 << 32
            roles = [m["role"] for m in tail[1][1]["messages"]]
            if roles == ["user", "assistant"]:
                assert kinds[3] == "TOOL_CALL_RESULT"
                # (its first event, the step's end at the point, is not sent again to a
                # client that the catch-up closed it for)
                assert number(tail[3][0]) == (1 << 32) + checkpoint.last_seq + 2
            else:
                assert roles == ["user", "assistant", "tool"]
                assert "TOOL_CALL_RESULT" not in kinds
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1]["toolCalls"][0]["id"] == call
        assert messages[2]["content"] == '{"t":21}'
        assert messages[3]["content"] == "Sunny in Oslo."
        await dropped(second, "r1")
        if not in_snapshot:
            # A client that resumes with the new epoch's ids goes on plainly.
            rest = await follow(second, "r1", after=tail[3][0])
            assert [e for _, e in rest] == [e for _, e in tail[4:]]
    # The model was asked twice: the call, then the answer with the tool's result.
    assert fake_openai.requests[1]["messages"][-1]["role"] == "tool"
    assert len(fake_openai.requests) == 2


async def test_stored_runs_a_new_backend_cannot_continue_are_left_and_the_others_go_on(
    database_url: str, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """At start a single process continues every stored run it can. One whose checkpoint
    another iobridge version wrote, or whose agent is gone, is left as it is (logged, and
    answered as a missing run), and the runs after it are still continued."""

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield f"got {(await ctx.call_tool('get_weather', {})).content}"

    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')),
                     calls(("c2", "get_weather", '{"city":"Rome"}')))
    gone = FunctionAgent(asks, id="gone", durable=True)
    agents = [model_agent(fake_openai.base_url), gone]
    async with Backend(Settings(database_url=database_url), agents=agents) as first:
        for run_id, agent in (("r1", "planner"), ("r2", "gone"), ("r3", "planner")):
            await first.start_run(ANONYMOUS, {**body(thread=f"t-{run_id}", run=run_id),
                                              "forwardedProps": {"agentId": agent}})
            await parked(first, "anonymous", run_id)
    older = orjson.dumps({"v": FORMAT - 1}).decode()
    # r1's checkpoint as an older version wrote it.
    await _execute(database_url, update(records.checkpoints).where(
        records.checkpoints.c.run_id == "r1").values(base=older))
    with caplog.at_level(logging.WARNING, logger="iobridge"):
        async with backend(database_url, fake_openai) as second:
            continued = second.get_run(ANONYMOUS, "r3")
            assert continued.ids is not None and continued.ids.epoch == 1
            for run_id in ("r1", "r2"):
                with pytest.raises(NotFoundError):
                    second.get_run(ANONYMOUS, run_id)
                # Left as they were: a later version, or the agent back, can continue them.
                assert await second.store.load_checkpoint("anonymous", run_id) is not None
            with pytest.raises(NotFoundError) as missing:
                await second.find_run(ANONYMOUS, "r1")
            assert (missing.value.code, missing.value.message) == ("RUN_NOT_FOUND",
                                                                   "unknown run")
    # Warnings and errors only: an earlier test may have left iobridge's loggers at INFO.
    said = sorted((r.getMessage(), r.levelname) for r in caplog.records
                  if r.levelno >= logging.WARNING and r.getMessage().startswith("run r"))
    version = ("run r1: its checkpoint is of another iobridge version; not continued", "ERROR")
    assert said == sorted([
        version, version,  # at start, and when it was asked for
        ("run r1 could not be continued (NotFoundError: unknown run)", "WARNING"),
        ("run r2 could not be continued (NotFoundError: unknown agent 'gone')", "WARNING"),
    ])


async def _execute(database_url: str, statement: Executable) -> None:
    """One statement on the database, with the engine iobridge makes for its URL."""
    engine = make_engine(database_url)
    if isinstance(engine, AsyncEngine):
        async with engine.begin() as connection:
            await connection.execute(statement)
        await engine.dispose()
    else:
        with engine.begin() as sync_connection:
            sync_connection.execute(statement)
        engine.dispose()


async def test_a_follower_here_of_a_run_let_go_at_stop_ends_without_a_terminal_event(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    """A process that stops lets its durable runs go at their points and continues none of
    them itself: its own followers' streams end there, with no terminal event (their
    clients resume where the run goes on)."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')))
    sink = CollectingSink()
    async with backend(database_url, fake_openai) as first:
        run = await first.start_run(ANONYMOUS, body())
        follower = asyncio.create_task(first.follow(run, sink, detach_grace=3600))
        await parked(first, "anonymous", "r1")
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        await follower
    kinds = [orjson.loads(d)["type"] for _, d in sink.events]
    assert sink.ending == "end" and kinds[0] == "RUN_STARTED"
    assert kinds[-1] == "TOOL_CALL_END" and run.log.closed
    async with backend(database_url, fake_openai) as second:  # where the run goes on
        assert second.get_run(ANONYMOUS, "r1").ids is not None


async def test_a_result_posted_to_a_stored_run_continues_it_and_is_never_asked_again(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')), text("Done."))
    async with backend(database_url, fake_openai) as first:
        run = await first.start_run(ANONYMOUS, body())
        call = (await until(run, "TOOL_CALL_END"))[-1][1]["toolCallId"]
        await asyncio.sleep(0.2)
        first.runtime.suspend_durable()
        await asyncio.sleep(0.1)
        assert run.done
        # No process holds the run now: the result is stored, then the run goes on here.
        await first.submit_tool_result(ANONYMOUS, "r1", call, {"content": "21"})
        with pytest.raises(ConflictError):
            await first.submit_tool_result(ANONYMOUS, "r1", call, {"content": "22"})
        with pytest.raises(NotFoundError):
            await first.submit_tool_result(ANONYMOUS, "r1", "nope", {"content": "22"})
        again = first.get_run(ANONYMOUS, "r1")
        assert again is not run
        assert (await until(again, "RUN_FINISHED"))[-1][1]["type"] == "RUN_FINISHED"
        assert [m["role"] for m in await stored(first)] == ["user", "assistant", "tool",
                                                            "assistant"]


async def test_a_stored_run_is_continued_only_within_the_admission_limits(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    """Auth mode none counts runs per resourceId: a stored run of resource ``default`` is
    refused while another run of it holds the one slot, and nothing of the post is kept
    (sent again once the slot is free, it continues the run)."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')))
    async with backend(database_url, fake_openai, max_active_runs_per_principal=1) as b:
        run = await b.start_run(ANONYMOUS, body())
        call = (await until(run, "TOOL_CALL_END"))[-1][1]["toolCallId"]
        await asyncio.sleep(0.2)
        b.runtime.suspend_durable()
        await asyncio.sleep(0.1)
        assert run.done
        fake_openai.push(calls(("c2", "get_weather", '{"city":"Bergen"}')))
        other = await b.start_run(ANONYMOUS, body(thread="t2", run="r2"))
        await until(other, "TOOL_CALL_END")
        for attempt in (b.submit_tool_result(ANONYMOUS, "r1", call, {"content": "21"}),
                        b.cancel_run(ANONYMOUS, "r1")):
            with pytest.raises(TooManyRequests) as refused:
                await attempt
            assert refused.value.code == "TOO_MANY_RUNS"
        checkpoint = await b.store.load_checkpoint("anonymous", "r1")
        assert checkpoint is not None and checkpoint.results == {}
        assert b.runtime.active_runs == 1
        b.runtime.cancel(other)
        await until(other, "RUN_FINISHED")
        async with asyncio.timeout(5):
            while b.runtime.active_runs:
                await asyncio.sleep(0.02)
        fake_openai.push(text("Done."))
        await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": "21"})
        again = b.get_run(ANONYMOUS, "r1")
        assert (await until(again, "RUN_FINISHED"))[-1][1]["type"] == "RUN_FINISHED"
        assert [m.get("content") for m in await stored(b) if m["role"] == "tool"] == ["21"]


async def test_cancel_of_a_stored_run_finishes_it_cancelled_with_the_call_closed(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')))
    async with backend(database_url, fake_openai) as first:
        run = await first.start_run(ANONYMOUS, body())
        await until(run, "TOOL_CALL_END")
        await asyncio.sleep(0.2)
    async with backend(database_url, fake_openai) as second:
        assert await second.cancel_run(ANONYMOUS, "r1")
        again = second.get_run(ANONYMOUS, "r1")
        last = (await until(again, "RUN_FINISHED"))[-1][1]
        assert last["outcome"] == {"type": "cancelled"}
        messages = await stored(second)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
        assert "cancelled" in messages[2]["content"]


async def test_a_checkpoint_over_its_bound_refuses_the_run_or_ends_it(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    async with backend(database_url, fake_openai, max_checkpoint_bytes=1024) as small:
        # The user's messages are stored with the start write, not copied into the
        # checkpoint: what counts at the start is the run's input besides them.
        with pytest.raises(PayloadTooLarge) as refused:
            await small.start_run(ANONYMOUS, {**body(), "context": [
                {"description": "notes", "value": "x" * 2000}]})
        assert refused.value.code == "CHECKPOINT_TOO_LARGE"
        # Nothing of the refused run was stored, and its thread is free.
        assert await stored(small) == []
        fake_openai.push(text("y" * 1500))
        run = await small.start_run(ANONYMOUS, body(run="r2"))
        last = (await until(run, "RUN_ERROR"))[-1][1]
        assert last["code"] == "CHECKPOINT_TOO_LARGE"
        await dropped(small, "r2")
        # What the client saw whole is stored, as for any RUN_ERROR.
        assert [m["role"] for m in await stored(small)] == ["user", "assistant"]


def stepping_agent(gate: asyncio.Event) -> FunctionAgent:
    """A durable function agent of two steps that goes on from the messages it is given."""

    async def steps(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not any(m["role"] == "assistant" for m in ctx.messages):
            yield StepStarted(name="one")
            yield "first"
            yield StepFinished(name="one")
        yield StepStarted(name="two")
        await gate.wait()  # past the durable point: re-executed from "one" if stopped here
        yield "second"
        yield StepFinished(name="two")

    return FunctionAgent(steps, id="steps", durable=True)


@pytest.mark.parametrize("takeovers", [3, 0])
async def test_a_streaming_run_stopped_between_points_re_executes_from_the_last_one(
    tmp_path: Path, takeovers: int
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'steps.db'}"
    await upgrade(url)
    settings = Settings(database_url=url, drain_seconds=0.2, max_takeovers=takeovers)
    async with Backend(settings, agents=[stepping_agent(asyncio.Event())]) as first:
        run = await first.start_run(ANONYMOUS, {**body(), "forwardedProps": {"agentId": "steps"}})
        head = await follow(first, "r1", until="STEP_STARTED")
        head += await follow(first, "r1", after=head[-1][0], until="STEP_STARTED")
        await asyncio.sleep(0.2)
        await first.shutdown()  # the run waits in step "two": suspended, "one" is its point
    assert [e["type"] for _, e in await until(run, "RUN_FINISHED", number(head[-1][0]))] == []
    opened = asyncio.Event()
    opened.set()
    async with Backend(settings, agents=[stepping_agent(opened)]) as second:
        tail = await follow(second, "r1", after=head[-1][0], until="RUN_FINISHED")
        assert_valid_stream(head + tail)
        if takeovers == 0:
            assert tail[-1][1]["type"] == "RUN_ERROR"
            assert tail[-1][1]["code"] == "RUN_LOST"
            assert [m["role"] for m in await stored(second)] == ["user", "assistant"]
            return
        kinds = [e["type"] for _, e in tail]
        # Caught up at the run's last durable point (the second backend continued it at
        # start: it may be past step "two" already, or done), then the rest.
        # Step "two", which the client had open, is closed first.
        assert kinds[:3] == ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"] \
            or kinds == CONCLUDED
        assert kinds[-1] == "RUN_FINISHED"
        shown = [m.get("content") for m in tail[1][1]["messages"]] + [
            e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert shown[-2:] == ["first", "second"]
        messages = await stored(second)
        assert [(m["role"], m.get("content")) for m in messages] == [
            ("user", "weather in Oslo?"), ("assistant", "first"), ("assistant", "second")]


def gated_steps(gate: asyncio.Event) -> FunctionAgent:
    """A durable agent of two steps whose first waits for ``gate`` before it finishes."""

    async def steps(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not any(m["role"] == "assistant" for m in ctx.messages):
            yield StepStarted(name="one")
            yield "first"
            await gate.wait()
            yield StepFinished(name="one")  # the durable point
        yield StepStarted(name="two")
        yield "second"
        yield StepFinished(name="two")

    return FunctionAgent(steps, id="steps", durable=True)


def asking_plain() -> FunctionAgent:
    """An agent that is not durable and waits on a frontend tool."""

    async def plain(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        got = await ctx.call_tool("get_weather", {"city": "Oslo"})
        yield f"plain got {got.content}"

    return FunctionAgent(plain, id="plain")


async def test_once_shutdown_begins_a_durable_run_stops_at_its_next_point_and_goes_on_next(
    tmp_path: Path,
) -> None:
    """``suspend_durable`` (the start of shutdown): a durable run stops at its next durable
    point (not after it), whatever runs beside it; a run that is not durable goes on, even
    one waiting on a frontend call; the next backend continues the durable one from that
    point."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'points.db'}"
    await upgrade(url)
    settings = Settings(database_url=url, drain_seconds=5)
    gate = asyncio.Event()
    async with Backend(settings, agents=[gated_steps(gate), asking_plain()]) as first:
        # The plain run first: the durable one must be found past it.
        beside = await first.start_run(ANONYMOUS, {**body(thread="t0", run="r0"),
                                                   "forwardedProps": {"agentId": "plain"}})
        run = await first.start_run(ANONYMOUS, {**body(), "forwardedProps": {"agentId": "steps"}})
        head = await follow(first, "r1", until="TEXT_MESSAGE_CONTENT")
        [call] = [e["toolCallId"] for _, e in await until(beside, "TOOL_CALL_END")
                  if e["type"] == "TOOL_CALL_START"]
        first.runtime.suspend_durable()
        gate.set()
        await first.submit_tool_result(ANONYMOUS, "r0", call, {"content": "21"})
        rest = await until(beside, "RUN_FINISHED")
        assert rest[-1][1]["type"] == "RUN_FINISHED" and "plain got 21" in str(rest)
        shown = await until(run, "STEP_STARTED", number(head[-1][0]))
        # It stopped at the end of step "one": step "two" never began here.
        assert "STEP_STARTED" not in [e["type"] for _, e in shown]
        assert "second" not in str(shown)
        await first.shutdown()
    async with Backend(settings, agents=[gated_steps(gate), asking_plain()]) as second:
        tail = await follow(second, "r1", after=head[-1][0], until="RUN_FINISHED")
        assert_valid_stream(head + tail)
        assert tail[-1][1]["type"] == "RUN_FINISHED"
        # Caught up (a snapshot: the second backend may have finished it already), "second"
        # once, after "first".
        [snapshot] = [e for _, e in tail if e["type"] == "MESSAGES_SNAPSHOT"]
        shown = [m.get("content") for m in snapshot["messages"]] + [
            e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert [c for c in shown if c in ("first", "second")] == ["first", "second"]
        assert [(m["role"], m.get("content")) for m in await stored(second)] == [
            ("user", "weather in Oslo?"), ("assistant", "first"), ("assistant", "second")]


async def test_a_durable_run_rolled_back_by_a_newer_run_leaves_no_checkpoint(
    tmp_path: Path,
) -> None:
    """``rollback``: the run that held the thread is undone, and so is its checkpoint (a
    next process must not continue a run that was rolled back)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'rollback.db'}"
    await upgrade(url)
    gate = asyncio.Event()
    async with Backend(Settings(database_url=url), agents=[gated_steps(gate)]) as b:
        steps = {"agentId": "steps"}
        held = await b.start_run(ANONYMOUS, {**body(), "forwardedProps": steps})
        await until(held, "TEXT_MESSAGE_CONTENT")
        async with asyncio.timeout(5):  # the start write (with the checkpoint) is not waited for
            while await b.store.load_checkpoint("anonymous", "r1") is None:
                await asyncio.sleep(0.02)
        newer = await b.start_run(ANONYMOUS, {**body(run="r2", text="no, this"), "forwardedProps": {
            **steps, "multitaskStrategy": "rollback"}})
        gate.set()
        assert (await until(held, "RUN_FINISHED"))[-1][1]["outcome"] == {"type": "cancelled"}
        await until(newer, "RUN_FINISHED")
        await dropped(b, "r1")
        await dropped(b, "r2")
        assert [m.get("content") for m in await stored(b)] == ["no, this", "first", "second"]


async def test_a_function_agent_without_durable_keeps_server_shutdown(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'plain.db'}"
    await upgrade(url)
    agent = stepping_agent(asyncio.Event())
    agent.durable = False
    async with Backend(Settings(database_url=url, drain_seconds=0.1), agents=[agent]) as b:
        run = await b.start_run(ANONYMOUS, {**body(), "forwardedProps": {"agentId": "steps"}})
        await until(run, "STEP_FINISHED")
        await dropped(b, "r1")
        await b.shutdown()
        assert (await until(run, "RUN_ERROR"))[-1][1]["code"] == "SERVER_SHUTDOWN"


async def test_a_result_posted_to_a_live_durable_run_is_stored_once_before_it_is_used(
    database_url: str,
) -> None:
    gate = asyncio.Event()
    seen: list[str] = []

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        seen.append((await ctx.call_tool("get_weather", {"city": "Oslo"})).content)
        await gate.wait()
        yield "noted"

    agent = FunctionAgent(asks, id="asks", durable=True)
    async with Backend(Settings(database_url=database_url), agents=[agent]) as b:
        run = await b.start_run(ANONYMOUS, {**body(), "forwardedProps": {"agentId": "asks"}})
        assert run.durable
        call = (await until(run, "TOOL_CALL_END"))[-1][1]["toolCallId"]
        await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": "sunny"})
        async with asyncio.timeout(10):
            while not seen:
                await asyncio.sleep(0.01)
        checkpoint = await b.store.load_checkpoint("anonymous", "r1")
        assert checkpoint is not None and checkpoint.results == {call: ("sunny", False)}
        with pytest.raises(ConflictError):
            await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": "rain"})
        gate.set()
        assert (await until(run, "RUN_FINISHED"))[-1][1]["type"] == "RUN_FINISHED"
    assert seen == ["sunny"]


class _TaggedSink(CollectingSink):
    """A ``CollectingSink`` that keeps each event's open-state tag as well."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__(stop_after)
        self.tags: list[bytes | None] = []

    async def send(
        self, events: list[tuple[int, bytes]], *, last: bool, tags: list[bytes] | None = None
    ) -> bool:
        self.tags += tags if tags is not None else [None] * len(events)
        return await super().send(events, last=last, tags=tags)


async def test_a_continued_run_followed_from_an_earlier_epoch_is_caught_up_or_refused(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    """A follower of the run's first holder comes to the process that continued it: from
    the start (nothing, or nothing open) it gets the run's start and the conversation at the
    point; with an N-PAMP cursor (the number alone) it is told the events are gone; with a
    cursor of a later epoch than the run's it is refused."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Let me check."),
                     text("Sunny."))
    async with backend(database_url, fake_openai) as first:
        head = await parked_run(first, {**body(), "parentRunId": "p0",
                                        "state": {"city": "Oslo"}})
    call = head[-1][1]["toolCallId"]
    async with backend(database_url, fake_openai) as second:
        again = second.get_run(ANONYMOUS, "r1")
        assert again.ids is not None and again.ids.epoch == 1
        for start in (None, "0"):
            caught = await follow(second, "r1", after=start, until="STATE_SNAPSHOT")
            kinds = [e for _, e in caught]
            assert [e["type"] for e in kinds] == ["RUN_STARTED", "MESSAGES_SNAPSHOT",
                                                  "STATE_SNAPSHOT"]
            assert (kinds[0]["threadId"], kinds[0]["runId"], kinds[0]["parentRunId"]) == (
                "t1", "r1", "p0")
            snapshot = kinds[1]["messages"]
            assert [m["role"] for m in snapshot] == ["user", "assistant"]
            assert snapshot[0]["id"] == "u-r1" and snapshot[1]["toolCalls"][0]["id"] == call
            assert kinds[2]["snapshot"] == {"city": "Oslo"}
        # Backend.follow with no cursor at all: the same catch-up, in one batch not the last.
        fresh = _TaggedSink(stop_after=1)
        await second.follow(again, fresh, detach_grace=3600)
        assert [orjson.loads(d)["type"] for _, d in fresh.events] == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
        assert fresh.lasts == [False] and fresh.ending is None  # it stopped taking them
        # From the client's TOOL_CALL_END: its step is closed, its call stays open.
        tagged = _TaggedSink(stop_after=1)
        resumed, cursor = await second.resume(ANONYMOUS, "r1", head[-1][0])
        await second.follow(resumed, tagged, after=cursor, detach_grace=3600)
        assert tagged.events[0][0] == number(head[-1][0]) + 1
        assert [orjson.loads(d)["type"] for _, d in tagged.events] == [
            "STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
        assert tagged.tags == [f"~p:{call}".encode()] * 3
        # An N-PAMP cursor says nothing of what is open: nothing to catch up from.
        resumed, cursor = await second.resume(ANONYMOUS, "r1", number(head[-1][0]))
        cut = CollectingSink()
        await second.follow(resumed, cut, after=cursor, detach_grace=3600)
        assert cut.ending == "cut_off" and cut.events == []
        assert isinstance(cut.error, EventsNotRetained)
        assert cut.error.first_retained == again.log.first_seq
        with pytest.raises(InputError) as later:
            await second.follow(again, CollectingSink(), after=(2 << 32) + 1)
        assert later.value.code == "INVALID_CURSOR"
        await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"t":21}'})
        assert (await until(again, "RUN_FINISHED"))[-1][1]["type"] == "RUN_FINISHED"
        # Once the run concluded, the conversation is the thread's: caught up from it.
        ended = await follow(second, "r1")
        assert [e["type"] for _, e in ended] == ["RUN_STARTED", "MESSAGES_SNAPSHOT",
                                                 "RUN_FINISHED"]
        assert ended[1][1]["messages"] == await stored(second)
        assert [m["role"] for m in ended[1][1]["messages"]] == [
            "user", "assistant", "tool", "assistant"]


async def test_a_continued_run_has_its_own_agent_and_counts_against_its_caller(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    """The process that continues a parked run runs the run's agent (not the default one),
    and counts the run against the limits of the caller it started for."""

    async def default(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "the default agent"

    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')), text("Sunny."))
    agents = [FunctionAgent(default, id="default"), model_agent(fake_openai.base_url)]
    async with Backend(Settings(database_url=database_url), agents=agents) as first:
        run = await first.start_run(ANONYMOUS, body())
        call = (await until(run, "TOOL_CALL_END"))[-1][1]["toolCallId"]
        await parked(first, "anonymous", "r1")
    settings = Settings(database_url=database_url, max_active_runs_per_principal=1)
    async with Backend(settings, agents=agents) as second:
        again = second.get_run(ANONYMOUS, "r1")
        assert again.agent_id == "planner"
        other = {**body(thread="t2", run="r2"), "forwardedProps": {"agentId": "default"}}
        with pytest.raises(TooManyRequests):
            await second.start_run(ANONYMOUS, other)
        await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"t":21}'})
        tail = await until(again, "RUN_FINISHED")
        assert tail[-1][1]["type"] == "RUN_FINISHED"
        assert "".join(e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT") \
            == "Sunny."


@contextlib.asynccontextmanager
async def _weather_replicas(
    tmp_path: Path, fake: FakeOpenAI
) -> AsyncIterator[tuple[Settings, list[Agent]]]:
    """The settings of replicas on one SQLite file and one Redis, and their planner agent,
    whose model asks for the weather once, then answers."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'replicas.db'}"
    await upgrade(url)
    fake.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Let me check."),
              text("Sunny."))
    with redis_server(tmp_path) as redis_url:
        yield (Settings(database_url=url, redis_url=redis_url, redis_prefix="weather"),
               [model_agent(fake.base_url)])


async def test_a_follower_on_another_replica_is_caught_up_from_the_continued_run_s_point(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A run parked by a replica that stopped is continued by another (epoch 1); a client
    that had it up to its TOOL_CALL_END on the first comes back through a third replica: it
    is caught up from the point in the store (its step closed, its call still open), then
    follows the continued run to its end through the shared log; and once it concluded,
    from the thread."""
    async with _weather_replicas(tmp_path, fake_openai) as (settings, agents):
        async with Backend(settings, agents=agents) as first:
            head = await parked_run(first)
        call = head[-1][1]["toolCallId"]
        async with Backend(settings, agents=agents) as second, Backend(settings) as third:
            continued, _ = await second.resume(ANONYMOUS, "r1", None)
            assert isinstance(continued, Run) and continued.ids is not None
            assert continued.ids.epoch == 1
            remote, cursor = await third.resume(ANONYMOUS, "r1", head[-1][0])
            assert isinstance(remote, RemoteRun) and remote.epoch == 1
            caught = _TaggedSink(stop_after=1)
            await third.follow(remote, caught, after=cursor, detach_grace=3600)
            assert [orjson.loads(d)["type"] for _, d in caught.events] == [
                "STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
            assert caught.tags == [f"~p:{call}".encode()] * 3
            snapshot = orjson.loads(caught.events[1][1])["messages"]
            assert [m["role"] for m in snapshot] == ["user", "assistant"]
            await third.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"t":21}'})
            tail = await follow(third, "r1", after=head[-1][0], until="RUN_FINISHED")
            assert_valid_stream(head + tail, thread_id="t1", run_id="r1")
            kinds = [e["type"] for _, e in tail]
            assert kinds[:2] == ["STEP_FINISHED", "MESSAGES_SNAPSHOT"]
            # The result reaches the client as an event, or in the snapshot of a later point.
            roles = [m["role"] for m in tail[1][1]["messages"]]
            assert ("TOOL_CALL_RESULT" in kinds) != ("tool" in roles)
            # So does the answer: as text events, or in that snapshot when the run had got
            # past it before the client was back.
            answered(tail, await stored(third), "Sunny.")
            # Once it concluded (its checkpoint dropped), the same client coming back through
            # the third replica is caught up from the thread, up to the run's end that the
            # second shares on request.
            await dropped(second, "r1")
            late = await follow(third, "r1", after=head[-1][0])
            assert [e["type"] for _, e in late] == [
                "STEP_FINISHED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
            assert number(late[0][0]) == number(head[-1][0]) + 1
            assert late[-1][0] == tail[-1][0]  # the run's own end, as numbered there
            assert late[1][1]["messages"] == await stored(third)


async def test_a_client_caught_up_while_the_run_concludes_gets_each_message_once(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """The run's end write (its messages stored, its checkpoint dropped) lands while a
    client is being caught up on another replica: the snapshot and the events after it
    hold each message once (the thread read after the point had them all, and the log after
    the point gave them again)."""
    async with _weather_replicas(tmp_path, fake_openai) as (settings, agents):
        async with Backend(settings, agents=agents) as first:
            head = await parked_run(first)
        call = head[-1][1]["toolCallId"]
        async with Backend(settings, agents=agents) as second, Backend(settings) as third:
            continued, _ = await second.resume(ANONYMOUS, "r1", None)
            assert isinstance(continued, Run)
            read = third.store.list_messages

            async def once_concluded(thread_id: str, *args: Any) -> list[dict[str, Any]]:
                # Each read of the thread waits for the run's end write first.
                await asyncio.wait_for(asyncio.shield(continued.task), 20)  # type: ignore[arg-type]
                return await read(thread_id, *args)

            third.store.list_messages = once_concluded  # type: ignore[method-assign]
            await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"t":21}'})
            tail = await follow(third, "r1", after=head[-1][0])
            third.store.list_messages = read  # type: ignore[method-assign]
            assert_valid_stream(head + tail, thread_id="t1", run_id="r1")
            [snapshot] = [e["messages"] for _, e in tail if e["type"] == "MESSAGES_SNAPSHOT"]
            ids = [m["id"] for m in snapshot]
            assert len(ids) == len(set(ids)) and ids == [m["id"] for m in await stored(third)]
            again = [e for _, e in tail if e.get("messageId") in ids
                     and e["type"] in ("TEXT_MESSAGE_START", "TOOL_CALL_RESULT")]
            assert again == []
            assert [e["type"] for _, e in tail][-1] == "RUN_FINISHED"


async def test_a_client_resuming_on_another_replica_gets_the_ids_the_run_s_own_gives(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A client that had a durable run up to its TOOL_CALL_END on A comes back through B,
    while A still holds the run: B reads the log through Redis, which carries no open
    state, and numbers each event with what the client has open from its cursor on; the
    ids are the ones a client resuming on A gets."""
    async with (
        _weather_replicas(tmp_path, fake_openai) as (settings, agents),
        Backend(settings, agents=agents) as a,
        Backend(settings, agents=agents) as b,
    ):
        head = await parked_run(a)
        remote, _ = await b.resume(ANONYMOUS, "r1", head[-1][0])
        assert isinstance(remote, RemoteRun) and remote.epoch == 0
        await b.submit_tool_result(ANONYMOUS, "r1", head[-1][1]["toolCallId"],
                                   {"content": '{"t":21}'})
        there = await follow(b, "r1", after=head[-1][0])
        here = await follow(a, "r1", after=head[-1][0])
    assert there == here
    assert [e["type"] for _, e in there][-1] == "RUN_FINISHED"
    # From the cursor the call is answered, and the model step stays open until its end.
    assert "~s::model-request-" in there[0][0] and "!p:" not in there[0][0]
    assert_valid_stream(head + there, thread_id="t1", run_id="r1")


async def test_a_client_resumed_on_a_peer_is_caught_up_from_its_cursor_when_the_owner_goes_silent(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A client that had a durable run up to its TOOL_CALL_END on A resumes through B and
    waits there, nothing new sent yet, when A is cut off from Redis: B continues the run
    (epoch 1) and the client is caught up from its own cursor (its step closed, its call
    still open), then gets the run to its end."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Let me check."),
                     text("Sunny."))
    async with a_behind_a_relay(tmp_path, "silent", model_agent(fake_openai.base_url)) as (
            a, b, relay):
        head = await parked_run(a)
        waiting = asyncio.create_task(follow(b, "r1", after=head[-1][0]))
        await asyncio.sleep(0.2)  # attached on B, nothing sent (not waited for otherwise)
        relay.freeze()  # A goes silent: its heartbeat stops
        async with asyncio.timeout(20):
            while b.runtime.find("anonymous", "r1") is None:
                await asyncio.sleep(0.02)
        await b.submit_tool_result(ANONYMOUS, "r1", head[-1][1]["toolCallId"],
                                   {"content": '{"t":21}'})
        tail = await waiting
    assert_valid_stream(head + tail, thread_id="t1", run_id="r1")
    kinds = [e["type"] for _, e in tail]
    assert kinds[:3] == ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert number(tail[0][0]) == number(head[-1][0]) + 1
    assert tail[0][0].endswith(f"~p:{head[-1][1]['toolCallId']}")
    assert kinds[-1] == "RUN_FINISHED" and number(tail[-1][0]) > 1 << 32
