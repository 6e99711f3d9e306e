"""One node vs two replicas on Redis: runs whose frontend tool result lands elsewhere.

Each run calls a frontend tool (in-run) and waits; the client reads the stream up to
``TOOL_CALL_END``, POSTs the result, and reads on to ``RUN_FINISHED``. ``one node``: one
server, the result POSTed to it (today's path, no Redis). ``two replicas``: two servers in
separate processes on one Redis (a private ``redis-server``) and one store; runs alternate
between A and B and every result is POSTed to the *other* replica, which forwards it to the
run's owner. ``one + Redis``: one server with ``redis_url`` (the Redis hop alone: claims,
log mirror, releases; results POSTed to it). All variants use the same store kind (a fresh
PostgreSQL database when ``IOBRIDGE_TEST_POSTGRES_URL`` is set, else one SQLite file).

All runs of a load start at once; once every one waits on its tool, the results are POSTed
one every ``--pace`` seconds (each in its own task while the stream is read on, as a browser
does), so the round trip measures the path, not a queue of 200 POSTs that the bench itself
made. Per variant: events/s while the runs start (all started → all waiting), p99 time to
first event, the tool-result round trip (POST sent → ``TOOL_CALL_RESULT`` read on the stream;
median and p99), server CPU per event (both replicas summed) and Redis CPU per event (from
/proc; 10 ms ticks), then the ratios to one node and to two nodes (medians, and the CPU
ratio of each round). The servers of all variants stay up and the variants take turns,
``--rounds`` times (medians), so that the machine's changing load hits each alike.

    .venv/bin/python bench/scale_out.py [--runs 200] [--rounds 3] [--pace 0.005] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _harness import (
    ServerProcess,
    SseCounter,
    database,
    free_port,
    percentile,
    postgres_url,
    raise_fd_limit,
    ratio,
    request_bytes,
    run_body,
)
from _server import TOOL_NAME

TOOLS = [{"name": TOOL_NAME, "description": "Pick one option.",
          "parameters": {"type": "object", "properties": {"choice": {"type": "string"}}}}]
#: Per variant: its run id prefix (ids differ across variants: they share one store) and
#: where the results go.
VARIANTS = {"one node": ("one", "owner"), "two nodes": ("two", "owner"),
            "one + Redis": ("hop", "owner"), "two replicas": ("pair", "other"),
            "half crossed": ("half", "mixed")}
_CALL_END = re.compile(rb'"type":"TOOL_CALL_END","toolCallId":"([^"]+)"')
_TICK = 100  # /proc clock ticks per second on Linux


@dataclass(slots=True)
class Outcome:
    first_event: float
    round_trip: float
    events: int
    terminal: str
    #: The result was POSTed to a replica that does not own the run.
    crossed: bool


def _cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[str, int]]:
    """A private ``redis-server``: its URL and pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="iobridge-bench-redis-") as folder:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0", process.pid
        finally:
            process.terminate()
            process.wait(timeout=10)


