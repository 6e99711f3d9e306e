"""``ThreadStore`` on SQLAlchemy 2: SQLite (default, WAL) or PostgreSQL (asyncpg).

Queries are SQLAlchemy Core functions of a sync connection, run by an executor
(:mod:`iobridge.store.sql_executor`): SQLite through the standard library's ``sqlite3``
(SQLAlchemy's pysqlite dialect) in worker threads, for migrations and every query alike;
PostgreSQL through the asyncpg engine (the ``postgres`` extra). Every write goes through one
``GroupWriter``: the writes queued meanwhile are committed together (group commit), so a burst
of runs costs a few transactions, not one each, and SQLite never sleeps in its busy handler
for our own writes. Reads run beside the writer (WAL).

Writes that read before they write (appending messages) must not interleave with another
process's. PostgreSQL gets that from ``SELECT … FOR UPDATE`` on the thread row. SQLite has no
row locks, so write transactions start with ``BEGIN IMMEDIATE``: the database write lock is
taken up front (and waited for, up to the busy timeout) instead of failing with "database is
locked" when a deferred transaction tries to upgrade its read lock.

A run reads its thread with indexed queries only (``read_for_run``: the ids it sends that
are stored, the calls it answers that are answered, the newest ``lastMessages``): its cost
does not grow with the thread. On PostgreSQL the run path's read and writes are combined
into fewer statements (``pg_run_sql``): there each one is a round trip.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import (
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    literal,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.exc import IntegrityError

if TYPE_CHECKING:  # SQLAlchemy's asyncio part needs greenlet: the postgres extra
    from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.errors import ConflictError, InputError, NotFoundError
from iobridge.extras import require_extra
from iobridge.protocol.messages import answered_call, call_ids, window
from iobridge.store import checkpoint_rows, pg_run_sql
from iobridge.store.base import (
    MAIN_BRANCH,
    Branch,
    Carryover,
    Checkpoint,
    CheckpointOp,
    CheckpointRow,
    Clock,
    PointWrite,
    RunRead,
    StoredMessage,
    Thread,
    ThreadStore,
    check_limit,
    check_thread_ids,
    check_thread_text,
    common_prefix,
    decode_cursor,
    encode_cursor,
    normalize_messages,
    replace_from_error,
    too_many_branches,
    utc_now,
)
from iobridge.store.records import (
    UTCDateTime,
    branches,
    messages,
    sqlite_insert,
    sqlite_time,
    threads,
)
from iobridge.store.run_batches import RunReadJob, RunWrite, WriteRuns, write_batch
from iobridge.store.sql_executor import (
    AsyncExecutor,
    GroupWriter,
    ReadMany,
    SqlExecutor,
    ThreadExecutor,
)

__all__ = ["DEFAULT_DATABASE_URL", "WRITE_OPTION", "SqlThreadStore", "make_engine"]

DEFAULT_DATABASE_URL = "sqlite:///./iobridge.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
WAL_SWITCH_ATTEMPTS = 100
#: Threads serving reads at once on SQLite (plus the writer's thread).
SQLITE_READERS = 2
#: Execution option marking a write transaction (``BEGIN IMMEDIATE`` on SQLite).
WRITE_OPTION = "iobridge_write"
#: Bound parameters per ``IN (…)`` chunk, well under SQLite's and asyncpg's limits.
_CHUNK = 500
#: How far past ``lastMessages`` a window reaches back for the issuer of a call.
_WINDOW_SLACK = 200


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def make_engine(database_url: str, **kwargs: Any) -> Engine | AsyncEngine:
    """The engine for ``database_url``.

    SQLite (``sqlite:///path``; ``sqlite+pysqlite://`` and the older ``sqlite+aiosqlite://``
    name the same file the same way): a sync engine on the standard library's driver, its
    connections usable from worker threads, with WAL and a busy timeout. PostgreSQL
    (``postgresql+asyncpg://``): an async engine.

    Raises:
        MissingExtra: PostgreSQL without the ``postgres`` extra installed.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(
            url.set(drivername="sqlite"),
            json_serializer=_json_dumps,
            json_deserializer=orjson.loads,
            connect_args={"check_same_thread": False},
            pool_size=SQLITE_READERS + 1,
            **kwargs,
        )
        _configure_sqlite(engine)
        return engine
    require_extra("postgres", "database_url (PostgreSQL)")
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        url, json_serializer=_json_dumps, json_deserializer=orjson.loads, **kwargs
    )


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from the driver so "begin" below decides BEGIN's kind.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
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


