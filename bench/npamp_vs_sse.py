"""AG-UI over N-PAMP vs SSE: events/s and wire bytes per event for one 10,000-delta run.

One process, one event loop, one Bridge: uvicorn serves HTTP and the N-PAMP listener serves
Bridge streams from the same Backend. The run is produced once (received live over N-PAMP),
then its retained log is read again over each transport from event 0 — N-PAMP with a resume on
a new association, SSE with ``GET /runs/{id}/events`` — so both carry the very same octets.

Both clients decode every event's JSON. Client and server share one process and one core, so
the N-PAMP figures include both ends' per-frame work (seal/open, Bridge TLVs, one write per
frame). Wire bytes: SSE counts the HTTP response body (``id:``/``data:`` framing, before TLS, no
headers); N-PAMP counts whole frames (36-octet header + Bridge TLVs + event + 16-octet AEAD tag),
before TLS. Run: ``.venv/bin/python bench/npamp_vs_sse.py [--deltas N] [--rounds R]
[--processes] [--loop auto|asyncio|uvloop]``.

The replays are done ``--rounds`` times (default 15), N-PAMP and SSE alternated so both see the
same share of a shared machine's load, after one uncounted warm-up replay of each (so no
counted round pays for first connections, first calls and cold caches); the table shows the
fastest of each, and the ratio line also the median of the rounds' own ratios (steadier than
best vs best on a loaded machine) and each of them. Every row has this process's (the
client's) CPU per event. One round is a transfer of a few tens of ms, so on the shared 2-core
machine the rounds' own ratios spread widely (0.29-0.77 within one run of 7 rounds); 15 rounds
keep the median from resting on two or three of them.

``--processes``: the server (HTTP and N-PAMP listeners on one Backend) runs in its own process
and this process is only the client, so neither end's work is counted in the other's time.
It then also prints the server's CPU per event for each transport (every thread's scheduler
time from ``/proc/<pid>/task/*/schedstat``, in ns, around each transfer).

``--loop`` (default ``auto``: uvloop when installed, the selection ``iobridge serve`` and
``iobridge npamp run`` make; ``asyncio`` for the stock loop, whose TLS is Python) is the event
loop of both processes, for both transports alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import uvicorn
from _harness import cpu_ns, free_port, wait_for_port

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.eventloop import run
from iobridge.http.app import create_app
from iobridge.npamp.aio import self_signed_certificate, server_ssl_context
from iobridge.npamp.handshake import IdentityKey, SignatureScheme, keygen, load_identity
from iobridge.npamp_server.client import connect
from iobridge.npamp_server.server import AgUiServer


def _agent(deltas: int) -> FunctionAgent:
    async def stream(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for i in range(deltas):
            yield f"w{i} "

    return FunctionAgent(stream, id="bench")


async def _npamp(client: Any, run: Any) -> tuple[int, int, float, float]:
    """Events, wire bytes, seconds and client CPU seconds for one N-PAMP stream.

    Wire bytes are counted per chunk the association reads (whole frames as they come out of
    TLS), like the SSE side counts its body chunks: no per-frame hook on one side only.
    """
    wire = 0
    conn = client.association._conn
    original = conn.receive_data

    def counting(data: bytes) -> Any:
        nonlocal wire
        wire += len(data)
        return original(data)

    conn.receive_data = counting
    start, cpu = time.perf_counter(), time.process_time()
    count = 0
    async for _ in run:
        count += 1
    return count, wire, time.perf_counter() - start, time.process_time() - cpu


RUN_INPUT = {"threadId": "bench", "runId": "bench-run", "messages": [
    {"id": "u1", "role": "user", "content": "go"}], "forwardedProps": {"agentId": "bench"}}


@contextlib.asynccontextmanager
async def _server(
    deltas: int, server_key: IdentityKey, http_port: int, npamp_port: int = 0
) -> AsyncIterator[int]:
    """HTTP (uvicorn) and N-PAMP listeners on one Backend; yields the N-PAMP port."""
    settings = Settings(port=http_port, database_url="memory://", log_level="warning",
                        npamp={"agui_peers": "*", "trusted_peers": "*",
                               "anonymous_max_effect": 3})
    app = create_app(Backend(settings, agents=[_agent(deltas)]))
    backend = app.state.backend
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=http_port,
                                         log_level="warning"))
    http_task = asyncio.create_task(http.serve())
    while not http.started:
        await asyncio.sleep(0.01)
    with tempfile.TemporaryDirectory() as tmp:
        npamp = AgUiServer(backend, identity=server_key)
        ssl_ctx = server_ssl_context(*self_signed_certificate(tmp))
        listener = await npamp.listen("127.0.0.1", npamp_port, ssl_ctx)
        try:
            yield listener.port
        finally:
            await listener.wait_closed()
            http.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await http_task


def _cpu(pid: int | None) -> float:
    """Seconds of CPU the process ``pid`` used so far (every thread, scheduler accounting in
    ns: a replay can take less than one 10 ms tick); 0 in-process."""
    return 0.0 if pid is None else cpu_ns(pid) / 1e9


@dataclass
class _Transfer:
    """One transfer of the run: events, wire bytes, wall seconds, server and client CPU."""

    events: int
    wire: int
    seconds: float
    server_cpu: float
    client_cpu: float


async def _measure(
    pid: int | None, transfer: Awaitable[tuple[int, int, float, float]]
) -> _Transfer:
    """Run one transfer; the client's CPU is counted from where its wall time starts (the
    connection already open on both sides: httpx's client set-up is not an SSE cost)."""
    server = _cpu(pid)
    events, wire, seconds, client = await transfer
    return _Transfer(events, wire, seconds, _cpu(pid) - server, client)


