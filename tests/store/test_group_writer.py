"""Group commit: concurrent writes share transactions; a bad write fails alone."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from iobridge.store.sql_executor import GroupWriter, ThreadExecutor


def _executor(path: Path) -> ThreadExecutor:
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY)"))
    return ThreadExecutor(engine, engine)


def insert(key: int) -> object:
    def job(conn: Connection) -> int:
        conn.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": key})
        return key

    return job


async def test_concurrent_writes_commit_together_and_a_bad_one_fails_alone(
    tmp_path: Path,
) -> None:
    executor = _executor(tmp_path / "w.db")
    commits: list[int] = []
    event.listen(executor.engine, "commit", lambda conn: commits.append(1))
    writer = GroupWriter(executor, max_batch=64)
    keys = [*range(40), 7]  # the second 7 violates the primary key
    results = await asyncio.gather(
        *(writer.submit(insert(k)) for k in keys), return_exceptions=True  # type: ignore[arg-type]
    )
    assert results[:40] == list(range(40))
    assert isinstance(results[40], IntegrityError)
    stored = await executor.read(
        lambda conn: conn.execute(text("SELECT k FROM t ORDER BY k")).scalars().all()
    )
    assert stored == list(range(40))  # the bad job failed alone; the others committed
    commits.clear()
    await asyncio.gather(*(writer.submit(insert(k)) for k in range(100, 140)))  # type: ignore[arg-type]
    assert 1 <= len(commits) <= 3  # group commit: 40 queued writes in a few transactions
    await writer.close()
    await executor.close()


async def test_the_queue_is_bounded(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "w.db")
    gate = threading.Event()

    def slow(conn: Connection) -> None:
        gate.wait(5)

    writer = GroupWriter(executor, max_batch=1, max_queue=2)
    running = [asyncio.create_task(writer.submit(slow)) for _ in range(3)]
    await asyncio.sleep(0.05)  # one job runs, two wait in the queue
    extra = asyncio.create_task(writer.submit(slow))
    await asyncio.sleep(0.05)
    assert not extra.done()  # no room: the caller waits (backpressure), nothing is dropped
    gate.set()
    await asyncio.wait_for(asyncio.gather(*running, extra), 5)
    await writer.close()
    await executor.close()
    with pytest.raises(ValueError):
        GroupWriter(executor, max_batch=0)
