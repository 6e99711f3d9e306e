"""A durable run let go before its first point (in one test process, on a real SQLite file):
its start is its point, so the next Backend goes on from the run's input, counting no
takeover (nothing it produced is re-executed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from tests.runtime.test_revival import KEY, body, continued, database, events_of

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings


def waits_first(gate: asyncio.Event, starts: list[int]) -> FunctionAgent:
    async def agent(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        starts.append(len(ctx.messages))
        await gate.wait()
        yield "answer"

    return FunctionAgent(agent, id="waits", durable=True)


async def test_a_run_let_go_before_its_first_point_goes_on_from_its_start(
    tmp_path: Path,
) -> None:
    url = await database(tmp_path)
    starts: list[int] = []
    settings = Settings(database_url=url, drain_seconds=0.1, max_takeovers=0)
    async with Backend(settings, agents=[waits_first(asyncio.Event(), starts)]) as first:
        run = await first.start_run(ANONYMOUS, body("waits"))
        head = await events_of(run, "RUN_STARTED")
        await asyncio.sleep(0.2)  # the start write, with the checkpoint's first row
    assert run.log.closed and [e["type"] for e in head] == ["RUN_STARTED"]
    async with Backend(Settings(database_url=url)) as keeper:
        checkpoint = await keeper.store.load_checkpoint(*KEY)
    assert checkpoint is not None
    assert (checkpoint.phase, checkpoint.epoch, checkpoint.holder) == ("running", 0, "")
    assert checkpoint.last_seq == 1 and checkpoint.point["clean"] is True
    assert checkpoint.point["messages"] == [] and checkpoint.point["takeovers"] == 0
    opened = asyncio.Event()
    opened.set()
    async with Backend(settings, agents=[waits_first(opened, starts)]) as second:
        again = await continued(second)
        events = await events_of(again)
        stored = await second.store.list_messages("t1")
    assert events[-1]["type"] == "RUN_FINISHED"  # not lost: max_takeovers is 0
    assert starts == [1, 1]  # both times from the user's message alone
    assert [m.get("content") for m in stored] == ["weather?", "answer"]
