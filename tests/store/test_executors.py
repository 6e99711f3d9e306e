"""Where the SQL store's statements run: SQLite's reader and writer threads, the timeout that
bounds them, a connection that fails, and closing with work in flight."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection
from tests.backends import postgres_url

from iobridge.store.base import StoreUnavailable
from iobridge.store.sql_executor import AsyncExecutor, GroupWriter, ThreadExecutor


def _executor(path: Path, **kwargs: Any) -> ThreadExecutor:
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY)"))
    return ThreadExecutor(engine, engine, **kwargs)


def _thread_name(conn: Connection) -> str:
    return threading.current_thread().name


async def test_sqlite_reads_and_writes_run_on_the_store_s_own_named_threads(
    tmp_path: Path,
) -> None:
    executor = _executor(tmp_path / "n.db")
    try:
        assert (await executor.read(_thread_name)).startswith("iobridge-sql-read")
        [writer] = await executor.transaction([_thread_name])
        assert writer.startswith("iobridge-sql-write")
    finally:
        await executor.close()


async def test_sqlite_transactions_run_one_at_a_time(tmp_path: Path) -> None:
    """The writer is one thread: two transactions asked for at once never overlap (SQLite
    has one writer; a second would wait in its busy handler)."""
    executor = _executor(tmp_path / "o.db")
    spans: list[tuple[float, float]] = []

    def slow(conn: Connection) -> None:
        started = time.monotonic()
        time.sleep(0.1)
        spans.append((started, time.monotonic()))

    try:
        await asyncio.gather(*(executor.transaction([slow]) for _ in range(3)))
    finally:
        await executor.close()
    spans.sort()
    assert len(spans) == 3
    assert all(end <= later for (_, end), (later, _) in itertools.pairwise(spans))


async def test_a_sqlite_read_or_transaction_past_the_timeout_raises(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "s.db", timeout=0.2)
    gate = threading.Event()

    def held(conn: Connection) -> None:
        gate.wait(5)

    try:
        for call in (executor.read(held), executor.transaction([held])):
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await call
            assert time.monotonic() - started < 2
    finally:
        gate.set()
        await executor.close()


async def test_a_connection_that_cannot_open_fails_every_waiting_read(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    executor = ThreadExecutor(engine, engine, readers=1, timeout=5)
    try:
        reads = [executor.read(lambda conn: 1) for _ in range(3)]
        answers = await asyncio.gather(*reads, return_exceptions=True)
        assert all(isinstance(a, StoreUnavailable) for a in answers), answers
        assert all("unable to open database file" in str(a) for a in answers)
    finally:
        await executor.close()


async def test_closing_waits_for_the_reads_and_writes_in_flight(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "c.db")
    done: list[str] = []

    def slow(kind: str) -> Any:
        def job(conn: Connection) -> None:
            time.sleep(0.2)
            done.append(kind)

        return job

    read = asyncio.ensure_future(executor.read(slow("read")))
    write = asyncio.ensure_future(executor.transaction([slow("write")]))
    await asyncio.sleep(0.05)  # both are in their threads now
    await executor.close()
    assert sorted(done) == ["read", "write"]
    await asyncio.gather(read, write, return_exceptions=True)


async def test_closing_a_group_writer_commits_what_is_queued(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "g.db")
    writer = GroupWriter(executor, max_batch=1)

    def insert(key: int) -> Any:
        def job(conn: Connection) -> int:
            time.sleep(0.02)
            conn.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": key})
            return key

        return job

    pending = [asyncio.ensure_future(writer.submit(insert(k))) for k in range(4)]
    await asyncio.sleep(0)  # queued, the first one running
    await writer.close()
    assert [p.done() for p in pending] == [True] * 4
    stored = await executor.read(
        lambda conn: conn.execute(text("SELECT k FROM t ORDER BY k")).scalars().all())
    assert stored == [0, 1, 2, 3]
    await executor.close()


def test_a_group_writer_needs_room_for_one_job(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "v.db")
    for batch, queue in ((0, 1), (1, 0)):
        with pytest.raises(ValueError, match=r"^max_batch and max_queue must be at least 1$"):
            GroupWriter(executor, max_batch=batch, max_queue=queue)


async def test_a_postgresql_connection_that_fails_fails_every_waiting_read() -> None:
    """The server is not there: each read gets the store's outage, none waits for its
    timeout."""
    pytest.importorskip("asyncpg")
    postgres_url()  # skips (or fails under CI) without the test server, like the others
    from sqlalchemy.ext.asyncio import create_async_engine

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_async_engine(f"postgresql+asyncpg://u:p@127.0.0.1:{port}/none")
    executor = AsyncExecutor(engine, engine, readers=1, timeout=10)
    try:
        started = time.monotonic()
        answers = await asyncio.gather(*(executor.read(lambda conn: 1) for _ in range(3)),
                                       return_exceptions=True)
        assert time.monotonic() - started < 5
        assert all(isinstance(a, StoreUnavailable | OSError) for a in answers), answers
    finally:
        await executor.close()
