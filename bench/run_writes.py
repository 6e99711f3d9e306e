"""Store CPU per run write: bursts of concurrent ``write_for_run`` calls, as a burst of runs
makes them (group commit batches them), on a fresh SQLite file.

Each burst is N start writes (a new thread and its user message) followed by N end writes
(the reply on the now existing thread). Each tree's store runs in a process of its own
(``--child``), the processes take turns for ``--rounds`` rounds, and the process's CPU time
(every thread: the event loop and the store's worker threads) per write is printed, with
this / baseline per round and its median when ``--baseline-tree`` is given.

    .venv/bin/python bench/run_writes.py [--writes 200] [--bursts 10] [--rounds 9]
        [--baseline-tree PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import THIS_TREE, Tree, add_baseline_option, baseline_tree


async def _bursts(url: str, writes: int, bursts: int) -> float:
    """CPU seconds of this process per write over ``bursts`` bursts (after one warm-up)."""
    from iobridge.store.migrate import open_store

    store = await open_store(url)
    async with store:
        async def burst(name: str) -> None:
            threads = [f"t-{name}-{i}" for i in range(writes)]
            await asyncio.gather(*(
                store.write_for_run(t, resource_id="r", agent_id="bench",
                                    messages=[{"id": f"u-{t}", "role": "user", "content": "hello"}])
                for t in threads
            ))
            await asyncio.gather(*(
                store.write_for_run(t, resource_id="r", agent_id="bench", messages=[
                    {"id": f"a-{t}", "role": "assistant", "content": "w0 w1 w2 w3 w4 "}])
                for t in threads
            ))

        await burst("warm")
        began = time.process_time()
        for b in range(bursts):
            await burst(str(b))
        return (time.process_time() - began) / (bursts * writes * 2)


def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        # The spelling every core reads (af03d35 knows no other).
        url = f"sqlite+aiosqlite:///{folder}/writes.db"
        per_write = asyncio.run(_bursts(url, args.writes, args.bursts))
    print(json.dumps({"cpu_per_write": per_write}))


def _measure(tree: Tree, args: argparse.Namespace) -> float:
    command = [tree.python, str(Path(__file__).resolve()), "--child", "--writes",
               str(args.writes), "--bursts", str(args.bursts)]
    done = subprocess.run(command, env={**os.environ, **tree.env}, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree.name}: the store process failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_per_write"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200, help="concurrent runs per burst")
    parser.add_argument("--bursts", type=int, default=10, help="measured bursts per round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds, trees taking turns")
    parser.add_argument("--quick", action="store_true", help="50 writes, 3 bursts, 2 rounds")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_baseline_option(parser)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.quick:
        args.writes, args.bursts, args.rounds = 50, 3, 2
    baseline = baseline_tree(args)
    trees = [THIS_TREE] + ([baseline] if baseline is not None else [])
    figures: dict[str, list[float]] = {tree.name: [] for tree in trees}
    for n in range(args.rounds):
        order = trees if n % 2 == 0 else trees[::-1]  # neither tree always goes first
        for tree in order:
            figures[tree.name].append(_measure(tree, args))
    print(f"{args.writes} concurrent run writes x 2 (start, end) per burst, {args.bursts} bursts, "
          f"median of {args.rounds} rounds: store process CPU per write")
    for tree in trees:
        print(f"  {tree.name:>8}: {statistics.median(figures[tree.name]) * 1e6:7.1f} µs")
    if baseline is not None:
        ratios = [a / b for a, b in zip(figures["this"], figures["baseline"], strict=True)]
        rounds = " ".join(f"{r:.2f}" for r in ratios)
        print(f"this / baseline: {statistics.median(ratios):.3f} (rounds {rounds})")


if __name__ == "__main__":
    sys.exit(main())
