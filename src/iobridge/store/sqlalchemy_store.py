"""``ThreadStore`` on SQLAlchemy 2 asyncio: SQLite (default, WAL) or PostgreSQL (asyncpg).

Writes that read before they write (appending messages) must not interleave. PostgreSQL gets
that from ``SELECT … FOR UPDATE`` on the thread row. SQLite has no row locks, so write
transactions start with ``BEGIN IMMEDIATE``: the database write lock is taken up front (and
waited for, up to the busy timeout) instead of failing with "database is locked" when a
deferred transaction tries to upgrade its read lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import delete, event, func, literal, select, tuple_, update
from sqlalchemy.engine import Connection, Row, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from iobridge.errors import ConflictError, InputError, NotFoundError
from iobridge.store.base import (
    Clock,
    Thread,
    ThreadStore,
    check_limit,
    check_thread_ids,
    decode_cursor,
    encode_cursor,
    normalize_messages,
    utc_now,
)
from iobridge.store.records import UTCDateTime, messages, threads

__all__ = ["DEFAULT_DATABASE_URL", "WRITE_OPTION", "SqlThreadStore", "make_engine"]

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./iobridge.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
WAL_SWITCH_ATTEMPTS = 100
#: Execution option marking a write transaction (``BEGIN IMMEDIATE`` on SQLite).
WRITE_OPTION = "iobridge_write"
#: Bound parameters per ``IN (…)`` chunk, well under SQLite's and asyncpg's limits.
_CHUNK = 500


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def make_engine(database_url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``database_url``; SQLite connections get WAL and a busy timeout."""
    url = make_url(database_url)
    engine = create_async_engine(
        url, json_serializer=_json_dumps, json_deserializer=orjson.loads, **kwargs
    )
    if url.get_backend_name() == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from the driver so "begin" below decides BEGIN's kind.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _enable_wal(cursor: Any) -> None:
    """Switch the database to WAL (persistent in the file, so this only matters once).

    Two connections switching a new file at the same moment can get "database is locked"
    without the busy handler being consulted (SQLite avoids a lock-upgrade deadlock), so the
    switch is retried briefly; this blocks only while a brand-new database is set up.
    """
    for _ in range(WAL_SWITCH_ATTEMPTS - 1):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            time.sleep(0.02)
    cursor.execute("PRAGMA journal_mode=WAL")