async def _sse(http_port: int) -> tuple[int, int, float, float]:
    """Events, body bytes, seconds and client CPU seconds for one SSE replay of the log."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as client:
        start, cpu = time.perf_counter(), time.process_time()
        body, events, pending = 0, 0, b""
        async with client.stream("GET", "/io-bridge/runs/bench-run/events") as response:
            async for chunk in response.aiter_raw():
                body += len(chunk)
                *frames, pending = (pending + chunk).split(b"\n\n")
                for frame in frames:  # decode like the N-PAMP client does (orjson)
                    orjson.loads(frame.split(b"data: ", 1)[1])
                    events += 1
        return events, body, time.perf_counter() - start, time.process_time() - cpu


async def _client(
    deltas: int, http_port: int, npamp_port: int, server_fp: str, pid: int | None, rounds: int
) -> None:
    client_key = IdentityKey.generate(SignatureScheme.ED25519)
    pins = [server_fp]
    async with connect("127.0.0.1", npamp_port, identity=client_key, pinned=pins) as c:
        stream = c.run(RUN_INPUT)
        live = await _measure(pid, _npamp(c, stream))
        corr = stream.correlation_id
    replays: list[_Transfer] = []
    sses: list[_Transfer] = []
    async with connect("127.0.0.1", npamp_port, identity=client_key, pinned=pins) as c:
        await _npamp(c, c.resume(corr, 0))  # warm-up of each transport, not counted
    await _sse(http_port)
    for _ in range(rounds):  # alternated, so both see the same share of the machine's load
        async with connect("127.0.0.1", npamp_port, identity=client_key, pinned=pins) as c:
            replays.append(await _measure(pid, _npamp(c, c.resume(corr, 0))))
        sses.append(await _measure(pid, _sse(http_port)))

    replay = min(replays, key=lambda t: t.seconds)
    sse = min(sses, key=lambda t: t.seconds)
    where = "server in its own process" if pid is not None else "client and server in one process"
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"one run, {deltas} text deltas, {sse.events} AG-UI events (same log, same octets); "
          f"{where}, {loop} loop; replays: best of {rounds}, alternated, after one warm-up each")
    cpu_head = f"{'server CPU us/ev':>17}" if pid is not None else ""
    print(f"{'transport':<28}{'events':>8}{'seconds':>10}{'events/s':>12}{'bytes/event':>13}"
          f"{cpu_head}{'client CPU us/ev':>17}")
    rows = [
        ("N-PAMP live (run + carry)", live),
        ("N-PAMP replay (resume 0)", replay),
        ("SSE replay (GET events)", sse),
    ]
    for name, t in rows:
        cpu_col = f"{t.server_cpu / t.events * 1e6:>17.1f}" if pid is not None else ""
        print(f"{name:<28}{t.events:>8}{t.seconds:>10.3f}{t.events / t.seconds:>12.0f}"
              f"{t.wire / t.events:>13.1f}{cpu_col}{t.client_cpu / t.events * 1e6:>17.1f}")
    ratios = sorted(
        (r.events / r.seconds) / (s.events / s.seconds) for r, s in zip(replays, sses, strict=True)
    )
    per_round = ", ".join(f"{x:.2f}" for x in ratios)
    print(f"events/s ratio, N-PAMP replay / SSE replay: {sse.seconds / replay.seconds:.2f}x "
          f"best vs best, {statistics.median(ratios):.2f}x median of rounds "
          f"(each round, sorted: {per_round})")
    if pid is not None and sse.server_cpu > 0:
        per_npamp, per_sse = replay.server_cpu / replay.events, sse.server_cpu / sse.events
        print(f"server CPU per event, N-PAMP replay / SSE replay: {per_npamp / per_sse:.2f}x")


async def main(deltas: int, rounds: int) -> None:
    server_key = IdentityKey.generate(SignatureScheme.ED25519)
    http_port = free_port()
    async with _server(deltas, server_key, http_port) as npamp_port:
        await _client(deltas, http_port, npamp_port, server_key.fingerprint, None, rounds)


async def serve_forever(deltas: int, key_path: str, http_port: int, npamp_port: int) -> None:
    """The ``--serve`` side of ``--processes``: listen until terminated."""
    async with _server(deltas, load_identity(key_path), http_port, npamp_port):
        await asyncio.Event().wait()



def processes(deltas: int, rounds: int, loop: str) -> None:
    """Server in a child process, client here."""
    http_port, npamp_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        key_path = keygen(os.path.join(tmp, "server.key"))
        fingerprint = load_identity(key_path).fingerprint
        cmd = [sys.executable, __file__, "--serve", "--deltas", str(deltas), "--key",
               str(key_path), "--http-port", str(http_port), "--npamp-port", str(npamp_port),
               "--loop", loop]
        proc = subprocess.Popen(cmd)
        try:
            wait_for_port(http_port, proc)
            wait_for_port(npamp_port, proc)
            run(_client(deltas, http_port, npamp_port, fingerprint, proc.pid, rounds), loop)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15,
                        help="replays of each transport, alternated; the best of each is shown")
    parser.add_argument("--processes", action="store_true",
                        help="server in its own process; report its CPU per event")
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--npamp-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        run(serve_forever(args.deltas, args.key, args.http_port, args.npamp_port), args.loop)
    elif args.processes:
        processes(args.deltas, args.rounds, args.loop)
    else:
        run(main(args.deltas, args.rounds), args.loop)
