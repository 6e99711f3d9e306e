"""SSE under concurrency: many runs at once, iobridge vs a bare Starlette stream.

Each server runs in its own process (uvicorn, one event loop); the clients are raw asyncio
sockets in this process. Prints total events/s and the median and p99 time to first event
(TTFE): fairness shows in the p99, since a producer that never yields to the loop would
serve the runs one after another.

    .venv/bin/python bench/sse_concurrency.py [--runs 200] [--deltas 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SERVER = """
import sys
sys.path.insert(0, {here!r})
import uvicorn
import sse_throughput as bench
app = bench.{factory}({deltas})
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="warning", lifespan="off",
            access_log=False)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(factory: str, deltas: int) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    code = SERVER.format(here=str(HERE), factory=factory, deltas=deltas, port=port)
    process = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{factory} server did not start")


async def _one_run(port: int, run_id: str) -> tuple[float, int]:
    """(time to first event, events) of one run over a raw HTTP/1.1 connection."""
    body = json.dumps({"threadId": f"t-{run_id}", "runId": run_id, "messages": [
        {"id": "m", "role": "user", "content": "go"}]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    writer.write(b"POST /io-bridge/run HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    first: float | None = None
    seen = b""
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            break
        seen += chunk
        if first is None and b"data: " in seen:
            first = time.perf_counter() - started
        if b'"RUN_FINISHED"' in seen[-512:]:
            break
    writer.close()
    return (first or float("nan")), seen.count(b"data: ")


async def _measure(port: int, runs: int, tag: str) -> tuple[float, list[float], int]:
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(_one_run(port, f"{tag}-{i}") for i in range(runs))), 120
    )
    elapsed = time.perf_counter() - started
    return elapsed, sorted(r[0] for r in results), sum(r[1] for r in results)


def _report(name: str, elapsed: float, ttfe: list[float], events: int) -> float:
    p99 = ttfe[min(len(ttfe) - 1, int(len(ttfe) * 0.99))]
    rate = events / elapsed
    print(f"{name:>9}: {events:,} events in {elapsed:.2f} s = {rate:,.0f} events/s; "
          f"TTFE median {statistics.median(ttfe) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=500)
    args = parser.parse_args()
    print(f"{args.runs} concurrent runs x {args.deltas} text deltas, server in its own process")
    rates = {}
    for name, factory in (("bare", "bare_app"), ("iobridge", "bridge_app")):
        process, port = _start(factory, args.deltas)
        try:
            asyncio.run(_measure(port, 4, "warmup"))
            rates[name] = _report(name, *asyncio.run(_measure(port, args.runs, name)))
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"    ratio: {rates['iobridge'] / rates['bare']:.2f} of the bare baseline")


if __name__ == "__main__":
    main()
