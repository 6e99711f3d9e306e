"""Store backends for tests: in-memory, a real SQLite file, and a real PostgreSQL server.

PostgreSQL tests read ``IOBRIDGE_TEST_POSTGRES_URL`` (``eval "$(scripts/ci-postgres.sh)"``).
Without it they skip with a loud reason, unless ``CI=true``: then they fail, so CI cannot
silently lose the PostgreSQL coverage. Each PostgreSQL store lives in its own fresh schema,
migrated by Alembic and dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.store import MemoryThreadStore, SqlThreadStore, ThreadStore
from iobridge.store.migrate import open_store, upgrade_engine
from iobridge.store.sqlalchemy_store import make_engine

PG_ENV = "IOBRIDGE_TEST_POSTGRES_URL"
BACKENDS = ["memory", "sqlite", "postgres"]
SQL_BACKENDS = ["sqlite", "postgres"]


def postgres_url() -> str:
    """The test server's URL; skips (or, under ``CI=true``, fails) when it is not set."""
    url = os.environ.get(PG_ENV)
    if url:
        return url
    reason = (
        f"POSTGRESQL TESTS NOT RUN: {PG_ENV} is not set. "
        'Run: eval "$(scripts/ci-postgres.sh)"'
    )
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


@contextlib.asynccontextmanager
async def open_backend(
    kind: str, tmp_path: Path, clock: StepClock | None = None
) -> AsyncIterator[ThreadStore]:
    """A fresh, migrated store of ``kind`` (``memory``, ``sqlite`` or ``postgres``)."""
    clock = clock or StepClock()
    if kind == "memory":
        yield MemoryThreadStore(clock=clock)
        return
    if kind == "sqlite":
        store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'threads.db'}", clock=clock)
        try:
            yield store
        finally:
            await store.close()
        return
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        yield SqlThreadStore(engine, clock=clock)
