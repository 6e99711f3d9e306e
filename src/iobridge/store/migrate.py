"""Schema migrations on start-up and ``iobridge db upgrade``, and opening a store by URL.

The Alembic scripts ship inside the package (``iobridge/store/migrations``), so upgrading
needs no ``alembic.ini``: the configuration is built here and the migration runs on a
connection of the store's own engine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:  # SQLAlchemy's asyncio part needs greenlet: the postgres extra
    from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.store.base import Clock, ThreadStore, utc_now
from iobridge.store.memory_store import MemoryThreadStore
from iobridge.store.sqlalchemy_store import WRITE_OPTION, SqlThreadStore, make_engine

__all__ = [
    "MEMORY_URL",
    "alembic_config",
    "current_revision",
    "head_revision",
    "open_store",
    "upgrade",
    "upgrade_engine",
]

#: ``database_url`` for a non-persistent in-memory store (tests, demos).
MEMORY_URL = "memory://"
MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "iobridge_alembic_version"
#: PostgreSQL advisory lock key serialising migrations ("iobridge" in ASCII).
MIGRATION_LOCK = 0x696F627269646765


def alembic_config(database_url: str | None = None) -> Config:
    """An Alembic ``Config`` pointing at the packaged migration scripts."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if database_url is not None:
        config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    """The newest revision among the packaged migrations."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


async def upgrade_engine(engine: Engine | AsyncEngine) -> None:
    """Bring the schema behind ``engine`` to the head revision (a no-op when it is there).

    Several server processes may start at once: the migration holds the database's write
    lock (SQLite ``BEGIN IMMEDIATE``) or a transaction-scoped advisory lock (PostgreSQL), so
    the others wait, then find the schema at head. SQLite's migration runs in a worker thread
    (its engine is sync).
    """
    if isinstance(engine, Engine):
        await asyncio.to_thread(_upgrade_sync, engine)
        return
    async with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        await conn.run_sync(_upgrade)


def _upgrade_sync(engine: Engine) -> None:
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        _upgrade(conn)


async def current_revision(engine: Engine | AsyncEngine) -> str | None:
    """The schema revision of the database behind ``engine`` (``None`` if never migrated)."""
    if isinstance(engine, Engine):
        return await asyncio.to_thread(_current_sync, engine)
    async with engine.connect() as conn:
        return await conn.run_sync(_current)


def _current_sync(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return _current(conn)


async def _dispose(engine: Engine | AsyncEngine) -> None:
    if isinstance(engine, Engine):
        engine.dispose()
    else:
        await engine.dispose()


async def upgrade(database_url: str) -> None:
    """Apply pending migrations to ``database_url`` (what ``iobridge db upgrade`` runs)."""
    if database_url == MEMORY_URL:
        return
    engine = make_engine(database_url)
    try:
        await upgrade_engine(engine)
    finally:
        await _dispose(engine)


async def open_store(
    database_url: str,
    *,
    migrate: bool = True,
    clock: Clock = utc_now,
    timeout: float | None = None,
) -> ThreadStore:
    """Open the store at ``database_url``, migrating it to head first unless told not to;
    ``timeout`` bounds each of the SQL store's reads and transactions (not the migration).

    ``sqlite:///path.db`` and ``postgresql+asyncpg://…`` give a ``SqlThreadStore``;
    ``memory://`` gives a ``MemoryThreadStore``.
    """
    if database_url == MEMORY_URL:
        return MemoryThreadStore(clock=clock)
    engine = make_engine(database_url)
    if migrate:
        try:
            await upgrade_engine(engine)
        except BaseException:
            await _dispose(engine)
            raise
    return SqlThreadStore(engine, clock=clock, timeout=timeout)