# Statements of the run path, built once: building a Core statement per call costs about
# three times what executing it costs (measured: 94 µs vs 30 µs a query on SQLite).
_THREAD = select(threads).where(threads.c.id == bindparam("b_thread"))
_THREADS = select(threads).where(threads.c.id.in_(bindparam("b_ids", expanding=True)))
_OWNER = select(threads.c.resource_id).where(threads.c.id == bindparam("b_thread"))
_OWNER_LOCKED = _OWNER.with_for_update()
_STORED_IDS = select(messages.c.message_id).where(
    messages.c.thread_id == bindparam("b_thread"),
    messages.c.message_id.in_(bindparam("b_ids", expanding=True)),
)
_ANSWERED = select(messages.c.tool_call_id).where(
    messages.c.thread_id == bindparam("b_thread"),
    messages.c.tool_call_id.in_(bindparam("b_ids", expanding=True)),
    messages.c.role == "tool",
)
_NEWEST = (
    select(messages.c.data)
    .where(messages.c.thread_id == bindparam("b_thread"))
    .order_by(messages.c.position.desc())
    .limit(bindparam("b_limit"))
)
_FIRST_USER = (
    select(messages.c.data)
    .where(messages.c.thread_id == bindparam("b_thread"), messages.c.role == "user")
    .order_by(messages.c.position)
    .limit(1)
)
_LAST_POSITION = select(func.max(messages.c.position)).where(
    messages.c.thread_id == bindparam("b_thread")
)
_TOUCH = (
    update(threads)
    .where(threads.c.id == bindparam("b_thread"))
    .values(updated_at=bindparam("b_now"))
)
_CARRYOVER = (
    update(threads)
    .where(threads.c.id == bindparam("b_thread"))
    .values(state=bindparam("b_state"), interrupts=bindparam("b_interrupts"))
)
_INSERT_THREAD = threads.insert()
_INSERT_MESSAGES = messages.insert()
#: Of the threads named, each one's owner and last message position (``None``: no message).
_OWNERS_AND_LAST = select(
    threads.c.id,
    threads.c.resource_id,
    select(func.max(messages.c.position))
    .where(messages.c.thread_id == threads.c.id)
    .scalar_subquery()
    .label("last"),
).where(threads.c.id.in_(bindparam("b_ids", expanding=True)))
#: Of the ``(thread_id, message_id)`` pairs named (a JSON array of pairs), those stored: an
#: index probe per pair (SQLite scans the whole index for a row-value ``IN (VALUES …)``).
_STORED_PAIRS = text(
    """
SELECT m.thread_id, m.message_id
  FROM json_each(:b_pairs) AS j
 CROSS JOIN iobridge_messages AS m
    ON m.thread_id = json_extract(j.value, '$[0]') AND m.message_id = json_extract(j.value, '$[1]')
"""
)
_TITLE = (
    update(threads)
    .where(threads.c.id == bindparam("b_thread"), threads.c.title == "")
    .values(title=bindparam("b_title"))
)
#: The run writes' statements on SQLite as the driver takes them (``?`` placeholders, values
#: in column order): new threads, their messages, the touch of an existing thread.
_SQLITE_NEW_THREADS = sqlite_insert(
    threads, "id", "resource_id", "agent_id", "title", "metadata", "created_at", "updated_at",
    "state", "interrupts",
)
_SQLITE_NEW_MESSAGES = sqlite_insert(
    messages, "thread_id", "position", "message_id", "role", "tool_call_id", "data", "created_at"
)
_SQLITE_TOUCH = (
    f"UPDATE {threads.name} SET {threads.c.updated_at.name} = ? WHERE {threads.c.id.name} = ?"
)


def _thread(row: Row[Any]) -> Thread:
    return Thread(
        id=row.id,
        resource_id=row.resource_id,
        agent_id=row.agent_id,
        title=row.title,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
        state=_unwrap_state(row.state),
        interrupts=row.interrupts,
        current_branch=row.current_branch,
    )


def _wrap_state(state: Any) -> dict[str, Any] | None:
    """The state column holds ``{"value": state}``: always a JSON object, because SQLite's
    NUMERIC affinity (a ``JSON`` column) turns a bare number's text into a number, which no
    longer reads back as JSON."""
    return None if state is None else {"value": state}


def _unwrap_state(stored: Any) -> Any:
    return stored.get("value") if isinstance(stored, dict) else None


