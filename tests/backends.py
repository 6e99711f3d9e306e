"""Store backends for tests: in-memory, a real SQLite file, and a real PostgreSQL server.

PostgreSQL tests read ``IOBRIDGE_TEST_POSTGRES_URL`` (``eval "$(scripts/ci-postgres.sh)"``).
Without it they skip with a loud reason, unless ``CI=true``: then they fail, so CI cannot
silently lose the PostgreSQL coverage. Test stores live in a schema of their own (migrated
once per test process, emptied per test, dropped at exit); migration tests get a fresh,
empty schema each.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.store import MemoryThreadStore, SqlThreadStore, ThreadStore
from iobridge.store.migrate import upgrade, upgrade_engine
from iobridge.store.sqlalchemy_store import make_engine

T = TypeVar("T")
PG_ENV = "IOBRIDGE_TEST_POSTGRES_URL"
BACKENDS = ["memory", "sqlite", "postgres"]
SQL_BACKENDS = ["sqlite", "postgres"]


def postgres_url() -> str:
    """The test server's URL; skips (or, under ``CI=true``, fails) when it is not set."""
    url = os.environ.get(PG_ENV)
    if url:
        return url
    reason = f'POSTGRESQL TESTS NOT RUN: {PG_ENV} is not set. Run: eval "$(scripts/ci-postgres.sh)"'
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " (CI=true makes this a failure)")
    pytest.skip(reason)


class StepClock:
    """A store clock that advances by ``step`` on every call, or stays put when frozen."""

    def __init__(self, step: timedelta = timedelta(milliseconds=1)) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


async def in_transaction(engine: Engine | AsyncEngine, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` in a committed transaction, on SQLite's sync engine or an async one."""
    if isinstance(engine, Engine):
        def run() -> T:
            with engine.begin() as conn:
                return fn(conn)

        return await asyncio.to_thread(run)
    async with engine.begin() as conn:
        return await conn.run_sync(fn)


async def dispose(engine: Engine | AsyncEngine) -> None:
    """Close every pooled connection of either kind of engine."""
    if isinstance(engine, Engine):
        engine.dispose()
    else:
        await engine.dispose()


@contextlib.asynccontextmanager
async def pg_schema_engine() -> AsyncIterator[AsyncEngine]:
    """An engine whose ``search_path`` is a fresh, empty schema (dropped on exit)."""
    url = postgres_url()
    schema = f"iobridge_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = make_engine(url, connect_args={"server_settings": {"search_path": schema}})
    try:
        yield engine
    finally:
        await engine.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


_template: dict[str, str] = {}


async def _migrated_pg_schema() -> str:
    """One migrated schema per test process, emptied per test (TRUNCATE is fast)."""
    if "pg" not in _template:
        url = postgres_url()
        schema = f"iobridge_test_{uuid.uuid4().hex[:12]}"
        admin = make_engine(url)
        async with admin.begin() as conn:
            await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        await admin.dispose()
        engine = make_engine(url, connect_args={"server_settings": {"search_path": schema}})
        await upgrade_engine(engine)
        await engine.dispose()
        _template["pg"] = schema
        atexit.register(lambda: asyncio.run(_drop_schema(url, schema)))
    return _template["pg"]


async def shared_pg_schema() -> str:
    """The process's migrated test schema, for a store opened in another event loop."""
    return await _migrated_pg_schema()


async def _drop_schema(url: str, schema: str) -> None:
    admin = make_engine(url)
    async with admin.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await admin.dispose()


async def _sqlite_copy(target: Path) -> str:
    """A migrated SQLite file, copied from one migrated once per test process."""
    if "sqlite" not in _template:
        folder = Path(tempfile.mkdtemp(prefix="iobridge-test-"))
        atexit.register(shutil.rmtree, folder, True)
        await upgrade(f"sqlite:///{folder / 'template.db'}")
        _template["sqlite"] = str(folder / "template.db")
    shutil.copyfile(_template["sqlite"], target)
    return f"sqlite:///{target}"


@contextlib.asynccontextmanager
async def open_backend(
    kind: str, tmp_path: Path, clock: StepClock | None = None
) -> AsyncIterator[ThreadStore]:
    """A fresh, migrated, empty store of ``kind`` (``memory``, ``sqlite`` or ``postgres``)."""
    clock = clock or StepClock()
    if kind == "memory":
        yield MemoryThreadStore(clock=clock)
        return
    if kind == "sqlite":
        url = await _sqlite_copy(tmp_path / "threads.db")
        engine = make_engine(url)
    else:
        schema = await _migrated_pg_schema()
        engine = make_engine(
            postgres_url(), connect_args={"server_settings": {"search_path": schema}}
        )
        async with engine.begin() as conn:
            await conn.execute(
                text("TRUNCATE iobridge_messages, iobridge_branches, iobridge_threads")
            )
    store = SqlThreadStore(engine, clock=clock)
    try:
        yield store
    finally:
        await store.close()
