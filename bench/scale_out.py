"""One node vs two replicas on Redis: runs whose frontend tool result lands elsewhere.

Each run calls a frontend tool (in-run) and waits; the client reads the stream up to
``TOOL_CALL_END``, POSTs the result, and reads on to ``RUN_FINISHED``. ``one node``: one
server, the result POSTed to it (today's path, no Redis). ``two replicas``: two servers in
separate processes on one Redis (a private ``redis-server``) and one store; runs alternate
between A and B and every result is POSTed to the *other* replica, which forwards it to the
run's owner. ``one + Redis``: one server with ``redis_url`` (the Redis hop alone: claims,
log mirror, releases; results POSTed to it). All variants use the same store kind (a fresh
PostgreSQL database when ``IOBRIDGE_TEST_POSTGRES_URL`` is set, else one SQLite file).

Per variant: events/s, p99 time to first event, the tool-result round trip (POST sent →
``TOOL_CALL_RESULT`` read on the stream; median and p99), server CPU per event (both replicas
summed) and Redis CPU per event (from /proc; 10 ms ticks), then the replicas' ratios to one
node.

    .venv/bin/python bench/scale_out.py [--runs 200] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
_CALL_END = re.compile(rb'"type":"TOOL_CALL_END","toolCallId":"([^"]+)"')
_TICK = 100  # /proc clock ticks per second on Linux


@dataclass(slots=True)
class Outcome:
    first_event: float
    round_trip: float
    events: int
    terminal: str


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


async def one_run(start_port: int, result_port: int, run_id: str) -> Outcome:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", start_port)
    counter, first, posted, round_trip = SseCounter(), 0.0, 0.0, 0.0
    seen = b""
    try:
        writer.write(request_bytes("POST", "/io-bridge/run",
                                   run_body(f"t-{run_id}", run_id, tools=TOOLS)))
        while chunk := await reader.read(1 << 16):
            if counter.feed(chunk) and not first:
                first = time.perf_counter() - started
            seen += chunk
            if not posted:
                match = _CALL_END.search(seen)
                if match:
                    posted = time.perf_counter()
                    status = await _post_result(result_port, run_id, match.group(1).decode())
                    if status != 200:
                        raise RuntimeError(f"result POST answered {status}")
            elif not round_trip and b'"TOOL_CALL_RESULT"' in seen:
                round_trip = time.perf_counter() - posted
    finally:
        writer.close()
    return Outcome(first, round_trip, counter.events, counter.terminal())


@dataclass(slots=True)
class Figures:
    events_per_s: float
    p99_first: float
    median_trip: float
    p99_trip: float
    server_cpu_per_event: float
    redis_cpu_per_event: float


async def load(ports: list[int], runs: int, tag: str) -> tuple[list[Outcome], float]:
    jobs = []
    for i in range(runs):
        start = ports[i % len(ports)]
        other = ports[(i + 1) % len(ports)]
        jobs.append(one_run(start, other, f"{tag}-{i}"))
    began = time.perf_counter()
    outcomes = await asyncio.gather(*jobs)
    return list(outcomes), time.perf_counter() - began


def measure(servers: list[ServerProcess], runs: int, tag: str, redis_pid: int | None) -> Figures:
    ports = [s.port for s in servers]
    asyncio.run(load(ports, min(20, runs), f"{tag}-warm"))  # warm up (imports, pools)
    cpu0 = sum(s.settle_cpu() for s in servers)
    redis0 = _cpu(redis_pid) if redis_pid else 0.0
    outcomes, wall = asyncio.run(load(ports, runs, tag))
    cpu = sum(s.settle_cpu() for s in servers) - cpu0
    redis_cpu = (_cpu(redis_pid) - redis0) if redis_pid else 0.0
    bad = [o for o in outcomes if o.terminal != "RUN_FINISHED" or not o.round_trip]
    if bad:
        raise RuntimeError(f"{tag}: {len(bad)} of {runs} runs failed ({bad[0]})")
    events = sum(o.events for o in outcomes)
    trips = [o.round_trip for o in outcomes]
    return Figures(events / wall, percentile([o.first_event for o in outcomes], 0.99),
                   statistics.median(trips), percentile(trips, 0.99), cpu / events,
                   redis_cpu / events)


def show(name: str, f: Figures) -> None:
    print(f"{name:>13}: {f.events_per_s:>8,.0f} events/s  p99 first event "
          f"{f.p99_first * 1000:6.1f} ms  tool round trip median {f.median_trip * 1000:5.1f} ms "
          f"p99 {f.p99_trip * 1000:6.1f} ms  server CPU {f.server_cpu_per_event * 1e6:6.1f} "
          f"µs/event  Redis CPU {f.redis_cpu_per_event * 1e6:5.1f} µs/event")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="50 runs")
    args = parser.parse_args()
    runs = 50 if args.quick else args.runs
    raise_fd_limit()
    kind = "postgres" if postgres_url() else "sqlite"
    base = {"tool_timeout": 60.0, "max_active_runs_per_principal": 10_000}
    print(f"{runs} concurrent runs, each with a frontend tool; store {kind}")
    with database(kind) as url:
        with ServerProcess("bridge", agent="tool", settings={**base, "database_url": url}) as one:
            single = measure([one], runs, "one", None)
        show("one node", single)
        with redis_server() as (redis_url, redis_pid):
            shared = {**base, "database_url": url, "redis_url": redis_url,
                      "redis_prefix": f"bench{uuid.uuid4().hex[:6]}"}
            with ServerProcess("bridge", agent="tool", settings=shared) as alone:
                hop = measure([alone], runs, "hop", redis_pid)
            show("one + Redis", hop)
            with ServerProcess("bridge", agent="tool", settings=shared) as a, ServerProcess(
                "bridge", agent="tool", settings=shared
            ) as b:
                pair = measure([a, b], runs, "pair", redis_pid)
        show("two replicas", pair)
    for name, figures in (("one + Redis", hop), ("two replicas", pair)):
        print(f"{name:>13}: events/s {ratio(figures.events_per_s, single.events_per_s)}  "
              f"p99 first event {ratio(figures.p99_first, single.p99_first)}  "
              f"server CPU/event "
              f"{ratio(figures.server_cpu_per_event, single.server_cpu_per_event)}  "
              "(vs one node; replicas: both processes summed)")
    extra = (pair.median_trip - single.median_trip) * 1000
    print(f"{'':>13}  cross-replica tool result adds {extra:+.1f} ms median "
          f"({single.median_trip * 1000:.1f} → {pair.median_trip * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