class SqlThreadStore(ThreadStore):
    """Threads and messages in two tables (see ``records``); the schema is Alembic's job.

    Args:
        engine: An engine from :func:`make_engine` (SQLite's sync engine or PostgreSQL's
            async one); the store owns it.
        clock: Timestamps (injectable for tests).
        timeout: Seconds each read and each transaction may take (``None``: unbounded);
            past it the call raises ``TimeoutError`` (``store_timeout_seconds``).
    """

    def __init__(
        self, engine: Engine | AsyncEngine, *, clock: Clock = utc_now,
        timeout: float | None = None,
    ) -> None:
        self.engine = engine
        self._clock = clock
        self._lock_rows = engine.dialect.name != "sqlite"
        #: PostgreSQL runs the run path's combined statements (``pg_run_sql``).
        self._combined = engine.dialect.name == "postgresql"
        executor: SqlExecutor
        if isinstance(engine, Engine):
            if engine.dialect.name != "sqlite":
                raise TypeError("a sync engine must be SQLite's (make_engine makes them)")
            executor = ThreadExecutor(
                engine, engine.execution_options(**{WRITE_OPTION: True}), readers=SQLITE_READERS,
                timeout=timeout,
            )
        else:
            # Reads in autocommit: under READ COMMITTED every statement takes its own snapshot
            # anyway, and a read batch then costs no BEGIN and no ROLLBACK round trip.
            executor = AsyncExecutor(
                engine.execution_options(isolation_level="AUTOCOMMIT"),
                engine.execution_options(**{WRITE_OPTION: True}),
                timeout=timeout,
            )
        self._sql = executor
        #: How a batch of runs' reads and writes of their threads is answered and written
        #: (``run_batches``): the PostgreSQL statements, or SQLite's few Core statements.
        self._read_runs: ReadMany = _pg_read_runs if self._combined else _sqlite_read_runs
        self._write_runs: WriteRuns = (
            pg_run_sql.write_runs if self._combined else _sqlite_write_runs
        )
        self._writes = GroupWriter(executor, combine=write_batch)

    async def get_thread(self, thread_id: str) -> Thread | None:
        def read(conn: Connection) -> Thread | None:
            row = conn.execute(_THREAD, {"b_thread": thread_id}).first()
            return _thread(row) if row is not None else None

        return await self._sql.read(read)

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
        check_thread_text(title, metadata)
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

        def insert(conn: Connection) -> None:
            conn.execute(_INSERT_THREAD, _thread_row(thread))

        try:
            await self._writes.submit(insert)
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
        check_thread_text(title, metadata)
        values: dict[str, Any] = {"updated_at": self._clock()}
        if title is not None:
            values["title"] = title
        if metadata is not None:
            values["metadata"] = dict(metadata)

        def change(conn: Connection) -> Thread:
            result = conn.execute(update(threads).where(threads.c.id == thread_id).values(**values))
            if result.rowcount == 0:
                raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
            return _thread(conn.execute(select(threads).where(threads.c.id == thread_id)).one())

        return await self._writes.submit(change)

    async def set_title_if_empty(self, thread_id: str, title: str) -> bool:
        check_thread_text(title)
        return await self._writes.submit(lambda conn: _set_title_if_empty(conn, thread_id, title))

    async def fork_branch(
        self, thread_id: str, from_message_id: str, branch_id: str, *, max_branches: int
    ) -> Branch:
        def fork(conn: Connection) -> Branch:
            thread = conn.execute(_THREAD, {"b_thread": thread_id}).one_or_none()
            if thread is None:
                raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
            live = _live(conn, thread_id)
            at = next((i for i, (m, _) in enumerate(live) if m["id"] == from_message_id), None)
            if at is None:
                raise replace_from_error(from_message_id)
            known = conn.execute(select(func.count()).select_from(branches)
                                 .where(branches.c.thread_id == thread_id)).scalar() or 0
            if max(known, 1) >= max_branches:
                raise too_many_branches(max_branches)
            now = self._clock()
            current = thread.current_branch or MAIN_BRANCH
            kept = _frozen(live)
            if not known:
                conn.execute(insert(branches).values(
                    thread_id=thread_id, id=MAIN_BRANCH, from_message_id=None,
                    created_at=thread.created_at, messages=kept))
            else:
                conn.execute(update(branches).where(
                    branches.c.thread_id == thread_id, branches.c.id == current
                ).values(messages=kept))
            conn.execute(delete(messages).where(
                messages.c.thread_id == thread_id,
                messages.c.message_id.in_([m["id"] for m, _ in live[at:]])))
            conn.execute(insert(branches).values(
                thread_id=thread_id, id=branch_id, from_message_id=from_message_id,
                created_at=now, messages=None))
            conn.execute(update(threads).where(threads.c.id == thread_id)
                         .values(current_branch=branch_id, updated_at=now))
            return Branch(id=branch_id, from_message_id=from_message_id, created_at=now,
                          current=True)

        return await self._writes.submit(fork)

    async def list_branches(self, thread_id: str) -> list[Branch]:
        def read(conn: Connection) -> list[Branch]:
            thread = conn.execute(_THREAD, {"b_thread": thread_id}).one_or_none()
            if thread is None:
                return []
            rows = conn.execute(
                select(branches.c.id, branches.c.from_message_id, branches.c.created_at)
                .where(branches.c.thread_id == thread_id)
                .order_by(branches.c.created_at, branches.c.id)
            ).all()
            current = thread.current_branch or MAIN_BRANCH
            if not rows:
                return [Branch(id=MAIN_BRANCH, from_message_id=None,
                               created_at=thread.created_at, current=True)]
            return [Branch(id=r.id, from_message_id=r.from_message_id, created_at=r.created_at,
                           current=r.id == current) for r in rows]

        return await self._sql.read(read)

    async def branch_messages(self, thread_id: str, branch_id: str) -> list[StoredMessage] | None:
        def read(conn: Connection) -> list[StoredMessage] | None:
            thread = conn.execute(_THREAD, {"b_thread": thread_id}).one_or_none()
            if thread is None:
                return None
            if branch_id == (thread.current_branch or MAIN_BRANCH):
                return [StoredMessage(m, t) for m, t in _live(conn, thread_id)]
            row = conn.execute(select(branches.c.messages).where(
                branches.c.thread_id == thread_id, branches.c.id == branch_id)).one_or_none()
            return None if row is None else _thawed(row.messages)

        return await self._sql.read(read)

    async def switch_branch(self, thread_id: str, branch_id: str) -> bool:
        def switch(conn: Connection) -> bool:
            thread = conn.execute(_THREAD, {"b_thread": thread_id}).one_or_none()
            if thread is None:
                return False
            current = thread.current_branch or MAIN_BRANCH
            if branch_id == current:
                return True
            row = conn.execute(select(branches.c.messages).where(
                branches.c.thread_id == thread_id, branches.c.id == branch_id)).one_or_none()
            if row is None:
                return False
            live = _live(conn, thread_id)
            target = _thawed(row.messages)
            shared = common_prefix([m["id"] for m, _ in live],
                                   [s.message["id"] for s in target])
            conn.execute(update(branches).where(
                branches.c.thread_id == thread_id, branches.c.id == current
            ).values(messages=_frozen(live)))
            conn.execute(delete(messages).where(
                messages.c.thread_id == thread_id,
                messages.c.message_id.in_([m["id"] for m, _ in live[shared:]])))
            last = conn.execute(_LAST_POSITION, {"b_thread": thread_id}).scalar()
            start = 0 if last is None else last + 1
            rows = [
                {**row, "created_at": stored.created_at}
                for row, stored in zip(_message_rows(
                    thread_id, [s.message for s in target[shared:]], start, self._clock()
                ), target[shared:], strict=True)
            ]
            if rows:
                conn.execute(_INSERT_MESSAGES, rows)
            conn.execute(update(branches).where(
                branches.c.thread_id == thread_id, branches.c.id == branch_id
            ).values(messages=None))
            conn.execute(update(threads).where(threads.c.id == thread_id)
                         .values(current_branch=branch_id, updated_at=self._clock()))
            return True

        return await self._writes.submit(switch)

    async def delete_messages(self, thread_id: str, message_ids: Collection[str]) -> int:
        ids = list(message_ids)
        if not ids:
            return 0

        def remove(conn: Connection) -> int:
            result = conn.execute(delete(messages).where(
                messages.c.thread_id == thread_id, messages.c.message_id.in_(ids)
            ))
            removed = int(result.rowcount or 0)
            if removed:
                conn.execute(update(threads).where(threads.c.id == thread_id)
                             .values(updated_at=self._clock()))
            return removed

        return await self._writes.submit(remove)

    async def delete_thread(self, thread_id: str) -> bool:
        def remove(conn: Connection) -> bool:
            # Explicit, not only ON DELETE CASCADE: SQLite enforces foreign keys per connection.
            conn.execute(delete(messages).where(messages.c.thread_id == thread_id))
            conn.execute(delete(branches).where(branches.c.thread_id == thread_id))
            result = conn.execute(delete(threads).where(threads.c.id == thread_id))
            return bool(result.rowcount == 1)

        return await self._writes.submit(remove)

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
        rows = await self._sql.read(lambda conn: conn.execute(query).all())
        page = [_thread(r) for r in rows[:limit]]
        more = len(rows) > limit
        return page, encode_cursor(page[-1].updated_at, page[-1].id) if more else None

    async def list_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[dict[str, Any]]:
        return [m.message for m in await self.list_stored_messages(thread_id, limit, before)]

    async def list_stored_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[StoredMessage]:
        if limit is not None:
            check_limit(limit)

        def read(conn: Connection) -> list[StoredMessage]:
            query = select(messages.c.data, messages.c.created_at).where(
                messages.c.thread_id == thread_id
            )
            if before is not None:
                position = conn.execute(
                    select(messages.c.position).where(
                        messages.c.thread_id == thread_id, messages.c.message_id == before
                    )
                ).scalar()
                if position is None:
                    raise InputError(f"no message {before!r} in this thread", code="INVALID_CURSOR")
                query = query.where(messages.c.position < position)
            if limit is None:
                rows = list(conn.execute(query.order_by(messages.c.position)).all())
            else:
                newest = query.order_by(messages.c.position.desc()).limit(limit)
                rows = list(reversed(conn.execute(newest).all()))
            return [StoredMessage(row.data, row.created_at) for row in rows]

        return await self._sql.read(read)

    async def append_messages(
        self, thread_id: str, messages_in: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        batch = normalize_messages(messages_in)
        now = self._clock()

        def append(conn: Connection) -> list[dict[str, Any]]:
            if self._locked_thread(conn, thread_id) is None:
                raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
            if self._combined:
                if not batch:
                    return []
                added = pg_run_sql.append(conn, _append_rows(thread_id, batch, now))
                return [dict(m) for m in batch if (thread_id, m["id"]) in added]
            return _append(conn, thread_id, batch, now)

        return await self._writes.submit(append)

    async def write_for_run(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None = None,
        carryover: Carryover | None = None,
        checkpoint: CheckpointOp | None = None,
    ) -> None:
        await self._writes.submit(
            self._run_write(thread_id, resource_id, agent_id, messages, title, carryover,
                            checkpoint)
        )

    def _run_write(
        self,
        thread_id: str,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None,
        carryover: Carryover | None,
        checkpoint: CheckpointOp | None = None,
    ) -> RunWrite:
        """The checked write job (raises before anything is queued)."""
        batch = normalize_messages(messages)
        check_thread_ids(thread_id, resource_id, agent_id)
        if title:
            check_thread_text(title)  # as every store does (PostgreSQL cannot hold U+0000)
        now = self._clock()
        claim_row = {
            "id": thread_id,
            "resource_id": resource_id,
            "agent_id": agent_id,
            "title": title or "",
            "carry": carryover is not None,
            "state": _wrap_state(carryover.state) if carryover is not None else None,
            "interrupts": _interrupts(carryover),
            "now": now,
        }
        return RunWrite(claim_row, _append_rows(thread_id, batch, now), self._write_runs,
                        checkpoint)

    async def set_carryover(self, thread_id: str, carryover: Carryover) -> None:
        await self._writes.submit(lambda conn: _set_carryover(conn, thread_id, carryover))

    async def read_for_run(
        self,
        thread_id: str,
        *,
        message_ids: Collection[str],
        tool_call_ids: Collection[str],
        last_n: int,
        first_user: bool = False,
    ) -> RunRead:
        job = RunReadJob(thread_id, list(message_ids), list(tool_call_ids), last_n,
                         first_user, self._read_runs)
        read: RunRead = await self._sql.read(job)
        return read

    # -- durable runs (``checkpoint_rows``) ----------------------------------------------

    keeps_checkpoints = True

    def insert_checkpoint(self, row: CheckpointRow) -> asyncio.Future[None]:
        now = self._clock()
        return asyncio.ensure_future(self._writes.submit(
            lambda conn: checkpoint_rows.insert_checkpoints(conn, [row], now)
        ))

    def write_point(self, job: PointWrite) -> asyncio.Future[bool]:
        now = self._clock()
        # A task each, begun in order: the writer's queue keeps that order.
        return asyncio.ensure_future(self._writes.submit(checkpoint_rows.PointJob(job, now)))

    async def load_checkpoint(self, owner: str, run_id: str) -> Checkpoint | None:
        result: Checkpoint | None = await self._sql.read(
            lambda conn: checkpoint_rows.load_checkpoint(conn, owner, run_id)
        )
        return result

    async def claim_checkpoint(self, owner: str, run_id: str, epoch: int, holder: str) -> bool:
        return await self._writes.submit(
            lambda conn: checkpoint_rows.claim_checkpoint(conn, owner, run_id, epoch, holder)
        )

    def drop_checkpoint(
        self, owner: str, run_id: str, epoch: int | None = None
    ) -> asyncio.Future[None]:
        return asyncio.ensure_future(self._writes.submit(
            lambda conn: checkpoint_rows.drop_checkpoint(conn, owner, run_id, epoch)
        ))

    async def record_tool_result(
        self, owner: str, run_id: str, tool_call_id: str, content: str, is_error: bool
    ) -> bool:
        now = self._clock()
        return await self._writes.submit(
            lambda conn: checkpoint_rows.record_tool_result(
                conn, owner, run_id, tool_call_id, content, is_error, now
            )
        )

    async def list_checkpoints(
        self, *, holder: str | None = None, phase: str | None = None
    ) -> list[tuple[str, str, str]]:
        result: list[tuple[str, str, str]] = await self._sql.read(
            lambda conn: checkpoint_rows.list_checkpoints(conn, holder=holder, phase=phase)
        )
        return result

    def _locked_thread(self, conn: Connection, thread_id: str) -> str | None:
        """The thread's owner, its row locked against other writers (``None``: no thread)."""
        query = _OWNER_LOCKED if self._lock_rows else _OWNER
        owner: str | None = conn.execute(query, {"b_thread": thread_id}).scalar()
        return owner

    async def close(self) -> None:
        await self._writes.close()
        await self._sql.close()


def _live(conn: Connection, thread_id: str) -> list[tuple[dict[str, Any], datetime]]:
    """The thread's messages (its current branch), oldest first, with their times."""
    rows = conn.execute(
        select(messages.c.data, messages.c.created_at)
        .where(messages.c.thread_id == thread_id).order_by(messages.c.position)
    ).all()
    return [(row.data, row.created_at) for row in rows]


def _frozen(live: list[tuple[dict[str, Any], datetime]]) -> list[dict[str, Any]]:
    """A branch's messages as its row keeps them."""
    return [{"message": m, "createdAt": t.astimezone(UTC).isoformat()} for m, t in live]


def _thawed(kept: Any) -> list[StoredMessage]:
    return [StoredMessage(e["message"], datetime.fromisoformat(e["createdAt"]))
            for e in kept or []]


def _thread_row(thread: Thread) -> dict[str, Any]:
    return {
        "id": thread.id,
        "resource_id": thread.resource_id,
        "agent_id": thread.agent_id,
        "title": thread.title,
        "metadata": dict(thread.metadata),
        "created_at": thread.created_at,
        "updated_at": thread.updated_at,
        "state": _wrap_state(thread.state),
        "interrupts": dict(thread.interrupts) if thread.interrupts is not None else None,
    }


def _interrupts(carryover: Carryover | None) -> dict[str, Any] | None:
    if carryover is None or carryover.interrupts is None:
        return None
    return dict(carryover.interrupts)


def _set_carryover(conn: Connection, thread_id: str, carryover: Carryover) -> None:
    conn.execute(
        _CARRYOVER,
        {
            "b_thread": thread_id,
            "b_state": _wrap_state(carryover.state),
            "b_interrupts": _interrupts(carryover),
        },
    )


def _set_title_if_empty(conn: Connection, thread_id: str, title: str) -> bool:
    result = conn.execute(_TITLE, {"b_thread": thread_id, "b_title": title})
    return bool(result.rowcount == 1)


def _append(
    conn: Connection, thread_id: str, batch: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """Append the messages of ``batch`` not stored yet, after the thread's last position."""
    known = _stored_ids(conn, thread_id, [m["id"] for m in batch])
    new = [m for m in batch if m["id"] not in known]
    if not new:
        return []
    last = conn.execute(_LAST_POSITION, {"b_thread": thread_id}).scalar()
    start = 0 if last is None else last + 1
    conn.execute(_INSERT_MESSAGES, _message_rows(thread_id, new, start, now))
    conn.execute(_TOUCH, {"b_thread": thread_id, "b_now": now})
    return [dict(m) for m in new]


def _message_rows(
    thread_id: str, batch: list[dict[str, Any]], start: int, now: datetime
) -> list[dict[str, Any]]:
    return [
        {
            "thread_id": thread_id,
            "position": start + offset,
            "message_id": m["id"],
            "role": m["role"],
            "tool_call_id": _tool_call_id(m),
            "data": m,
            "created_at": now,
        }
        for offset, m in enumerate(batch)
    ]


def _append_rows(
    thread_id: str, batch: list[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """``batch`` as the rows of ``pg_run_sql.append``."""
    return [
        {
            "thread_id": thread_id,
            "message_id": m["id"],
            "role": m["role"],
            "tool_call_id": _tool_call_id(m),
            "data": m,
            "now": now,
        }
        for m in batch
    ]


def _sqlite_read_runs(conn: Connection, reads: list[RunReadJob]) -> list[tuple[bool, Any]]:
    """The runs' reads of their threads (a ``ReadMany``): the thread rows in one statement
    (a new thread's read needs no other), then each existing thread's indexed queries."""
    ids = list(dict.fromkeys(r.thread_id for r in reads))
    rows: dict[str, Row[Any]] = {}
    for i in range(0, len(ids), _CHUNK):
        rows.update((row.id, row) for row in conn.execute(_THREADS, {"b_ids": ids[i : i + _CHUNK]}))
    answers: list[tuple[bool, Any]] = []
    for read in reads:
        row = rows.get(read.thread_id)
        if row is None:
            answers.append((True, RunRead(thread=None)))
            continue
        try:
            first = None
            if read.first_user:
                first = conn.execute(_FIRST_USER, {"b_thread": read.thread_id}).scalar()
            answers.append((True, RunRead(
                thread=_thread(row),
                stored_ids=frozenset(_stored_ids(conn, read.thread_id, read.message_ids)),
                answered=frozenset(_answered(conn, read.thread_id, read.tool_call_ids)),
                window=_window(conn, read.thread_id, read.last_n),
                first_user=first,
            )))
        except Exception as exc:  # this read's answer; the others still get theirs
            conn.rollback()
            answers.append((False, exc))
    return answers


def _pg_read_runs(conn: Connection, reads: list[RunReadJob]) -> list[tuple[bool, Any]]:
    """The runs' reads of their threads in one statement (a ``ReadMany``, ``pg_run_sql``);
    a window whose oldest tool result lost its call reaches back with a query of its own."""
    rows = pg_run_sql.read_many(conn, reads)
    answers: list[tuple[bool, Any]] = []
    for index, read in enumerate(reads):
        row = rows.get(index)
        if row is None:
            answers.append((True, RunRead(thread=None)))
            continue
        last_n = read.last_n
        newest: list[dict[str, Any]] = row.newest or []
        if len(newest) >= last_n > 0 and _issuer_missing(newest):
            shown = _window(conn, read.thread_id, last_n)  # reach back for a call's issuer
        else:
            shown = [dict(m) for m in window(newest, last_n)] if last_n > 0 else []
        answers.append((True, RunRead(
            thread=_thread(row),
            stored_ids=frozenset(row.stored_ids or ()),
            answered=frozenset(row.answered or ()),
            window=shown,
            first_user=row.first_user,
        )))
    return answers


def _sqlite_write_runs(conn: Connection, group: list[RunWrite]) -> list[tuple[bool, Any]]:
    """The run writes of distinct threads in a fixed number of statements, whatever the
    batch holds (a ``run_batches.WriteRuns``): the owners and last positions, the incoming ids
    already stored, then one executemany each for new threads, messages, touches, titles and
    carryovers. SQLite's write transaction holds the database write lock from its start
    (``BEGIN IMMEDIATE``), so what is read here still holds when the rows are written.

    New threads, messages and touches (every run writes them) go to the driver as rows of
    values (``_SQLITE_NEW_THREADS``, ``_SQLITE_NEW_MESSAGES``, ``_SQLITE_TOUCH``):
    SQLAlchemy's per-value processing doubled this function's CPU.
    """
    ids = [w.claim_row["id"] for w in group]
    known: dict[str, tuple[str, int | None]] = {}
    for i in range(0, len(ids), _CHUNK):
        for row in conn.execute(_OWNERS_AND_LAST, {"b_ids": ids[i : i + _CHUNK]}):
            known[row.id] = (row.resource_id, row.last)
    outcomes: list[tuple[bool, Any]] = []
    created: list[tuple[Any, ...]] = []
    rows: list[tuple[Any, ...]] = []
    titles: list[dict[str, Any]] = []
    carries: list[dict[str, Any]] = []
    existing: list[tuple[RunWrite, int]] = []
    for w in group:
        claim = w.claim_row
        found = known.get(claim["id"])
        if found is not None and found[0] != claim["resource_id"]:
            outcomes.append((False, NotFoundError("thread not found", code="THREAD_NOT_FOUND")))
            continue
        outcomes.append((True, None))
        if found is None:  # a new thread: nothing stored yet, positions start at 0
            when = sqlite_time(claim["now"])
            created.append((
                claim["id"], claim["resource_id"], claim["agent_id"], claim["title"], "{}",
                when, when, _json_or_null(claim["state"]), _json_or_null(claim["interrupts"]),
            ))
            rows += _positioned(w.rows, 0, when)
            continue
        existing.append((w, 0 if found[1] is None else found[1] + 1))
        if claim["title"]:
            titles.append({"b_thread": claim["id"], "b_title": claim["title"]})
        if claim["carry"]:
            carries.append(
                {"b_thread": claim["id"], "b_state": claim["state"],
                 "b_interrupts": claim["interrupts"]}
            )
    pairs = [(r["thread_id"], r["message_id"]) for w, _ in existing for r in w.rows]
    stored: set[tuple[str, str]] = set()
    if pairs:
        hits = conn.execute(_STORED_PAIRS, {"b_pairs": _json_dumps(pairs)})
        stored.update((row.thread_id, row.message_id) for row in hits)
    touches: list[tuple[str, str]] = []
    for w, start in existing:
        fresh = [r for r in w.rows if (r["thread_id"], r["message_id"]) not in stored]
        if fresh:
            when = sqlite_time(w.claim_row["now"])
            rows += _positioned(fresh, start, when)
            touches.append((when, w.claim_row["id"]))
    for sql, values in ((_SQLITE_NEW_THREADS, created), (_SQLITE_NEW_MESSAGES, rows),
                        (_SQLITE_TOUCH, touches)):
        if values:
            conn.exec_driver_sql(sql, values)
    for statement, params in ((_TITLE, titles), (_CARRYOVER, carries)):
        if params:
            conn.execute(statement, params)
    return outcomes


def _json_or_null(value: Any) -> str | None:
    """A ``JSON(none_as_null=True)`` value as SQLAlchemy binds it."""
    return None if value is None else _json_dumps(value)


def _positioned(rows: list[dict[str, Any]], start: int, when: str) -> list[tuple[Any, ...]]:
    """Message rows of a ``RunWrite`` as values of ``_SQLITE_NEW_MESSAGES``, from
    position ``start`` on, created at ``when`` (``sqlite_time``)."""
    return [
        (r["thread_id"], start + offset, r["message_id"], r["role"], r["tool_call_id"],
         _json_dumps(r["data"]), when)
        for offset, r in enumerate(rows)
    ]


def _stored_ids(conn: Connection, thread_id: str, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        found.update(
            conn.execute(_STORED_IDS, {"b_thread": thread_id, "b_ids": ids[i : i + _CHUNK]})
            .scalars()
        )
    return found


def _answered(conn: Connection, thread_id: str, call_ids: list[str]) -> set[str]:
    """Of ``call_ids``, those a stored ``tool`` message of the thread answers (indexed)."""
    found: set[str] = set()
    for i in range(0, len(call_ids), _CHUNK):
        found.update(
            conn.execute(_ANSWERED, {"b_thread": thread_id, "b_ids": call_ids[i : i + _CHUNK]})
            .scalars()
        )
    return found


def _window(conn: Connection, thread_id: str, last_n: int) -> list[dict[str, Any]]:
    """The newest ``last_n`` messages, reaching back (within a bound) to the assistant
    message that issued any call answered among them; ``window`` then trims exactly."""
    if last_n <= 0:
        return []
    limit = last_n
    bound = 4 * last_n + _WINDOW_SLACK
    while True:
        newest = conn.execute(_NEWEST, {"b_thread": thread_id, "b_limit": limit})
        rows = list(reversed(newest.scalars().all()))
        if len(rows) < limit or limit >= bound or not _issuer_missing(rows):
            return [dict(m) for m in window(rows, last_n)]
        limit = min(bound, limit * 2)


def _issuer_missing(rows: Sequence[Mapping[str, Any]]) -> bool:
    issued = {c for m in rows for c in call_ids(m)}
    return any((c := answered_call(m)) is not None and c not in issued for m in rows)


def _tool_call_id(message: Mapping[str, Any]) -> str | None:
    value = message.get("toolCallId")
    return value if isinstance(value, str) else None