def _thread(row: Row[Any]) -> Thread:
    return Thread(
        id=row.id,
        resource_id=row.resource_id,
        agent_id=row.agent_id,
        title=row.title,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class SqlThreadStore(ThreadStore):
    """Threads and messages in two tables (see ``records``); the schema is Alembic's job."""

    def __init__(self, engine: AsyncEngine, *, clock: Clock = utc_now) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._clock = clock

    async def get_thread(self, thread_id: str) -> Thread | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(threads).where(threads.c.id == thread_id))).first()
        return _thread(row) if row is not None else None

    async def create_thread(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None = None,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        check_thread_ids(thread_id, resource_id, agent_id)
        now = self._clock()
        thread = Thread(
            id=thread_id,
            resource_id=resource_id,
            agent_id=agent_id,
            title=title,
            metadata=dict(metadata or {}),
            created_at=now,
            updated_at=now,
        )
        try:
            async with self._writer.begin() as conn:
                await conn.execute(
                    threads.insert().values(
                        id=thread.id,
                        resource_id=thread.resource_id,
                        agent_id=thread.agent_id,
                        title=thread.title,
                        metadata=thread.metadata,
                        created_at=now,
                        updated_at=now,
                    )
                )
        except IntegrityError:
            raise ConflictError(
                f"thread {thread_id!r} already exists", code="THREAD_EXISTS"
            ) from None
        return thread

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        values: dict[str, Any] = {"updated_at": self._clock()}
        if title is not None:
            values["title"] = title
        if metadata is not None:
            values["metadata"] = dict(metadata)
        async with self._writer.begin() as conn:
            result = await conn.execute(
                update(threads).where(threads.c.id == thread_id).values(**values)
            )
            if result.rowcount == 0:
                raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
            row = (await conn.execute(select(threads).where(threads.c.id == thread_id))).one()
        return _thread(row)

    async def set_title_if_empty(self, thread_id: str, title: str) -> bool:
        async with self._writer.begin() as conn:
            result = await conn.execute(
                update(threads)
                .where(threads.c.id == thread_id, threads.c.title == "")
                .values(title=title)
            )
        return result.rowcount == 1

    async def delete_thread(self, thread_id: str) -> bool:
        async with self._writer.begin() as conn:
            # Explicit, not only ON DELETE CASCADE: SQLite enforces foreign keys per connection.
            await conn.execute(delete(messages).where(messages.c.thread_id == thread_id))
            result = await conn.execute(delete(threads).where(threads.c.id == thread_id))
        return result.rowcount == 1

    async def list_threads(
        self,
        resource_ids: Collection[str] | None,
        agent_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> tuple[list[Thread], str | None]:
        check_limit(limit)
        query = select(threads)
        if cursor is not None:
            after_time, after_id = decode_cursor(cursor)
            # Row-value comparison: both backends walk the index from the cursor onwards.
            query = query.where(
                tuple_(threads.c.updated_at, threads.c.id)
                < tuple_(literal(after_time, UTCDateTime), literal(after_id))
            )
        if resource_ids is not None:
            if not resource_ids:
                return [], None
            query = query.where(threads.c.resource_id.in_(sorted(resource_ids)))
        if agent_id is not None:
            query = query.where(threads.c.agent_id == agent_id)
        query = query.order_by(threads.c.updated_at.desc(), threads.c.id.desc()).limit(limit + 1)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        page = [_thread(r) for r in rows[:limit]]
        more = len(rows) > limit
        return page, encode_cursor(page[-1].updated_at, page[-1].id) if more else None

    async def list_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[dict[str, Any]]:
        if limit is not None:
            check_limit(limit)
        query = select(messages.c.data).where(messages.c.thread_id == thread_id)
        async with self.engine.connect() as conn:
            if before is not None:
                position = (
                    await conn.execute(
                        select(messages.c.position).where(
                            messages.c.thread_id == thread_id, messages.c.message_id == before
                        )
                    )
                ).scalar()
                if position is None:
                    raise InputError(f"no message {before!r} in this thread", code="INVALID_CURSOR")
                query = query.where(messages.c.position < position)
            if limit is None:
                rows = (await conn.execute(query.order_by(messages.c.position))).scalars().all()
                return list(rows)
            newest = query.order_by(messages.c.position.desc()).limit(limit)
            rows = (await conn.execute(newest)).scalars().all()
        return list(reversed(rows))

    async def append_messages(
        self, thread_id: str, messages_in: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        batch = normalize_messages(messages_in)
        now = self._clock()
        async with self._writer.begin() as conn:
            locked = (
                await conn.execute(
                    select(threads.c.id).where(threads.c.id == thread_id).with_for_update()
                )
            ).first()
            if locked is None:
                raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
            known = await _stored_ids(conn, thread_id, [m["id"] for m in batch])
            new = [m for m in batch if m["id"] not in known]
            if not new:
                return []
            last = (
                await conn.execute(
                    select(func.max(messages.c.position)).where(messages.c.thread_id == thread_id)
                )
            ).scalar()
            start = 0 if last is None else last + 1
            rows = [
                {
                    "thread_id": thread_id,
                    "position": start + offset,
                    "message_id": m["id"],
                    "role": m["role"],
                    "tool_call_id": _tool_call_id(m),
                    "data": m,
                    "created_at": now,
                }
                for offset, m in enumerate(new)
            ]
            await conn.execute(messages.insert(), rows)
            await conn.execute(
                update(threads).where(threads.c.id == thread_id).values(updated_at=now)
            )
        return [dict(m) for m in new]

    async def close(self) -> None:
        await self.engine.dispose()


async def _stored_ids(conn: AsyncConnection, thread_id: str, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        result = await conn.execute(
            select(messages.c.message_id).where(
                messages.c.thread_id == thread_id, messages.c.message_id.in_(chunk)
            )
        )
        found.update(result.scalars())
    return found


def _tool_call_id(message: Mapping[str, Any]) -> str | None:
    value = message.get("toolCallId")
    return value if isinstance(value, str) else None
