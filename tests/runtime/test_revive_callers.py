"""Who continues a stored durable run in one process (in one test process, on a real SQLite
file): callers asking at once share one revival, a caller asking while it runs gets it, and a
continued run that another process took over meanwhile is not stored at its end."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import delete
from tests.durable.streams import parked
from tests.durable.test_durable_backend import _execute
from tests.runtime.test_revival import KEY, body, database, events_of, three_calls

from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import ConflictError
from iobridge.store import records
from iobridge.store.base import Checkpoint

CALLS = ("call-a", "call-b", "call-c")


async def stored_parked_run(url: str) -> Checkpoint:
    """A run of ``three_calls`` parked, its process gone; its checkpoint."""
    async with Backend(Settings(database_url=url), agents=[three_calls([], asyncio.Event())]
                       ) as first:
        await first.start_run(ANONYMOUS, body("asks"))
        await parked(first, *KEY)
        checkpoint = await first.store.load_checkpoint(*KEY)
    assert checkpoint is not None
    return checkpoint


async def test_callers_asking_at_once_share_one_revival(tmp_path: Path) -> None:
    url = await database(tmp_path)
    checkpoint = await stored_parked_run(url)
    gate = asyncio.Event()
    agent = three_calls([], gate)
    async with Backend(Settings(database_url=url)) as b:  # no agent: nothing continued at start
        runs = await asyncio.gather(*(b.runtime.revive(checkpoint, agent) for _ in range(3)))
        assert runs[0] is runs[1] is runs[2]
        assert await b.runtime.revive(checkpoint, agent) is runs[0]  # while it runs
        for call in CALLS:
            await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
        gate.set()
        assert (await events_of(runs[0]))[-1]["type"] == "RUN_FINISHED"
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while not runs[0].done:
                await asyncio.sleep(0.02)
        # Concluded: its old checkpoint continues nothing.
        with pytest.raises(ConflictError) as refused:
            await b.runtime.revive(checkpoint, agent)
        assert refused.value.code == "RUN_ALREADY_RUNNING"
        assert b.runtime.active_runs == 0
        said = [m.get("content") for m in await b.store.list_messages("t1")]
    assert said[-1] == "got 3"


@pytest.mark.parametrize("how", ["claimed", "dropped"])
async def test_a_continued_run_taken_over_again_is_not_stored_at_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Its checkpoint claimed by another process, or dropped (that process concluded it):
    its end write finds so, and stores nothing of this copy."""
    url = await database(tmp_path)
    checkpoint = await stored_parked_run(url)
    gate = asyncio.Event()
    agent = three_calls([], gate)
    with caplog.at_level(logging.WARNING, logger="iobridge"):
        async with Backend(Settings(database_url=url)) as b:
            run = await b.runtime.revive(checkpoint, agent)
            for call in CALLS:
                await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
            await events_of(run, "TOOL_CALL_RESULT", times=3)
            if how == "claimed":
                assert await b.store.claim_checkpoint(*KEY, 1, "elsewhere")
            else:
                await _execute(url, delete(records.checkpoints).where(
                    records.checkpoints.c.run_id == "r1"))
            gate.set()
            await events_of(run)
            async with asyncio.timeout(10):
                while not run.done:
                    await asyncio.sleep(0.02)
            roles = [m["role"] for m in await b.store.list_messages("t1")]
    assert roles == ["user"]
    assert "run r1 was taken over by another process: this copy of it is not stored" in [
        r.getMessage() for r in caplog.records]
