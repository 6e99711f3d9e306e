"""Many concurrent runs: iobridge on each store vs a bare Starlette stream, in one run.

Workloads (issue 10): ``short`` = 200 concurrent runs x 5 text deltas (a chat turn), ``long``
= 200 x 500. Each variant gets a fresh server in its own process: ``bare`` (pre-encoded
events, one chunk per event), iobridge on ``memory://``, on the default SQLite store (a fresh
temp file), and on PostgreSQL (a fresh database) when ``IOBRIDGE_TEST_POSTGRES_URL`` is set.
All servers run side by side and the variants' bursts are interleaved, ``--rounds`` times
(default 3); each figure is the median over the rounds, so load from elsewhere on the machine
hits every variant alike. Every iobridge run is a chat turn on its own threadId with one user
message. The clients are raw asyncio sockets in this process. Per variant: events/s, median
and p99 time to first ``data:`` frame, and server CPU per event (every thread's scheduler
time from /proc, in ns, including work that continues after the streams end), each with its
ratio to ``bare``. With ``--baseline-tree PATH`` each store is also served by the core at
PATH (``STORE@base``), in the same interleaved rounds, and each store's figures are printed
as ratios this / baseline (per round and median).

    .venv/bin/python bench/load_runs.py [--workload short long] [--runs N --deltas D]
        [--stores memory sqlite postgres] [--quick] [--rounds R] [--baseline-tree PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _harness import (
    THIS_TREE,
    RunResult,
    ServerProcess,
    Tree,
    add_baseline_option,
    add_setting_option,
    baseline_tree,
    check,
    database,
    extra_settings,
    percentile,
    post_run,
    raise_fd_limit,
    ratio,
    run_body,
    store_kinds,
)

WORKLOADS = {"short": (200, 5), "long": (200, 500)}
QUICK = {"short": (20, 5), "long": (20, 50)}
WARMUP_RUNS = 4


@dataclass(slots=True)
class Figures:
    rate: float
    ttfe_median: float
    ttfe_p99: float
    cpu_per_event: float


async def _burst(port: int, runs: int, tag: str, timeout: float) -> tuple[float, list[RunResult]]:
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(post_run(port, run_body(f"t-{tag}-{i}", f"{tag}-{i}"))
                         for i in range(runs))),
        timeout,
    )
    return time.perf_counter() - started, list(results)


def measure(server: ServerProcess, runs: int, tag: str, timeout: float) -> Figures:
    before = server.settle_cpu()
    elapsed, results = asyncio.run(_burst(server.port, runs, tag, timeout))
    check(results, tag)
    cpu = server.settle_cpu() - before
    events = sum(r.events for r in results)
    ttfe = [r.first_event for r in results]
    return Figures(events / elapsed, statistics.median(ttfe), percentile(ttfe, 0.99),
                   cpu / events)


def median_figures(rounds: list[Figures]) -> Figures:
    """Each figure's median over the rounds (the rounds of all variants are interleaved, so a
    burst of load from elsewhere on the machine hits every variant alike)."""
    return Figures(*(statistics.median(getattr(f, name) for f in rounds)
                     for name in ("rate", "ttfe_median", "ttfe_p99", "cpu_per_event")))


def run_workload(name: str, runs: int, deltas: int, stores: list[str], timeout: float,
                 extra: dict[str, Any], rounds: int, baseline: Tree | None = None) -> None:
    print(f"\n{name}: {runs} concurrent runs x {deltas} deltas "
          f"({deltas + 4} events per run), each server in its own process, "
          f"median of {rounds} interleaved rounds")
    trees: dict[str, tuple[str, Tree]] = {store: (store, THIS_TREE) for store in stores}
    if baseline is not None:
        trees.update({f"{store}@base": (store, baseline) for store in stores})
    variants = ["bare", *trees]
    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for variant in variants:
            if variant == "bare":
                servers[variant] = stack.enter_context(ServerProcess("bare", deltas=deltas))
            else:
                store, tree = trees[variant]
                url = stack.enter_context(database(store))
                servers[variant] = stack.enter_context(ServerProcess(
                    "bridge", deltas=deltas, settings={"database_url": url, **extra},
                    tree=tree))
            _, warm = asyncio.run(_burst(servers[variant].port, WARMUP_RUNS,
                                         f"{name}-{variant}-warm", timeout))
            check(warm, f"{variant} warm-up")
        measured: dict[str, list[Figures]] = {variant: [] for variant in variants}
        for round_ in range(rounds):
            # Each round starts with another variant: no variant always follows the same one.
            shift = round_ % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                measured[variant].append(measure(servers[variant], runs,
                                                 f"{name}-{variant}-{round_}", timeout))
    print(f"{'variant':>14} {'events/s':>10} {'x bare':>7} {'TTFE p50':>10} {'p99':>10} "
          f"{'p99 x bare':>10} {'CPU/event':>10} {'x bare':>7}  events/s x bare per round")
    base = median_figures(measured["bare"])
    for variant in variants:
        figures = median_figures(measured[variant])
        spread = " ".join(f"{f.rate / b.rate:.2f}"
                          for f, b in zip(measured[variant], measured["bare"], strict=True))
        print(f"{variant:>14} {figures.rate:>10,.0f} {ratio(figures.rate, base.rate)} "
              f"{figures.ttfe_median * 1e3:>8.1f}ms {figures.ttfe_p99 * 1e3:>8.1f}ms "
              f"{ratio(figures.ttfe_p99, base.ttfe_p99, 9)} "
              f"{figures.cpu_per_event * 1e6:>8.0f}µs "
              f"{ratio(figures.cpu_per_event, base.cpu_per_event)}  {spread}")
    if baseline is not None:
        compare_with_baseline(measured, stores)


def compare_with_baseline(measured: dict[str, list[Figures]], stores: list[str]) -> None:
    """Each store's figures, this tree over the baseline's: the median of the rounds and
    each round's ratio (the two took turns, so load from elsewhere hits both alike)."""
    print(f"{'this / baseline':>15} {'events/s':>22} {'TTFE p50':>22} {'CPU/event':>22}")
    for store in stores:
        ours, theirs = measured[store], measured[f"{store}@base"]
        cells = []
        for field in ("rate", "ttfe_median", "cpu_per_event"):
            per_round = [getattr(o, field) / getattr(t, field)
                         for o, t in zip(ours, theirs, strict=True)]
            cells.append(f"{statistics.median(per_round):.3f} "
                         f"({' '.join(f'{r:.2f}' for r in per_round)})")
        print(f"{store:>15} " + " ".join(f"{c:>22}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", nargs="+", choices=sorted(WORKLOADS),
                        default=["short", "long"])
    parser.add_argument("--runs", type=int, help="custom workload: concurrent runs")
    parser.add_argument("--deltas", type=int, help="custom workload: deltas per run")
    parser.add_argument("--stores", nargs="+", choices=["memory", "sqlite", "postgres"],
                        default=["memory", "sqlite", "postgres"])
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed for each burst of runs")
    parser.add_argument("--quick", action="store_true", help="20 runs, 5 and 50 deltas")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved bursts per variant (the median is printed)")
    add_setting_option(parser)
    add_baseline_option(parser)
    args = parser.parse_args()
    extra = extra_settings(args)
    baseline = baseline_tree(args)
    raise_fd_limit()
    stores = store_kinds(args.stores)
    started = time.monotonic()
    if args.runs or args.deltas:
        run_workload("custom", args.runs or 200, args.deltas or 5, stores, args.timeout, extra,
                     args.rounds, baseline)
    else:
        table = QUICK if args.quick else WORKLOADS
        for name in args.workload:
            run_workload(name, *table[name], stores, args.timeout, extra, args.rounds,
                         baseline)
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
