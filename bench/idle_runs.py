"""10,000 concurrent idle runs, each waiting on a frontend tool: RSS per run, teardown CPU.

A server in its own process (open-file limit raised to its hard limit, as here) serves a
FunctionAgent that calls a frontend tool the client declared (in-run mode) and waits for the
result. The client opens N runs and holds each stream once TOOL_CALL_END arrived. Prints the
server's RSS per pending run ((RSS with N pending - RSS before) / N) and the server CPU
seconds spent tearing them all down once every client connection is closed (counted until
the server's sockets are gone and its CPU is quiet), against the issue's targets (<= 32 KiB
per run, <= 2 s). N is bounded by the open-file limit (printed). Store: ``memory://`` unless
``--store sqlite`` (the runs' start cost is not what this measures). With ``--baseline-tree
PATH`` the core at PATH is measured the same way, the two servers taking turns ``--rounds``
times (each round a fresh server of each), and the figures are printed as ratios this /
baseline.

    .venv/bin/python bench/idle_runs.py [--runs 10000] [--store memory|sqlite] [--quick]
        [--baseline-tree PATH --rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _harness import (
    THIS_TREE,
    ServerProcess,
    SseCounter,
    Tree,
    add_baseline_option,
    add_setting_option,
    baseline_tree,
    database,
    extra_settings,
    mib,
    raise_fd_limit,
    request_bytes,
    run_body,
)
from _server import TOOL_NAME

RSS_TARGET = 32 * 1024
TEARDOWN_TARGET = 2.0
#: Runs being opened at once (keeps the listen backlog and the loop's ready queue short).
OPENING = 100
#: File descriptors kept free for everything else, in each process.
SPARE_FDS = 200
TOOLS = [{"name": TOOL_NAME, "description": "Pick one option.",
          "parameters": {"type": "object", "properties": {"choice": {"type": "string"}}}}]

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_idle(port: int, run_id: str, gate: asyncio.Semaphore) -> Stream:
    """Start a run and read until its tool call is pending; returns the open stream."""
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes("POST", "/io-bridge/run",
                                   run_body(f"t-{run_id}", run_id, tools=TOOLS)))
        counter = SseCounter()
        while b'"TOOL_CALL_END"' not in counter.tail:
            chunk = await reader.read(1 << 16)
            if not chunk:
                writer.close()
                raise RuntimeError(f"run {run_id} ended before its tool call was pending "
                                   f"(status {counter.status}, terminal {counter.terminal()})")
            counter.feed(chunk)
        return reader, writer


async def open_all(port: int, n: int, tag: str, timeout: float) -> list[Stream]:
    gate = asyncio.Semaphore(OPENING)
    tasks = [asyncio.create_task(open_idle(port, f"{tag}-{i}", gate)) for i in range(n)]
    try:
        return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()


def wait_torn_down(server: ServerProcess, fds_before: int, timeout: float) -> float:
    """Server CPU time once its connections are closed and it is quiet again."""
    deadline = time.monotonic() + timeout
    while server.open_fds() > fds_before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    left = max(1.0, deadline - time.monotonic())
    return server.settle_cpu(quiet=0.02, interval=0.5, timeout=left)


async def scenario(server: ServerProcess, n: int, timeout: float) -> tuple[float, float]:
    """Open ``n`` idle runs, then close them all: (RSS bytes per run, teardown CPU s)."""
    warm = await open_all(server.port, 20, "warm", timeout)
    close_all(warm)
    await asyncio.sleep(0.5)
    fds_before = server.open_fds()
    server.settle_cpu()
    rss_before = server.rss_bytes()

    started = time.perf_counter()
    streams = await open_all(server.port, n, "idle", timeout)
    opened = time.perf_counter() - started
    server.settle_cpu()
    rss_pending = server.rss_bytes()
    print(f"opened {n:,} pending runs in {opened:.1f} s; server fds {fds_before} -> "
          f"{server.open_fds():,}; RSS {mib(rss_before)} -> {mib(rss_pending)}")

    cpu_before = server.cpu_seconds()
    started = time.perf_counter()
    close_all(streams)
    await asyncio.sleep(0)
    cpu_after = await asyncio.to_thread(wait_torn_down, server, fds_before, timeout)
    wall = time.perf_counter() - started
    per_run = (rss_pending - rss_before) / n
    teardown = cpu_after - cpu_before
    print(f"RSS per pending run: {per_run / 1024:.1f} KiB (target <= {RSS_TARGET // 1024} KiB): "
          f"{'OK' if per_run <= RSS_TARGET else 'ABOVE TARGET'}")
    print(f"teardown: {teardown:.2f} s server CPU, {wall:.1f} s wall, fds back to "
          f"{server.open_fds()} (target <= {TEARDOWN_TARGET:.0f} s CPU): "
          f"{'OK' if teardown <= TEARDOWN_TARGET else 'ABOVE TARGET'}")
    return per_run, teardown


def measure(tree: Tree, store: str, settings: dict[str, Any], n: int,
            timeout: float) -> tuple[float, float]:
    with database(store) as url, ServerProcess(
            "bridge", agent="tool", settings={**settings, "database_url": url},
            tree=tree) as server:
        print(f"-- {tree.name} tree")
        return asyncio.run(scenario(server, n, timeout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds allowed to open all runs, and to tear them down")
    parser.add_argument("--quick", action="store_true", help="500 runs")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline-tree: turns of each server")
    add_setting_option(parser)
    add_baseline_option(parser)
    args = parser.parse_args()
    limit = raise_fd_limit()
    n = min(500 if args.quick else args.runs, limit - SPARE_FDS)
    print(f"{n:,} idle runs pending a frontend tool (open-file limit {limit:,}; "
          f"store {args.store}), server in its own process")
    # Admission limits (where this core has them) must let all N runs in.
    settings: dict[str, Any] = {"tool_timeout": 3600.0, "ping_interval": 600.0,
                                "max_active_runs": n + 100,
                                "max_active_runs_per_principal": n + 100,
                                "max_connections": n + 100,
                                **extra_settings(args)}
    baseline = baseline_tree(args)
    trees = [THIS_TREE] if baseline is None else [THIS_TREE, baseline]
    results: dict[str, list[tuple[float, float]]] = {tree.name: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:
            results[tree.name].append(measure(tree, args.store, settings, n, args.timeout))
    if baseline is not None:
        for index, what in enumerate(("RSS per run", "teardown CPU")):
            per_round = [ours[index] / theirs[index] for ours, theirs
                         in zip(results["this"], results["baseline"], strict=True)]
            print(f"this / baseline, {what}: {statistics.median(per_round):.3f} "
                  f"(rounds {' '.join(f'{r:.2f}' for r in per_round)})")

if __name__ == "__main__":
    main()
