"""SSE throughput: one run of 10,000 text deltas through iobridge vs a bare Starlette stream.

Both servers run in this process on loopback under uvicorn, side by side, and are read by the
same raw-socket client (HTTP/1.1, chunked decoding, counts ``data:`` frames). Prints events/s,
time to first event, and the ratio to the bare baseline (target >= 0.5). ``--profile`` adds a
cProfile of the iobridge server side.

The client is a thread of this process: while a run's producer is CPU-bound it rarely gets the
GIL, which inflates the in-process time to first event (a separate client process sees 2-4 ms
where this prints 40-60 ms). Throughput, the figure compared, is not affected that way.

With ``--baseline-tree PATH`` the servers run in processes of their own instead
(``_server.py``: bare, this core and the core at PATH, each iobridge on a fresh SQLite file),
taking turns for ``--rounds`` rounds, and this core's events/s is also printed over the
baseline's (per round and median).

    .venv/bin/python bench/sse_throughput.py [--deltas 10000] [--rounds 5] [--profile]
        [--baseline-tree PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from _harness import (
    THIS_TREE,
    ServerProcess,
    add_baseline_option,
    baseline_tree,
    database,
    free_port,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

TIMEOUT = 30.0



class Server:
    """uvicorn in a background thread (so the client's CPU is not on the server's loop)."""

    def __init__(self, app: Any, *, profile: bool = False) -> None:
        self.port = free_port()
        self.profile = cProfile.Profile() if profile else None
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.profile is None:
            self.server.run()
        else:
            self.profile.runcall(self.server.run)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def deltas(n: int) -> list[str]:
    return [f"w{i} " for i in range(n)]


def bare_app(n: int) -> Starlette:
    """The baseline: the same kind of events, pre-encoded, one chunk per event."""
    events = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
              {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": d} for d in deltas(n)]
    events += [{"type": "TEXT_MESSAGE_END", "messageId": "m"},
               {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}]
    frames = [b"id: %d\ndata: %b\n\n" % (i, orjson.dumps(e)) for i, e in enumerate(events, 1)]

    async def body() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    async def run(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/io-bridge/run", run, methods=["POST"])])


def bridge_app(n: int) -> Any:
    words = deltas(n)

    async def stream(ctx: Any) -> AsyncIterator[str]:
        for word in words:
            yield word

    agent = FunctionAgent(stream, id="bench")
    db = tempfile.mkdtemp(prefix="iobridge-bench-")
    return create_app(Backend(Settings(database_url=f"sqlite:///{db}/bench.db",
                               retention_seconds=0), agents=[agent]))


def run_once(port: int, run_id: str) -> tuple[int, float, float, int]:
    """POST one run and read it all; returns (events, seconds, first-event seconds, bytes)."""
    payload = json.dumps({"threadId": f"t-{run_id}", "runId": run_id, "tools": [],
                          "context": [], "forwardedProps": {"agentId": "bench"},
                          "messages": [{"id": "u", "role": "user", "content": "go"}]}).encode()
    request = (b"POST /io-bridge/run HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
               b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(payload), payload))
    began = time.perf_counter()
    first = 0.0
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(request)
        while True:
            data = sock.recv(1 << 20)
            if not data:
                break
            if not first and b"data: " in data:
                first = time.perf_counter() - began
            chunks.append(data)
    elapsed = time.perf_counter() - began
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    text = _dechunk(body)
    if b'"RUN_FINISHED"' not in text:
        raise RuntimeError("the run did not finish")
    return text.count(b"\ndata: ") + text.startswith(b"data: "), elapsed, first, len(text)


def _dechunk(body: bytes) -> bytes:
    out = io.BytesIO()
    position = 0
    while True:
        line_end = body.index(b"\r\n", position)
        size = int(body[position:line_end].split(b";")[0], 16)
        if size == 0:
            return out.getvalue()
        start = line_end + 2
        out.write(body[start:start + size])
        position = start + size + 2


def measure(name: str, port: int, rounds: int) -> dict[str, float]:
    run_once(port, f"{name}-warmup")
    results = [run_once(port, f"{name}-{i}") for i in range(rounds)]
    events = results[0][0]
    rate = statistics.median(r[0] / r[1] for r in results)
    ttfe = statistics.median(r[2] for r in results)
    print(f"{name:>10}: {events} events, {results[0][3] / events:.0f} B/event, "
          f"{rate:,.0f} events/s (median of {rounds}), "
          f"time to first event {ttfe * 1000:.2f} ms")
    return {"rate": rate, "ttfe": ttfe}


def side_by_side(args: argparse.Namespace, baseline: Any) -> None:
    """Bare, this core and the baseline's, each in its own process, taking turns."""
    names = ["bare", "iobridge", "baseline"]
    rates: dict[str, list[float]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        ports = {"bare": stack.enter_context(ServerProcess("bare", deltas=args.deltas)).port}
        for name, tree in (("iobridge", THIS_TREE), ("baseline", baseline)):
            url = stack.enter_context(database("sqlite"))
            ports[name] = stack.enter_context(ServerProcess(
                "bridge", deltas=args.deltas, tree=tree,
                settings={"database_url": url, "retention_seconds": 0})).port
        for name in names:
            run_once(ports[name], f"{name}-warmup")
        for round_ in range(args.rounds):
            for name in names:
                events, elapsed, _, _ = run_once(ports[name], f"{name}-{round_}")
                rates[name].append(events / elapsed)
    bare = statistics.median(rates["bare"])
    for name in names:
        rate = statistics.median(rates[name])
        print(f"{name:>10}: {rate:,.0f} events/s (median of {args.rounds}), "
              f"{rate / bare:.2f} of bare")
    per_round = [o / t for o, t in zip(rates["iobridge"], rates["baseline"], strict=True)]
    print(f"this / baseline, events/s: {statistics.median(per_round):.3f} "
          f"(rounds {' '.join(f'{r:.2f}' for r in per_round)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    add_baseline_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    baseline = baseline_tree(args)
    if baseline is not None:
        side_by_side(args, baseline)
        print(f"total {time.monotonic() - started:.1f} s")
        return
    bridge_server = Server(bridge_app(args.deltas), profile=args.profile)
    with Server(bare_app(args.deltas)) as bare, bridge_server as bridge:
        base = measure("bare", bare.port, args.rounds)
        ours = measure("iobridge", bridge.port, args.rounds)
        ratio = ours["rate"] / base["rate"]
        verdict = "OK" if ratio >= 0.5 else "BELOW TARGET"
        print(f"     ratio: {ratio:.2f} of the bare baseline (target >= 0.50): {verdict}")
    if bridge_server.profile is not None:
        stream = io.StringIO()
        stats = pstats.Stats(bridge_server.profile, stream=stream)
        stats.sort_stats("tottime").print_stats(20)
        print("iobridge server thread, by own time (includes warm-up and all rounds):")
        print(stream.getvalue())
    print(f"total {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
