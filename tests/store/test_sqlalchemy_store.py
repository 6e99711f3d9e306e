"""What only the SQL store has: migrations, durability, SQLite set-up, concurrent writers."""

from __future__ import annotations

import ast
import asyncio
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from tests.backends import SQL_BACKENDS, StepClock, dispose, in_transaction, pg_schema_engine

from iobridge.errors import InputError, NotFoundError
from iobridge.store import MemoryThreadStore, SqlThreadStore, open_store, sqlalchemy_store, upgrade
from iobridge.store import base as base_module
from iobridge.store.base import Carryover, StoreUnavailable, Thread, is_outage
from iobridge.store.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    upgrade_engine,
)
from iobridge.store.records import metadata
from iobridge.store.sql_executor import MAX_READ_BATCH
from iobridge.store.sqlalchemy_store import _STORED_PAIRS, make_engine


@asynccontextmanager
async def empty_engine(kind: str, tmp_path: Path) -> AsyncIterator[Engine | AsyncEngine]:
    """An engine on a database (or schema) with no tables at all."""
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        try:
            yield engine
        finally:
            await dispose(engine)
    else:
        async with pg_schema_engine() as engine:
            yield engine


async def _tables(engine: Engine | AsyncEngine) -> set[str]:
    return set(await in_transaction(engine, lambda c: inspect(c).get_table_names()))


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_alembic_upgrade_from_empty_database(kind: str, tmp_path: Path) -> None:
    async with empty_engine(kind, tmp_path) as engine:
        assert await _tables(engine) == set()
        assert await current_revision(engine) is None
        await upgrade_engine(engine)
        assert await _tables(engine) == {
            "iobridge_threads",
            "iobridge_messages",
            "iobridge_branches",
            "iobridge_run_checkpoints",
            "iobridge_run_tool_results",
            "iobridge_alembic_version",
        }
        assert await current_revision(engine) == head_revision() == "0005"
        # Upgrading again is a no-op, and the store works on the result.
        await upgrade_engine(engine)
        store = SqlThreadStore(engine)
        await store.create_thread("t1", resource_id="r")
        assert await store.append_messages("t1", [{"id": "m", "role": "user", "content": ""}])


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_upgrade_from_0001_keeps_threads_and_adds_state_and_interrupts(
    kind: str, tmp_path: Path
) -> None:
    async with empty_engine(kind, tmp_path) as engine:

        def to_0001(connection: Any) -> None:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "0001")

        def old_thread(connection: Any) -> None:
            to_0001(connection)
            connection.execute(text(
                "INSERT INTO iobridge_threads (id, resource_id, title, metadata, created_at, "
                "updated_at) VALUES ('old', 'r', 'kept', '{}', CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP)"))

        await in_transaction(engine, old_thread)
        assert await current_revision(engine) == "0001"
        await upgrade_engine(engine)
        assert await current_revision(engine) == head_revision() == "0005"
        store = SqlThreadStore(engine)
        old = await store.get_thread("old")
        assert old is not None and old.title == "kept"
        assert old.current_branch is None  # never branched: "main"
        assert [b.id for b in await store.list_branches("old")] == ["main"]
        assert old.state is None and old.interrupts is None
        record = {"open": [{"id": "i1", "reason": "approval"}], "answered": []}
        await store.write_for_run("old", resource_id="r", agent_id=None, messages=[],
                                  carryover=Carryover(state={"n": 1}, interrupts=record))
        again = await store.get_thread("old")
        assert again is not None and again.state == {"n": 1} and again.interrupts == record
        await store.write_for_run("new", resource_id="r", agent_id=None, messages=[],
                                  carryover=Carryover(state=[1], interrupts=None))
        new = await store.get_thread("new")
        assert new is not None and new.state == [1] and new.interrupts is None


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_concurrent_upgrades_of_an_empty_database(kind: str, tmp_path: Path) -> None:
    """Server processes starting together: one migrates, the others wait and find head."""
    async with empty_engine(kind, tmp_path) as engine:
        others = [
            make_engine(
                engine.url.render_as_string(hide_password=False),
                **(
                    {}
                    if kind == "sqlite"
                    else {
                        "connect_args": {
                            "server_settings": {"search_path": await _search_path(engine)}
                        }
                    }
                ),
            )
            for _ in range(3)
        ]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(upgrade_engine(e) for e in [engine, *others])), timeout=60
            )
        finally:
            for other in others:
                await dispose(other)
        assert await current_revision(engine) == head_revision()


