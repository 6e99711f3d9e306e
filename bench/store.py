"""Thread-store latency: message append and thread listing on a loaded database.

Loads N threads × M messages (default 10,000 × 20) straight through SQLAlchemy Core in large
batches, then times a sample of store operations and prints median and p99 per operation.
Runs on a SQLite file, and on PostgreSQL when ``IOBRIDGE_TEST_POSTGRES_URL`` (or
``--postgres-url``) is set, in a throw-away schema.

    .venv/bin/python bench/store.py [--threads 10000] [--messages 20] [--samples 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.store.migrate import upgrade_engine
from iobridge.store.records import messages, threads
from iobridge.store.sqlalchemy_store import SqlThreadStore, make_engine

RESOURCES = 100
BATCH = 5_000


def message(thread: int, index: int) -> dict[str, Any]:
    role = "user" if index % 2 == 0 else "assistant"
    return {"id": f"m{thread}-{index}", "role": role, "content": f"message {index} " * 8}


def _load_rows(conn: Connection, n_threads: int, n_messages: int) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    thread_rows = [
        {
            "id": f"t{i}",
            "resource_id": f"r{i % RESOURCES}",
            "agent_id": "demo",
            "title": f"Thread {i}",
            "metadata": {},
            "created_at": base + timedelta(seconds=i),
            "updated_at": base + timedelta(seconds=i),
        }
        for i in range(n_threads)
    ]
    for i in range(0, len(thread_rows), BATCH):
        conn.execute(threads.insert(), thread_rows[i : i + BATCH])
    rows: list[dict[str, Any]] = []
    for t in range(n_threads):
        for m in range(n_messages):
            data = message(t, m)
            rows.append(
                {
                    "thread_id": f"t{t}",
                    "position": m,
                    "message_id": data["id"],
                    "role": data["role"],
                    "tool_call_id": None,
                    "data": data,
                    "created_at": base,
                }
            )
            if len(rows) >= BATCH:
                conn.execute(messages.insert(), rows)
                rows = []
    if rows:
        conn.execute(messages.insert(), rows)


async def in_transaction(engine: Engine | AsyncEngine, fn: Callable[[Connection], object]) -> None:
    """``fn(conn)`` in one committed transaction: SQLite's sync engine in a worker thread,
    PostgreSQL's async engine through ``run_sync``."""
    if isinstance(engine, Engine):

        def run() -> None:
            with engine.begin() as conn:
                fn(conn)

        await asyncio.to_thread(run)
        return
    async with engine.begin() as conn:
        await conn.run_sync(fn)


async def load(engine: Engine | AsyncEngine, n_threads: int, n_messages: int) -> float:
    """Bulk-insert the fixture; returns seconds taken."""
    started = time.perf_counter()
    await in_transaction(engine, lambda conn: _load_rows(conn, n_threads, n_messages))
    return time.perf_counter() - started


async def timed(samples: int, op: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    """Median and p99 latency of ``op(i)`` in milliseconds."""
    latencies = []
    for i in range(samples):
        started = time.perf_counter()
        await op(i)
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return statistics.median(latencies), latencies[min(len(latencies) - 1, int(0.99 * samples))]


async def measure(
    name: str, engine: Engine | AsyncEngine, args: argparse.Namespace
) -> list[tuple[str, str, float, float]]:
    await upgrade_engine(engine)
    seconds = await load(engine, args.threads, args.messages)
    total = args.threads * args.messages
    print(f"{name}: loaded {args.threads} threads / {total} messages in {seconds:.1f} s")
    store = SqlThreadStore(engine)
    rng = random.Random(7)
    pick = [rng.randrange(args.threads) for _ in range(args.samples)]
    results = []

    async def append(i: int) -> None:
        await store.append_messages(f"t{pick[i]}", [message(pick[i], args.messages + i)])

    async def append_full_history(i: int) -> None:
        # A stock AG-UI client resends the whole thread: all ids known but the last.
        t = pick[i]
        history = [message(t, m) for m in range(args.messages)] + [message(t, 10_000 + i)]
        await store.append_messages(f"t{t}", history)

    async def list_first(i: int) -> None:
        await store.list_threads([f"r{pick[i] % RESOURCES}"], limit=20)

    cursors = {r: (await store.list_threads([f"r{r}"], limit=20))[1] for r in range(RESOURCES)}

    async def list_next(i: int) -> None:
        resource = pick[i] % RESOURCES
        await store.list_threads([f"r{resource}"], limit=20, cursor=cursors[resource])

    async def read_messages(i: int) -> None:
        await store.list_messages(f"t{pick[i]}", limit=20)

    for label, op in [
        ("append 1 message", append),
        ("append (full history resent)", append_full_history),
        ("list threads, page 1", list_first),
        ("list threads, page 2", list_next),
        ("list last 20 messages", read_messages),
    ]:
        median, p99 = await timed(args.samples, op)
        results.append((name, label, median, p99))
    await store.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--postgres-url", default=os.environ.get("IOBRIDGE_TEST_POSTGRES_URL"))
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        results += await measure("sqlite", engine, args)
    if args.postgres_url:
        schema = f"iobridge_bench_{uuid.uuid4().hex[:8]}"
        admin = make_engine(args.postgres_url)
        await in_transaction(admin, lambda conn: conn.execute(text(f'CREATE SCHEMA "{schema}"')))
        try:
            engine = make_engine(
                args.postgres_url, connect_args={"server_settings": {"search_path": schema}}
            )
            results += await measure("postgresql", engine, args)
        finally:
            drop = text(f'DROP SCHEMA "{schema}" CASCADE')
            await in_transaction(admin, lambda conn: conn.execute(drop))
            assert isinstance(admin, AsyncEngine)
            await admin.dispose()
    else:
        print("postgresql: skipped (set IOBRIDGE_TEST_POSTGRES_URL or --postgres-url)")

    print()
    print(f"{'backend':<11} {'operation':<30} {'median ms':>10} {'p99 ms':>9}")
    for backend, label, median, p99 in results:
        print(f"{backend:<11} {label:<30} {median:>10.2f} {p99:>9.2f}")


if __name__ == "__main__":
    asyncio.run(main())
