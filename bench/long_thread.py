"""Per-run cost on a thread of 100,000 messages vs on fresh threads (issue 10: within 1.2x).

Seeds one thread straight through the store API (``open_store`` + ``append_messages`` in
large batches) in a fresh database, then starts a server in its own process on it and times
K chat turns (one new user message, 5 deltas) on the big thread against K on fresh threads,
alternating the two so that load from elsewhere on the machine hits both alike. Per kind:
median and p99 wall time of a run (POST to end of stream) and server CPU per run (from /proc,
measured until the server is idle again after each run, so work after the stream counts).
On the default SQLite store, and on PostgreSQL when ``IOBRIDGE_TEST_POSTGRES_URL`` is set.

    .venv/bin/python bench/long_thread.py [--messages 100000] [--runs 10]
        [--stores sqlite postgres] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _harness import (
    ServerProcess,
    add_setting_option,
    check,
    database,
    extra_settings,
    percentile,
    post_run,
    ratio,
    run_body,
    store_kinds,
)

BIG = "big-thread"
#: The resource runs act for with authentication off (``auth.mode = none``).
RESOURCE = "default"
BATCH = 5_000


def message(index: int) -> dict[str, Any]:
    role = "user" if index % 2 == 0 else "assistant"
    return {"id": f"seed-{index}", "role": role, "content": f"message {index} " * 8}


async def seed(url: str, count: int) -> float:
    """Create the big thread with ``count`` messages; returns seconds taken."""
    from iobridge.store import open_store

    started = time.perf_counter()
    store = await open_store(url)
    try:
        await store.create_thread(BIG, resource_id=RESOURCE, agent_id="bench")
        for start in range(0, count, BATCH):
            await store.append_messages(
                BIG, [message(i) for i in range(start, min(count, start + BATCH))]
            )
    finally:
        await store.close()
    return time.perf_counter() - started


def timed_run(server: ServerProcess, thread_id: str, run_id: str) -> tuple[float, float]:
    """(wall seconds, server CPU seconds) of one chat turn."""
    before = server.settle_cpu(quiet=0.011, interval=0.1)
    result = asyncio.run(asyncio.wait_for(post_run(server.port, run_body(thread_id, run_id)), 120))
    check([result], f"run {run_id} on {thread_id}")
    return result.elapsed, server.settle_cpu(quiet=0.011, interval=0.1) - before


def measure(kind: str, messages: int, runs: int, extra: dict[str, Any]) -> None:
    with database(kind) as url:
        seconds = asyncio.run(seed(url, messages))
        print(f"{kind}: seeded {messages:,} messages in {seconds:.1f} s")
        with ServerProcess("bridge", deltas=5, settings={"database_url": url, **extra}) as server:
            timed_run(server, "warm-up", "warm-up")
            timed_run(server, BIG, "big-warm-up")
            fresh: list[tuple[float, float]] = []
            big: list[tuple[float, float]] = []
            for i in range(runs):
                fresh.append(timed_run(server, f"fresh-{i}", f"fresh-{i}"))
                big.append(timed_run(server, BIG, f"big-{i}"))
    rows = {"fresh": fresh, f"{messages // 1000}k msgs": big}
    for label, samples in rows.items():
        wall = [s[0] for s in samples]
        cpu = statistics.mean(s[1] for s in samples)
        print(f"  {label:>10}: run median {statistics.median(wall) * 1e3:8.1f} ms, "
              f"p99 {percentile(wall, 0.99) * 1e3:8.1f} ms, server CPU {cpu * 1e3:7.1f} ms/run")
    wall_ratio = statistics.median(s[0] for s in big) / statistics.median(s[0] for s in fresh)
    cpu_fresh = statistics.mean(s[1] for s in fresh)
    cpu_big = statistics.mean(s[1] for s in big)
    cpu_ratio = cpu_big / cpu_fresh if cpu_fresh else float("inf")
    verdict = "OK" if max(wall_ratio, cpu_ratio) <= 1.2 else "ABOVE TARGET"
    print(f"  big / fresh: wall {wall_ratio:.2f}x, server CPU {ratio(cpu_big, cpu_fresh, 0)} "
          f"(target <= 1.2x): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10, help="runs of each kind")
    parser.add_argument("--stores", nargs="+", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 3 runs")
    add_setting_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.runs = 10_000, 3
    started = time.monotonic()
    for kind in store_kinds(args.stores):
        measure(kind, args.messages, args.runs, extra_settings(args))
    print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