async def test_upgrade_by_url_then_open_without_migrating(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    await upgrade(url)
    store = await open_store(url, migrate=False)
    try:
        assert await store.list_threads(None) == ([], None)
    finally:
        await store.close()


async def test_memory_url_opens_memory_store() -> None:
    assert isinstance(await open_store("memory://"), MemoryThreadStore)


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_history_survives_reopening_from_a_fresh_engine(kind: str, tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [
        {"id": "u1", "role": "user", "content": "weather?"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"},
    ]
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'durable.db'}"
        first = await open_store(url)
        await first.create_thread("th", resource_id="r", title="Weather", metadata={"a": 1})
        await first.append_messages("th", messages)
        before = await first.get_thread("th")
        await first.close()
        second = await open_store(url)
        try:
            assert await second.get_thread("th") == before
            assert await second.list_messages("th") == messages
        finally:
            await second.close()
        return
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        first = SqlThreadStore(engine)
        await first.create_thread("th", resource_id="r", title="Weather", metadata={"a": 1})
        await first.append_messages("th", messages)
        before = await first.get_thread("th")
        await engine.dispose()  # every pooled connection closed; a fresh one reads back
        second = SqlThreadStore(engine)
        assert await second.get_thread("th") == before
        assert await second.list_messages("th") == messages


async def test_sqlite_uses_wal_and_busy_timeout(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'wal.db'}")
    assert isinstance(store, SqlThreadStore)
    assert isinstance(store.engine, Engine)  # one engine, the standard library's driver
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
    finally:
        await store.close()


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_concurrent_appends_from_two_engines(kind: str, tmp_path: Path) -> None:
    """Two stores (two pools, as two server processes would have) append to one thread."""

    async def run(a: SqlThreadStore, b: SqlThreadStore) -> None:
        await a.create_thread("th", resource_id="r")
        jobs = [
            (a if i % 2 else b).append_messages(
                "th", [{"id": f"m{i}-{j}", "role": "user", "content": ""} for j in range(3)]
            )
            for i in range(20)
        ]
        # The same message id from both writers at once is stored exactly once.
        jobs += [
            s.append_messages("th", [{"id": "dup", "role": "user", "content": ""}]) for s in (a, b)
        ]
        await asyncio.wait_for(asyncio.gather(*jobs), timeout=30)
        stored = await a.list_messages("th")
        ids = [m["id"] for m in stored]
        assert len(ids) == 61 and len(set(ids)) == 61
        for i in range(20):  # each batch stays contiguous and in order
            start = ids.index(f"m{i}-0")
            assert ids[start : start + 3] == [f"m{i}-{j}" for j in range(3)]

    async with _two_stores(kind, tmp_path) as (a, b):
        await run(a, b)


async def _search_path(engine: Engine | AsyncEngine) -> str:
    assert isinstance(engine, AsyncEngine)
    async with engine.connect() as conn:
        return str((await conn.execute(text("SHOW search_path"))).scalar())


async def test_store_clock_is_used(tmp_path: Path) -> None:
    clock = StepClock()
    store = await open_store(f"sqlite:///{tmp_path / 'c.db'}", clock=clock)
    try:
        thread = await store.create_thread("t", resource_id="r")
        assert thread.created_at == clock.now
        assert (await store.get_thread("t")) == thread
    finally:
        await store.close()


def test_plain_alembic_cli_path_uses_the_url(tmp_path: Path) -> None:
    """``alembic -x``-style use without a passed connection: env.py opens its own engine."""
    from alembic import command

    from iobridge.store.migrate import alembic_config

    url = f"sqlite:///{tmp_path / 'cli%.db'}"
    command.upgrade(alembic_config(url), "head")
    assert (tmp_path / "cli%.db").exists()

    async def check() -> str | None:
        engine = make_engine(url)
        try:
            return await current_revision(engine)
        finally:
            await dispose(engine)

    assert asyncio.run(check()) == head_revision()


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_concurrent_run_writes_from_two_engines(kind: str, tmp_path: Path) -> None:
    """Runs on two server processes write one thread that does not exist yet: it is created
    once, every message is stored once, each write's new messages stay contiguous."""

    async def run(a: SqlThreadStore, b: SqlThreadStore) -> None:
        shared = {"id": "u-shared", "role": "user", "content": ""}
        jobs = [
            (a if i % 2 else b).write_for_run(
                "th", resource_id="r", agent_id="x", title=f"title {i}",
                messages=[shared, *({"id": f"m{i}-{j}", "role": "assistant"} for j in range(3))],
            )
            for i in range(20)
        ]
        await asyncio.wait_for(asyncio.gather(*jobs), timeout=30)
        ids = [m["id"] for m in await a.list_messages("th")]
        assert len(ids) == 61 and len(set(ids)) == 61 and "u-shared" in ids
        for i in range(20):
            start = ids.index(f"m{i}-0")
            assert ids[start : start + 3] == [f"m{i}-{j}" for j in range(3)]
        thread = await b.get_thread("th")
        assert thread is not None and thread.title.startswith("title ")
        # A foreign resource racing an owner's write is refused and stores nothing.
        owner, foreign = await asyncio.gather(
            a.write_for_run("th", resource_id="r", agent_id="x", messages=[{"id": "ok",
                            "role": "user"}]),
            b.write_for_run("th", resource_id="other", agent_id="x", title="mine",
                            messages=[{"id": "bad", "role": "user"}],
                            carryover=Carryover(state={"stolen": True})),
            return_exceptions=True,
        )
        assert owner is None and isinstance(foreign, NotFoundError)
        ids = [m["id"] for m in await a.list_messages("th")]
        assert ids[-1] == "ok" and "bad" not in ids
        after = await a.get_thread("th")
        assert after is not None and after.state is None and after.title == thread.title

    async with _two_stores(kind, tmp_path) as (a, b):
        await run(a, b)


@asynccontextmanager
async def _two_stores(
    kind: str, tmp_path: Path
) -> AsyncIterator[tuple[SqlThreadStore, SqlThreadStore]]:
    """Two stores on one migrated database, each with its own pool."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'two.db'}"
        a, b = await open_store(url), await open_store(url)
        assert isinstance(a, SqlThreadStore) and isinstance(b, SqlThreadStore)
        try:
            yield a, b
        finally:
            await a.close()
            await b.close()
        return
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        other = make_engine(
            engine.url.render_as_string(hide_password=False),
            connect_args={"server_settings": {"search_path": await _search_path(engine)}},
        )
        try:
            yield SqlThreadStore(engine), SqlThreadStore(other)
        finally:
            await other.dispose()


async def test_a_run_costs_postgresql_five_statements(tmp_path: Path) -> None:
    """The run path on PostgreSQL: one read, then two statements per write (the thread
    upsert, the append), on a new thread and on one with history alike."""
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        store = SqlThreadStore(engine)
        statements: list[str] = []
        event.listen(
            engine.sync_engine, "before_cursor_execute",
            lambda *args: statements.append(args[2].split()[0]),
        )

        async def one_run(n: int) -> list[str]:
            statements.clear()
            incoming = {"id": f"u{n}", "role": "user", "content": "hi"}
            await store.read_for_run(
                "t", message_ids=[f"u{n}"], tool_call_ids=["c"], last_n=40, first_user=True
            )
            await store.write_for_run("t", resource_id="r", agent_id="a", messages=[incoming])
            await store.write_for_run(
                "t", resource_id="r", agent_id="a", title="T", carryover=Carryover(state=n),
                messages=[incoming, {"id": f"a{n}", "role": "assistant", "content": "yo"}],
            )
            return list(statements)

        assert await one_run(0) == ["SELECT", "WITH", "WITH", "WITH", "WITH"]
        assert await one_run(1) == ["SELECT", "WITH", "WITH", "WITH", "WITH"]
        assert [m["id"] for m in await store.list_messages("t")] == ["u0", "a0", "u1", "a1"]
        thread = await store.get_thread("t")
        assert thread is not None and (thread.title, thread.state) == ("T", 1)


#: The statements one batch of run writes costs (two groups: ``t1`` is written twice), by
#: their first word: the same whatever the number of runs in the batch.
BATCH_STATEMENTS = {
    # The upsert and the append of each group.
    "postgres": ["WITH", "WITH", "WITH", "WITH"],
    # BEGIN IMMEDIATE; owners and last positions, new threads, their messages; then for t1:
    # owners, stored ids, its message, its touch, its title if empty.
    "sqlite": [
        "BEGIN", "SELECT", "INSERT", "INSERT", "SELECT", "SELECT", "INSERT", "UPDATE", "UPDATE"
    ],
}


@pytest.mark.parametrize("runs", [3, 30])
@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_run_writes_of_one_batch_share_a_few_statements(
    kind: str, runs: int, tmp_path: Path
) -> None:
    """Concurrent runs' writes committed together cost a fixed number of statements, however
    many runs; a foreign thread's write fails alone with nothing written, a thread written
    twice in one batch keeps its writes in order, and a thread with history gets only the
    messages it does not hold, after its last one."""
    async with _one_store(kind, tmp_path) as store:
        await store.write_for_run(
            "theirs", resource_id="other", agent_id=None, title="Theirs",
            messages=[{"id": "x", "role": "user"}],
        )
        statements: list[str] = []

        def record(*args: Any) -> None:
            statements.append(args[2].split()[0])

        writes: list[Any] = [
            store.write_for_run(
                f"t{i}", resource_id="r", agent_id="a", title=f"T{i}",
                carryover=Carryover(state=i) if i % 2 else None,
                messages=[{"id": f"u{i}", "role": "user"}, {"id": f"a{i}", "role": "assistant"}],
            )
            for i in range(runs)
        ]
        writes.insert(2, store.write_for_run(
            "theirs", resource_id="r", agent_id="a", title="mine",
            carryover=Carryover(state="stolen"), messages=[{"id": "bad", "role": "user"}],
        ))
        writes.append(store.write_for_run(
            "t1", resource_id="r", agent_id="a", title="later",
            messages=[{"id": "u1", "role": "user"}, {"id": "late", "role": "user"}],
        ))
        event.listen(Engine, "before_cursor_execute", record)
        try:
            results = await asyncio.gather(*writes, return_exceptions=True)
        finally:
            event.remove(Engine, "before_cursor_execute", record)
        foreign = results.pop(2)
        assert isinstance(foreign, NotFoundError) and foreign.code == "THREAD_NOT_FOUND"
        assert results == [None] * (runs + 1)
        assert statements == BATCH_STATEMENTS[kind]
        theirs = await store.get_thread("theirs")
        assert theirs is not None and (theirs.title, theirs.state) == ("Theirs", None)
        assert [m["id"] for m in await store.list_messages("theirs")] == ["x"]
        for i in range(runs):
            thread = await store.get_thread(f"t{i}")
            assert thread is not None
            assert (thread.title, thread.state) == (f"T{i}", i if i % 2 else None)
            ids = [m["id"] for m in await store.list_messages(f"t{i}")]
            assert ids == [f"u{i}", f"a{i}", *(["late"] if i == 1 else [])]

        # A later batch on threads with history: titles stay, carryovers and touches apply.
        before = await store.get_thread("t0")
        assert before is not None
        await asyncio.gather(
            store.write_for_run("t0", resource_id="r", agent_id="a", title="ignored",
                                carryover=Carryover(state="next"),
                                messages=[{"id": "a0", "role": "assistant"},
                                          {"id": "u0b", "role": "user"}]),
            store.write_for_run("t2", resource_id="r", agent_id="a",
                                messages=[{"id": "u2", "role": "user"}]),
        )
        after = await store.get_thread("t0")
        assert after is not None and (after.title, after.state) == ("T0", "next")
        assert after.updated_at > before.updated_at
        assert [m["id"] for m in await store.list_messages("t0")] == ["u0", "a0", "u0b"]
        assert [m["id"] for m in await store.list_messages("t2")] == ["u2", "a2"]


def test_sqlite_looks_up_stored_ids_by_index() -> None:
    """The stored-ids lookup of a batch probes the (thread, message) index per pair: a
    row-value ``IN`` would scan every message of the database."""
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.connect() as conn:
        plan = conn.execute(
            text("EXPLAIN QUERY PLAN " + str(_STORED_PAIRS)), {"b_pairs": '[["t", "m"]]'}
        ).all()
    details = [row[3] for row in plan]
    assert any(d.startswith("SEARCH m USING") and "message_id=?" in d for d in details), details
    assert not any(d.startswith("SCAN m") for d in details), details


@asynccontextmanager
async def _one_store(kind: str, tmp_path: Path) -> AsyncIterator[SqlThreadStore]:
    """A store on a migrated, empty database (or schema)."""
    if kind == "sqlite":
        store = await open_store(f"sqlite:///{tmp_path / 'one.db'}")
        assert isinstance(store, SqlThreadStore)
        try:
            yield store
        finally:
            await store.close()
        return
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        store = SqlThreadStore(engine)
        try:
            yield store
        finally:
            await store.close()


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_runs_reads_of_one_batch_share_a_statement(kind: str, tmp_path: Path) -> None:
    """A burst of runs' reads of their threads is answered a batch at a time, each batch
    with one statement for all its new threads (PostgreSQL: for all its threads); every run
    gets its own thread's answer, and other reads in the batch still get theirs."""
    async with _one_store(kind, tmp_path) as store:
        await store.write_for_run(
            "old", resource_id="r", agent_id=None,
            messages=[{"id": "u1", "role": "user", "content": "first"},
                      {"id": "a1", "role": "assistant", "content": "reply"}],
        )
        statements: list[str] = []

        def record(*args: Any) -> None:
            statements.append(args[2].split()[0])

        reads: list[Any] = [
            store.read_for_run(f"new{i}", message_ids=[f"m{i}"], tool_call_ids=[], last_n=10)
            for i in range(120)
        ]
        reads.insert(5, store.read_for_run(
            "old", message_ids=["u1", "u2"], tool_call_ids=["c"], last_n=1, first_user=True
        ))
        reads.insert(9, store.get_thread("old"))
        event.listen(Engine, "before_cursor_execute", record)
        try:
            answers = await asyncio.gather(*reads)
        finally:
            event.remove(Engine, "before_cursor_execute", record)
        thread = answers.pop(9)
        assert isinstance(thread, Thread) and thread.id == "old"
        old = answers.pop(5)
        assert old.thread is not None and old.thread.id == "old"
        assert old.stored_ids == {"u1"} and old.answered == frozenset()
        assert [m["id"] for m in old.window] == ["a1"]
        assert old.first_user is not None and old.first_user["content"] == "first"
        assert all(a.thread is None and a.window == [] for a in answers)
        # 122 reads: the readers' first single reads (SQLite has 2, PostgreSQL 4), then
        # batches of MAX_READ_BATCH.
        batches = (2 if kind == "sqlite" else 4) + -(-122 // MAX_READ_BATCH)
        per_old = 0 if kind == "postgres" else 4  # SQLite: its first user, ids, calls, window
        selects = [s for s in statements if s == "SELECT"]
        assert len(selects) <= batches + 1 + per_old, statements  # + get_thread's


async def test_postgresql_reads_run_in_autocommit_and_writes_in_a_transaction() -> None:
    """A read batch sends no BEGIN and no ROLLBACK (under READ COMMITTED each statement takes
    its own snapshot either way): one round trip fewer on each side of its statements."""
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        store = SqlThreadStore(engine)

        def in_transaction(conn: Any) -> bool:
            conn.execute(text("SELECT 1"))
            return bool(conn.connection.driver_connection.is_in_transaction())

        assert await store._sql.read(in_transaction) is False
        assert await store._sql.transaction([in_transaction]) == [True]
        await store.close()


async def test_postgresql_reads_share_a_few_connections_and_a_bad_read_fails_alone() -> None:
    """A burst of reads is answered in batches on the readers' pooled connections: no new
    connection per read once the pool is warm (an overflowing pool opened and closed them)."""
    async with pg_schema_engine() as engine:
        await upgrade_engine(engine)
        store = SqlThreadStore(engine)
        await store.write_for_run(
            "t", resource_id="r", agent_id=None, messages=[{"id": "m", "role": "user"}]
        )
        connects: list[object] = []
        checkouts: list[object] = []
        event.listen(engine.sync_engine.pool, "connect", lambda *args: connects.append(args))
        event.listen(engine.sync_engine.pool, "checkout", lambda *args: checkouts.append(args))
        reads: list[Any] = [store.get_thread("t") for _ in range(300)]
        reads.insert(10, store.list_stored_messages("t", before="no-such-message"))
        answers = await asyncio.gather(*reads, return_exceptions=True)
        bad = answers.pop(10)
        assert isinstance(bad, InputError) and bad.code == "INVALID_CURSOR"
        assert all(isinstance(a, Thread) and a.id == "t" for a in answers)
        assert len(connects) <= 4  # the readers' connections, opened once
        # the first reads go out one each while readers are free; the rest queue in batches
        assert len(checkouts) <= 4 + -(-301 // MAX_READ_BATCH)


async def test_every_sqlite_spelling_opens_the_file_through_the_standard_library(
    tmp_path: Path,
) -> None:
    """One access path: ``sqlite://``, ``sqlite+pysqlite://`` and the older
    ``sqlite+aiosqlite://`` all open the same file through ``sqlite3``; no async driver."""
    stores = [await open_store(f"{scheme}:///{tmp_path / 'same.db'}")
              for scheme in ("sqlite", "sqlite+pysqlite", "sqlite+aiosqlite")]
    try:
        await stores[0].create_thread("t", resource_id="r")
        for store in stores:
            assert isinstance(store, SqlThreadStore) and isinstance(store.engine, Engine)
            assert store.engine.driver == "pysqlite"
            assert (await store.get_thread("t")) is not None
        assert "aiosqlite" not in sys.modules
    finally:
        for store in stores:
            await store.close()


async def test_a_locked_sqlite_database_is_an_outage_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that does not answer in time raises the store's ``StoreUnavailable``
    (answered 503), whatever the driver's own error."""
    monkeypatch.setattr(sqlalchemy_store, "SQLITE_BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "locked.db"
    store = await open_store(f"sqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        with pytest.raises(StoreUnavailable, match="database is locked") as caught:
            await store.create_thread("t", resource_id="r")
        assert is_outage(caught.value)
        assert isinstance(caught.value.__cause__, OperationalError)
        holder.execute("ROLLBACK")
        assert await store.get_thread("t") is None
    finally:
        holder.close()
        await store.close()


def test_the_abstract_store_knows_no_sqlalchemy() -> None:
    """``store/base.py`` is the interface every store implements: it imports no database
    library (the SQL store maps its driver's outages to ``StoreUnavailable``)."""
    tree = ast.parse(Path(base_module.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [name for name in imported if name.split(".")[0] == "sqlalchemy"]


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_the_migrated_schema_is_the_one_the_store_declares(kind: str, tmp_path: Path) -> None:
    """The migrations build exactly ``records.metadata``: tables, columns, their types and
    nullability, indexes and keys (alembic's own comparison), on SQLite and PostgreSQL."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    def differences(conn: Any) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(context, metadata)
                if not (isinstance(d, tuple) and d[0] == "remove_table"
                        and d[1].name == "iobridge_alembic_version")]

    async with empty_engine(kind, tmp_path) as engine:
        await upgrade_engine(engine)
        assert await in_transaction(engine, differences) == []


async def test_run_writes_store_the_text_sqlalchemy_binds_on_sqlite(tmp_path: Path) -> None:
    """The run writes hand SQLite's driver their values directly (``_SQLITE_ROWS``): the
    times, JSON and NULLs they store are the text SQLAlchemy's binding of the same values
    stores, so reads, listings and keyset cursors see one format."""
    path = tmp_path / "rows.db"
    moments = iter([
        datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC),  # microsecond 0: still six digits
        datetime(2026, 3, 1, 10, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
    ] * 4)
    store = await open_store(f"sqlite:///{path}", clock=lambda: next(moments))
    async with store:
        message = {"id": "m1", "role": "user", "content": "héllo", "n": 2**63 - 1}
        await store.write_for_run("driver", resource_id="r", agent_id="a", messages=[message])
        await store.write_for_run(  # an existing thread: a touch and a second message
            "driver", resource_id="r", agent_id="a",
            messages=[{"id": "m2", "role": "assistant", "content": "ok"}],
        )
        await store.create_thread("bound", resource_id="r", agent_id="a")
        await store.append_messages("bound", [message, {"id": "m2", "role": "assistant",
                                                        "content": "ok"}])
        listed, _ = await store.list_threads(["r"])
        assert {t.id: t.updated_at for t in listed} == {
            "driver": datetime(2026, 3, 1, 8, 30, 0, 123456, tzinfo=UTC),
            "bound": datetime(2026, 3, 1, 8, 30, 0, 123456, tzinfo=UTC),
        }
        for thread_id in ("driver", "bound"):
            stored = await store.list_messages(thread_id)
            assert [m["id"] for m in stored] == ["m1", "m2"] and stored[0] == message
    with sqlite3.connect(path) as db:
        threads_rows = db.execute(
            "SELECT id, typeof(created_at), created_at, updated_at, metadata, state,"
            " interrupts FROM iobridge_threads ORDER BY id").fetchall()
        message_rows = db.execute(
            "SELECT thread_id, position, role, tool_call_id, data, created_at"
            " FROM iobridge_messages ORDER BY thread_id, position").fetchall()
    bound, driver = threads_rows
    assert driver == ("driver", "text", "2026-03-01 09:00:00.000000",
                      "2026-03-01 08:30:00.123456", "{}", None, None)
    assert bound == ("bound", "text", "2026-03-01 09:00:00.000000",
                     "2026-03-01 08:30:00.123456", "{}", None, None)
    first = '{"id":"m1","role":"user","content":"héllo","n":9223372036854775807}'
    second = '{"id":"m2","role":"assistant","content":"ok"}'
    assert message_rows == [
        ("bound", 0, "user", None, first, "2026-03-01 08:30:00.123456"),
        ("bound", 1, "assistant", None, second, "2026-03-01 08:30:00.123456"),
        ("driver", 0, "user", None, first, "2026-03-01 09:00:00.000000"),
        ("driver", 1, "assistant", None, second, "2026-03-01 08:30:00.123456"),
    ]