async def _post_result(port: int, run_id: str, call_id: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        body = json.dumps({"result": "a"}).encode()
        writer.write(request_bytes(
            "POST", f"/io-bridge/runs/{run_id}/tool-calls/{call_id}/result", body))
        head = await reader.read(64)
        return int(head[9:12])
    finally:
        writer.close()


class Round:
    """One load: every run starts at once; once all of them wait on their tool, the results
    are POSTed one every ``pace`` seconds (in run order, so replicas alternate)."""

    def __init__(self, runs: int, pace: float) -> None:
        self.runs, self.pace = runs, pace
        self.turns = [asyncio.get_running_loop().create_future() for _ in range(runs)]
        self.pending = 0
        self.all_pending = asyncio.Event()
        self.events_pending = 0

    def waiting(self, events: int) -> None:
        self.pending += 1
        self.events_pending += events
        if self.pending == self.runs:
            self.all_pending.set()

    async def pace_results(self) -> float:
        """Release the POSTs; returns when all runs waited (the start phase's end)."""
        await self.all_pending.wait()
        pending_at = time.perf_counter()
        for turn in self.turns:
            turn.set_result(None)
            await asyncio.sleep(self.pace)
        return pending_at


async def one_run(start_port: int, result_port: int, run_id: str, order: Round,
                  turn: asyncio.Future[None]) -> Outcome:
    """Read the stream; POST the result at this run's turn, in its own task (the stream is
    read on meanwhile, as a browser does), and time POST sent -> TOOL_CALL_RESULT read."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", start_port)
    counter, first, posted, round_trip = SseCounter(), 0.0, 0.0, 0.0
    seen = b""
    post: asyncio.Task[int] | None = None
    try:
        writer.write(request_bytes("POST", "/io-bridge/run",
                                   run_body(f"t-{run_id}", run_id, tools=TOOLS)))
        while chunk := await reader.read(1 << 16):
            if counter.feed(chunk) and not first:
                first = time.perf_counter() - started
            seen += chunk
            if post is None:
                match = _CALL_END.search(seen)
                if match:
                    order.waiting(counter.events)
                    await turn
                    posted = time.perf_counter()
                    post = asyncio.create_task(
                        _post_result(result_port, run_id, match.group(1).decode()))
            elif not round_trip and b'"TOOL_CALL_RESULT"' in seen:
                round_trip = time.perf_counter() - posted
    finally:
        writer.close()
        if post is None:
            order.waiting(0)  # never got to the tool: the others must not wait for it
    if post is None or await post != 200:
        raise RuntimeError(f"{run_id}: no tool call, or its result POST failed")
    return Outcome(first, round_trip, counter.events, counter.terminal(),
                   result_port != start_port)


@dataclass(slots=True)
class Figures:
    events_per_s: float
    p99_first: float
    #: Round trips of results POSTed to the run's owner (all of them on one node).
    median_trip: float
    p99_trip: float
    #: Round trips of results POSTed to the other replica, in the same load (``nan``: none).
    median_crossed: float
    p99_crossed: float
    server_cpu_per_event: float
    redis_cpu_per_event: float


async def load(ports: list[int], runs: int, tag: str, pace: float,
               routing: str) -> tuple[list[Outcome], float, int]:
    """Outcomes, the start phase's seconds (all runs started -> all wait on their tool) and
    the events read in it. Runs alternate between the servers; results go to the run's
    ``owner``, the ``other`` server, or (``mixed``) two by two in POST order to the other
    replica and then to the owner."""
    order = Round(runs, pace)
    jobs = []
    for i in range(runs):
        start = ports[i % len(ports)]
        crossed = routing == "other" or (routing == "mixed" and i // 2 % 2 == 0)
        result = ports[(i + 1) % len(ports)] if crossed else start
        jobs.append(one_run(start, result, f"{tag}-{i}", order, order.turns[i]))
    began = time.perf_counter()
    outcomes, pending_at = await asyncio.gather(asyncio.gather(*jobs), order.pace_results())
    return list(outcomes), pending_at - began, order.events_pending


def measure(servers: list[ServerProcess], runs: int, tag: str, redis_pid: int | None,
            pace: float, routing: str) -> Figures:
    ports = [s.port for s in servers]
    cpu0 = sum(s.settle_cpu() for s in servers)
    redis0 = _cpu(redis_pid) if redis_pid else 0.0
    outcomes, start_phase, start_events = asyncio.run(load(ports, runs, tag, pace, routing))
    cpu = sum(s.settle_cpu() for s in servers) - cpu0
    redis_cpu = (_cpu(redis_pid) - redis0) if redis_pid else 0.0
    bad = [o for o in outcomes if o.terminal != "RUN_FINISHED" or not o.round_trip]
    if bad:
        raise RuntimeError(f"{tag}: {len(bad)} of {runs} runs failed ({bad[0]})")
    events = sum(o.events for o in outcomes)
    trips = [o.round_trip for o in outcomes if not o.crossed] or [math.nan]
    crossed = [o.round_trip for o in outcomes if o.crossed] or [math.nan]
    return Figures(start_events / start_phase,
                   percentile([o.first_event for o in outcomes], 0.99),
                   statistics.median(trips), percentile(trips, 0.99),
                   statistics.median(crossed), percentile(crossed, 0.99), cpu / events,
                   redis_cpu / events)


def middle(rounds: list[Figures]) -> Figures:
    """Each figure's median over the rounds."""
    fields = Figures.__dataclass_fields__
    return Figures(**{name: statistics.median(getattr(f, name) for f in rounds)
                      for name in fields})


def show(name: str, f: Figures) -> None:
    trips = [(f"to the owner {f.median_trip * 1000:.1f} ms, p99 {f.p99_trip * 1000:.1f}",
              f.median_trip),
             (f"to the other replica {f.median_crossed * 1000:.1f} ms, p99 "
              f"{f.p99_crossed * 1000:.1f}", f.median_crossed)]
    print(f"{name:>13}: {f.events_per_s:>7,.0f} events/s (start)  p99 first event "
          f"{f.p99_first * 1000:6.1f} ms  server CPU {f.server_cpu_per_event * 1e6:6.1f} "
          f"µs/event  Redis CPU {f.redis_cpu_per_event * 1e6:5.1f} µs/event\n{'':>15}tool "
          f"round trip median {'; '.join(t for t, v in trips if not math.isnan(v))}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pace", type=float, default=0.005,
                        help="seconds between two tool result POSTs")
    parser.add_argument("--quick", action="store_true", help="50 runs, one round")
    args = parser.parse_args()
    runs, rounds = (50, 1) if args.quick else (args.runs, args.rounds)
    raise_fd_limit()
    kind = "postgres" if postgres_url() else "sqlite"
    base = {"tool_timeout": 60.0, "max_active_runs_per_principal": 10_000}
    print(f"{runs} concurrent runs, each with a frontend tool; results POSTed one every "
          f"{args.pace * 1000:g} ms once all runs wait; store {kind}; {rounds} rounds "
          "(medians)")
    results: dict[str, list[Figures]] = {name: [] for name in VARIANTS}
    with database(kind) as url, redis_server() as (redis_url, redis_pid), \
            contextlib.ExitStack() as stack:
        tag = uuid.uuid4().hex[:6]

        def started(cluster: str | None) -> ServerProcess:
            extra = {} if cluster is None else {"redis_url": redis_url,
                                                "redis_prefix": f"bench{tag}{cluster}"}
            return stack.enter_context(ServerProcess(
                "bridge", agent="tool", settings={**base, "database_url": url, **extra}))

        pair = [started("p"), started("p")]
        groups = {"one node": ([started(None)], None),
                  "two nodes": ([started(None), started(None)], None),  # what splitting costs
                  "one + Redis": ([started("h")], redis_pid),
                  "two replicas": (pair, redis_pid), "half crossed": (pair, redis_pid)}
        for name, (group, pid) in groups.items():  # warm up (imports, pools)
            prefix, routing = VARIANTS[name]
            measure(group, min(20, runs), f"{prefix}-warm", pid, args.pace, routing)
        for r in range(rounds):  # interleaved, so that a change in the machine's load
            for name, (group, pid) in groups.items():  # hits every variant alike
                prefix, routing = VARIANTS[name]
                results[name].append(measure(group, runs, f"{prefix}-{r}", pid, args.pace,
                                             routing))
    figures = {name: middle(rounds) for name, rounds in results.items()}
    for name in ("one node", "two nodes", "one + Redis", "two replicas"):
        show(name, figures[name])
    base_of = {"one + Redis": "one node", "two replicas": "two nodes"}
    for name, against in base_of.items():
        f, b = figures[name], figures[against]
        print(f"{name:>13}: events/s {ratio(f.events_per_s, b.events_per_s)}  p99 first event "
              f"{ratio(f.p99_first, b.p99_first)}  server CPU/event "
              f"{ratio(f.server_cpu_per_event, b.server_cpu_per_event)} (vs {against})")
    for name, against in base_of.items():
        rounds_of = zip(results[name], results[against], strict=True)
        print(f"{'':>15}{name} server CPU/event by round: " + ", ".join(
            f"{ratio(f.server_cpu_per_event, b.server_cpu_per_event, 0)} "
            f"({f.server_cpu_per_event * 1e6:.1f}/{b.server_cpu_per_event * 1e6:.1f} µs)"
            for f, b in rounds_of))
    same_load = [(h.median_crossed - h.median_trip) * 1000 for h in results["half crossed"]]
    vs = {against: [(p.median_crossed - o.median_trip) * 1000
                    for p, o in zip(results["two replicas"], results[against], strict=True)]
          for against in ("one node", "two nodes")}
    half = figures["half crossed"]
    print(f"{'':>13}  a cross-replica tool result adds {statistics.median(same_load):+.1f} ms "
          f"median (rounds {', '.join(f'{e:+.1f}' for e in same_load)}) over one POSTed to "
          f"its owner in the same load ({half.median_trip * 1000:.1f} → "
          f"{half.median_crossed * 1000:.1f} ms; half the results cross)")
    for against, extra in vs.items():
        print(f"{'':>15}two replicas (all crossed) over {against}: "
              f"{statistics.median(extra):+.1f} ms (rounds "
              f"{', '.join(f'{e:+.1f}' for e in extra)})")


if __name__ == "__main__":
    main()
