"""A durable run whose checkpoint changes under it (in one test process, on a real SQLite
file): taken over by another process, it stops here at its next point, without an end; gone
(another process continued it and concluded), it goes on, no longer durable, and is not
stored at its end (the other process stored its copy)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import delete
from tests.durable.test_durable_backend import _execute
from tests.runtime.test_revival import KEY, body, database, events_of

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StepFinished, StepStarted
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.store import records


async def pointed(b: Backend) -> None:
    """Until step "one"'s point is written (the run's checkpoint holds its message)."""
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        while (checkpoint := await b.store.load_checkpoint(*KEY)) is None or not (
            checkpoint.point["messages"]
        ):
            await asyncio.sleep(0.02)


def three_steps(*gates: asyncio.Event) -> FunctionAgent:
    """A durable agent of three steps; before steps two and three it waits for its gate (a
    durable point behind it each time)."""

    async def steps(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for name, gate in (("one", None), ("two", gates[0]), ("three", gates[1])):
            if gate is not None:
                await gate.wait()
            yield StepStarted(name=name)
            yield name
            yield StepFinished(name=name)

    return FunctionAgent(steps, id="steps", durable=True)


async def test_a_run_whose_checkpoint_another_process_took_stops_here_without_an_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = await database(tmp_path)
    gates = asyncio.Event(), asyncio.Event()
    with caplog.at_level(logging.INFO, logger="iobridge"):
        async with Backend(Settings(database_url=url), agents=[three_steps(*gates)]) as b:
            run = await b.start_run(ANONYMOUS, body("steps"))
            await events_of(run, "STEP_FINISHED")
            await pointed(b)
            assert await b.store.claim_checkpoint(*KEY, 0, "elsewhere")
            gates[0].set()  # step "two" ends: its point is refused (the epoch moved on)
            events = await events_of(run, "STEP_FINISHED", times=2)
            async with asyncio.timeout(10):
                while not run.done:
                    await asyncio.sleep(0.02)
            assert run.log.closed
            checkpoint = await b.store.load_checkpoint(*KEY)
            stored = await b.store.list_messages("t1")
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["TEXT_MESSAGE_END", "STEP_FINISHED"] and kinds.count("STEP_STARTED") == 2
    # The other process's: left to it, and nothing of the run stored here.
    assert checkpoint is not None and (checkpoint.epoch, checkpoint.holder) == (1, "elsewhere")
    assert [m["role"] for m in stored] == ["user"]
    said = [(r.getMessage(), r.levelname) for r in caplog.records
            if r.getMessage().startswith("run r1")]
    assert ("run r1 was taken over by another process", "WARNING") in said


async def test_a_run_whose_checkpoint_is_gone_goes_on_not_durable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = await database(tmp_path)
    gates = asyncio.Event(), asyncio.Event()
    with caplog.at_level(logging.INFO, logger="iobridge"):
        async with Backend(Settings(database_url=url), agents=[three_steps(*gates)]) as b:
            run = await b.start_run(ANONYMOUS, body("steps"))
            await events_of(run, "STEP_FINISHED")
            await pointed(b)
            await _execute(url, delete(records.checkpoints).where(
                records.checkpoints.c.run_id == "r1"))
            gates[0].set()  # step "two" ends: its point finds no row
            await events_of(run, "STEP_FINISHED", times=2)
            async with asyncio.timeout(10):  # until step "two"'s point was refused
                while not any("is gone" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.02)
            gates[1].set()
            events = await events_of(run)
            async with asyncio.timeout(10):
                while not run.done:
                    await asyncio.sleep(0.02)
            stored = await b.store.list_messages("t1")
            assert await b.store.load_checkpoint(*KEY) is None
    kinds = [e["type"] for e in events]
    assert kinds.count("STEP_FINISHED") == 3 and kinds[-1] == "STEP_FINISHED"
    assert run.log.closed and [m["role"] for m in stored] == ["user"]
    said = [(r.getMessage(), r.levelname) for r in caplog.records
            if r.getMessage().startswith("run r1")]
    assert said == [
        ("run r1: its checkpoint is gone; not durable", "WARNING"),
        ("run r1 was taken over by another process: this copy of it is not stored", "WARNING")]
