"""``Backend.follow``: the one follow loop SSE, N-PAMP STREAM and N-PAMP OPAQUE write through
(each with its own ``EventSink`` that only encodes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tests.helpers import CollectingSink, run_body

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import EventsNotRetained


def _backend(agent: Any, **settings: Any) -> Backend:
    return Backend(Settings(database_url="memory://", **settings), agents=[agent])


def _words(n: int, gate: asyncio.Event | None = None) -> FunctionAgent:
    async def words(ctx: Any) -> AsyncIterator[str]:
        if gate is not None:
            await gate.wait()
        for i in range(n):
            yield f"w{i} "
            await asyncio.sleep(0)

    return FunctionAgent(words, id="words")


async def test_a_local_run_ends_in_the_batch_that_holds_its_terminal_event() -> None:
    async with _backend(_words(3)) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="words"))
        sink = CollectingSink()
        await backend.follow(run, sink)
        assert sink.events == run.log.entries()
        assert sink.lasts[-1] and not any(sink.lasts[:-1])
        assert sink.ending is None  # ended by the last batch, not by a separate end


async def test_a_sink_that_stops_taking_the_stream_stops_following_and_detaches() -> None:
    gate = asyncio.Event()
    async with _backend(_words(50, gate)) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="words"))
        sink = CollectingSink(stop_after=1)
        await asyncio.wait_for(backend.follow(run, sink), 5)
        assert sink.lasts == [False] and sink.ending is None  # RUN_STARTED, then it stopped
        assert run.subscribers == 0
        await run.task  # with no follower left (grace 0) the run was cancelled
        assert run.stop_reason == "disconnected"
        assert len(run.log.entries()) > len(sink.events)


async def test_an_idle_run_asks_the_sink_for_keep_alives() -> None:
    gate = asyncio.Event()
    async with _backend(_words(1, gate)) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="words"))
        sink = CollectingSink()
        follower = asyncio.create_task(backend.follow(run, sink, idle=0.01))
        await asyncio.sleep(0.1)
        gate.set()
        await asyncio.wait_for(follower, 5)
        assert sink.keep_alives >= 2
        assert sink.lasts[-1]


async def test_a_follower_behind_the_replay_window_is_cut_off_without_the_terminal() -> None:
    async with _backend(_words(400), max_run_log_bytes=4096) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="words"))
        await run.task
        sink = CollectingSink()
        await backend.follow(run, sink, after=1)
        assert sink.ending == "cut_off" and sink.events == []
        assert isinstance(sink.error, EventsNotRetained)
        assert sink.error.first_retained == run.log.first_seq
        assert sink.error.code == "EVENTS_NOT_RETAINED" and sink.error.status == 410
