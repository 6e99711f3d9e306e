"""Group commit: concurrent writes share transactions; a bad write fails alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from iobridge.store.group_writer import GroupWriter
from iobridge.store.sqlalchemy_store import WRITE_OPTION, make_engine


async def test_concurrent_writes_commit_together_and_a_bad_one_fails_alone(
    tmp_path: Path,
) -> None:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path}/w.db")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
    commits: list[int] = []
    event.listen(engine.sync_engine, "commit", lambda conn: commits.append(1))
    writer = GroupWriter(engine.execution_options(**{WRITE_OPTION: True}), max_batch=64)

    def insert(key: int) -> object:
        async def job(conn: AsyncConnection) -> int:
            await conn.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": key})
            return key

        return job

    keys = [*range(40), 7]  # the second 7 violates the primary key
    results = await asyncio.gather(
        *(writer.submit(insert(k)) for k in keys), return_exceptions=True  # type: ignore[arg-type]
    )
    assert results[:40] == list(range(40))
    assert isinstance(results[40], IntegrityError)
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT k FROM t ORDER BY k"))).scalars().all()
    assert stored == list(range(40))
    # 41 writes: one failed batch, then one transaction per job, never 41 batches of one
    # when they were queued together.
    assert len(commits) <= 41
    commits.clear()
    await asyncio.gather(*(writer.submit(insert(k)) for k in range(100, 140)))  # type: ignore[arg-type]
    assert 1 <= len(commits) <= 3  # group commit: 40 queued writes in a few transactions
    await writer.close()
    await engine.dispose()


async def test_the_queue_is_bounded(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path}/w.db")
    gate = asyncio.Event()

    async def slow(conn: AsyncConnection) -> None:
        await gate.wait()

    writer = GroupWriter(engine, max_batch=1, max_queue=2)
    running = [asyncio.create_task(writer.submit(slow)) for _ in range(3)]
    await asyncio.sleep(0.05)  # one job runs, two wait in the queue
    extra = asyncio.create_task(writer.submit(slow))
    await asyncio.sleep(0.05)
    assert not extra.done()  # no room: the caller waits (backpressure), nothing is dropped
    gate.set()
    await asyncio.wait_for(asyncio.gather(*running, extra), 5)
    await writer.close()
    await engine.dispose()
    with pytest.raises(ValueError):
        GroupWriter(engine, max_batch=0)
