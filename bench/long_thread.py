"""Per-run cost on a thread of 100,000 messages vs on fresh threads (issue 10: within 1.2x).

Seeds one thread straight through the store API (``open_store`` + ``append_messages`` in
large batches) in a fresh database, then starts a server in its own process on it and times
K chat turns (one new user message, 5 deltas) on the big thread against K on fresh threads
(each run creates its thread) and K on a small thread of ``SMALL`` messages, in alternating
blocks of 5 so that load from elsewhere on the machine hits all alike. A run on a fresh thread
skips the reads of an existing one (nothing to window or merge) and writes a new thread; the
small thread takes the big one's path, so big/small is the cost of the thread's size alone
and big/fresh the issue's figure. Per kind:
median and p99 wall time of a run (POST to end of stream) and server CPU per run (from /proc,
per block, measured until the server is idle again, so work after the stream counts).
On the default SQLite store, and on PostgreSQL when ``IOBRIDGE_TEST_POSTGRES_URL`` is set.

    .venv/bin/python bench/long_thread.py [--messages 100000] [--runs 20]
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
SMALL_THREAD = "small-thread"
#: Messages of the small thread: a few turns, a window's worth at most.
SMALL = 10
#: The resource runs act for with authentication off (``auth.mode = none``).
RESOURCE = "default"
BATCH = 5_000
#: Runs of one kind timed back to back: CPU is read per block (/proc counts in 10 ms units,
#: too coarse for one run of a few ms); blocks of the two kinds alternate.
BLOCK = 5


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
        await store.create_thread(SMALL_THREAD, resource_id=RESOURCE, agent_id="bench")
        await store.append_messages(SMALL_THREAD, [message(i) for i in range(SMALL)])
        for start in range(0, count, BATCH):
            await store.append_messages(
                BIG, [message(i) for i in range(start, min(count, start + BATCH))]
            )
    finally:
        await store.close()
    return time.perf_counter() - started


def block(server: ServerProcess, threads: list[str], tag: str) -> tuple[list[float], float]:
    """Chat turns on ``threads`` one after another: (wall seconds of each, server CPU of all,
    counted until the server is idle again)."""
    before = server.settle_cpu(quiet=0.011, interval=0.1)
    walls = []
    for i, thread_id in enumerate(threads):
        body = run_body(thread_id, f"{tag}-{i}")
        result = asyncio.run(asyncio.wait_for(post_run(server.port, body), 120))
        check([result], f"run {tag}-{i} on {thread_id}")
        walls.append(result.elapsed)
    return walls, server.settle_cpu(quiet=0.011, interval=0.1) - before


def measure(kind: str, messages: int, blocks: int, extra: dict[str, Any]) -> None:
    with database(kind) as url:
        seconds = asyncio.run(seed(url, messages))
        print(f"{kind}: seeded {messages:,} messages in {seconds:.1f} s")
        with ServerProcess("bridge", deltas=5, settings={"database_url": url, **extra}) as server:
            block(server, ["warm-up", BIG, SMALL_THREAD], "warm-up")
            wall: dict[str, list[float]] = {"fresh": [], "small": [], "big": []}
            cpu = {"fresh": 0.0, "small": 0.0, "big": 0.0}
            for b in range(blocks):
                for label in ("fresh", "small", "big"):
                    threads = [f"fresh-{b}-{i}" for i in range(BLOCK)] if label == "fresh" \
                        else [BIG if label == "big" else SMALL_THREAD] * BLOCK
                    walls, seconds = block(server, threads, f"{label}-{b}")
                    wall[label] += walls
                    cpu[label] += seconds
    runs = blocks * BLOCK
    for label, name in (("fresh", "fresh"), ("small", f"{SMALL} msgs"),
                        ("big", f"{messages // 1000}k msgs")):
        print(f"  {name:>10}: run median {statistics.median(wall[label]) * 1e3:8.1f} ms, "
              f"p99 {percentile(wall[label], 0.99) * 1e3:8.1f} ms, "
              f"server CPU {cpu[label] / runs * 1e3:7.1f} ms/run")
    for base in ("fresh", "small"):
        wall_ratio = statistics.median(wall["big"]) / statistics.median(wall[base])
        cpu_ratio = cpu["big"] / cpu[base] if cpu[base] else float("inf")
        verdict = "OK" if max(wall_ratio, cpu_ratio) <= 1.2 else "ABOVE TARGET"
        print(f"  big / {base} ({runs} runs each): wall {wall_ratio:.2f}x, "
              f"server CPU {ratio(cpu['big'], cpu[base], 0)} (target <= 1.2x): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20,
                        help=f"runs of each kind (rounded up to a multiple of {BLOCK})")
    parser.add_argument("--stores", nargs="+", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 5 runs")
    add_setting_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.runs = 10_000, BLOCK
    started = time.monotonic()
    for kind in store_kinds(args.stores):
        measure(kind, args.messages, -(-args.runs // BLOCK), extra_settings(args))
    print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
