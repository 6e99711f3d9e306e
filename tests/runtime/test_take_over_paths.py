"""``Runtime.take_over`` and a durable run's posted results, on the paths that end in no
continuation (in one test process, on a real SQLite file): nothing stored, an agent that is
gone, a checkpoint of another version, a store that fails, a process that stops; and a
result another process stored first."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest
from sqlalchemy import text, update
from tests.durable.streams import parked
from tests.durable.test_durable_backend import _execute
from tests.runtime.test_revival import KEY, body, database, three_calls

from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import ConflictError
from iobridge.runtime.checkpoints import FORMAT
from iobridge.store import records


async def stored_run(url: str) -> None:
    """A parked run of ``three_calls`` whose process is gone."""
    async with Backend(Settings(database_url=url), agents=[three_calls([], asyncio.Event())]
                       ) as first:
        await first.start_run(ANONYMOUS, body("asks"))
        await parked(first, *KEY)


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.getMessage().startswith("run r1")]


async def test_a_run_no_process_can_continue_here_is_not_taken_over_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = await database(tmp_path)
    await stored_run(url)
    with caplog.at_level(logging.INFO, logger="iobridge"):
        async with Backend(Settings(database_url=url)) as b:  # its agent is not here
            caplog.clear()
            assert await b.runtime.take_over("anonymous", "nope") is None  # nothing stored
            assert await b.runtime.take_over(*KEY) is None
            assert said(caplog) == [
                ("INFO", "run r1 not taken over here (unknown agent 'asks')")]
            # Another version's checkpoint.
            await _execute(url, update(records.checkpoints).where(
                records.checkpoints.c.run_id == "r1").values(
                    base=orjson.dumps({"v": FORMAT + 1}).decode()))
            caplog.clear()
            b.runtime.find_agent = lambda _: three_calls([], asyncio.Event())
            assert await b.runtime.take_over(*KEY) is None
            assert said(caplog) == [("INFO", "run r1 not taken over here (r1)")]
            # A store that fails.
            await _execute(url, text(f"DROP TABLE {records.checkpoints.name}"))
            caplog.clear()
            assert await b.runtime.take_over(*KEY) is None
            [(level, message)] = said(caplog)
            assert level == "WARNING"
            assert message.startswith("run r1 could not be taken over (StoreUnavailable: ")
            assert not b.runtime.is_live(KEY)


async def test_a_stopping_process_takes_over_nothing(tmp_path: Path) -> None:
    url = await database(tmp_path)
    await stored_run(url)
    async with Backend(Settings(database_url=url)) as b:
        b.runtime.find_agent = lambda _: three_calls([], asyncio.Event())
        b.runtime.suspend_durable()
        assert await b.runtime.take_over(*KEY) is None
        assert not b.runtime.is_live(KEY)
        checkpoint = await b.store.load_checkpoint(*KEY)
        assert checkpoint is not None and checkpoint.epoch == 0


async def test_a_result_another_process_stored_first_is_refused_here(tmp_path: Path) -> None:
    url = await database(tmp_path)
    async with Backend(Settings(database_url=url), agents=[three_calls([], asyncio.Event())]
                       ) as b:
        await b.start_run(ANONYMOUS, body("asks"))
        await parked(b, *KEY)
        # As a process that took the run over would (the compare is on the store's row).
        assert await b.store.record_tool_result(*KEY, "call-a", "sun", False)
        with pytest.raises(ConflictError) as refused:
            await b.submit_tool_result(ANONYMOUS, "r1", "call-a", {"content": "rain"})
        assert (refused.value.code, refused.value.message) == (
            "TOOL_RESULT_ALREADY_SUBMITTED", "this tool call already has a result")
        checkpoint = await b.store.load_checkpoint(*KEY)
        assert checkpoint is not None and checkpoint.results == {"call-a": ("sun", False)}
