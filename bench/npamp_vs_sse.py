"""AG-UI over N-PAMP vs SSE: events/s and wire bytes per event for one 10,000-delta run.

One process, one event loop, one Bridge: uvicorn serves HTTP and the N-PAMP listener serves
Bridge streams from the same Backend. The run is produced once (received live over N-PAMP),
then its retained log is read again over each transport from event 0 — N-PAMP with a resume on
a new association, SSE with ``GET /runs/{id}/events`` — so both carry the very same octets.

Both clients decode every event's JSON. Client and server share one process and one core, so
the N-PAMP figures include both ends' per-frame work (seal/open, Bridge TLVs, one write per
frame). Wire bytes: SSE counts the HTTP response body (``id:``/``data:`` framing, before TLS, no
headers); N-PAMP counts whole frames (36-octet header + Bridge TLVs + event + 16-octet AEAD tag),
before TLS. Run: ``.venv/bin/python bench/npamp_vs_sse.py [--deltas N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.npamp.aio import self_signed_certificate, server_ssl_context
from iobridge.npamp.handshake import IdentityKey, SignatureScheme
from iobridge.npamp_server.client import connect
from iobridge.npamp_server.server import AgUiServer

FRAME_OVERHEAD = 36 + 16  # frame header + AES-256-GCM tag


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _agent(deltas: int) -> FunctionAgent:
    async def stream(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for i in range(deltas):
            yield f"w{i} "

    return FunctionAgent(stream, id="bench")


async def _npamp(client: Any, run: Any) -> tuple[int, int, float]:
    """Events, wire bytes and seconds for one N-PAMP stream."""
    wire = 0
    original = client.session.receive_frame

    def counting(frame_type: int, payload: bytes) -> Any:
        nonlocal wire
        wire += len(payload) + FRAME_OVERHEAD
        return original(frame_type, payload)

    client.session.receive_frame = counting
    start = time.perf_counter()
    count = 0
    async for _ in run:
        count += 1
    return count, wire, time.perf_counter() - start


async def main(deltas: int) -> None:
    http_port = _free_port()
    settings = Settings(port=http_port, database_url="memory://", log_level="warning",
                        npamp={"agui_peers": "*", "trusted_peers": "*",
                               "anonymous_max_effect": 3})
    app = create_app(settings, agents=[_agent(deltas)])
    backend = app.state.backend
    server_key = IdentityKey.generate(SignatureScheme.ED25519)
    client_key = IdentityKey.generate(SignatureScheme.ED25519)
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=http_port,
                                         log_level="warning"))
    http_task = asyncio.create_task(http.serve())
    while not http.started:
        await asyncio.sleep(0.01)
    with tempfile.TemporaryDirectory() as tmp:
        npamp = AgUiServer(backend, identity=server_key)
        ssl_ctx = server_ssl_context(*self_signed_certificate(tmp))
        listener = await npamp.listen("127.0.0.1", 0, ssl_ctx)
        pins = [server_key.fingerprint]
        run_input = {"threadId": "bench", "runId": "bench-run", "messages": [
            {"id": "u1", "role": "user", "content": "go"}], "forwardedProps": {"agentId": "bench"}}
        async with connect("127.0.0.1", listener.port, identity=client_key, pinned=pins) as c:
            stream = c.run(run_input)
            live = await _npamp(c, stream)
            corr = stream.correlation_id
        async with connect("127.0.0.1", listener.port, identity=client_key, pinned=pins) as c:
            replay = await _npamp(c, c.resume(corr, 0))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as client:
            start = time.perf_counter()
            body, sse_events, pending = 0, 0, b""
            async with client.stream("GET", "/io-bridge/runs/bench-run/events") as response:
                async for chunk in response.aiter_raw():
                    body += len(chunk)
                    *frames, pending = (pending + chunk).split(b"\n\n")
                    for frame in frames:  # decode like the N-PAMP client does
                        json.loads(frame.split(b"data: ", 1)[1])
                        sse_events += 1
            sse_seconds = time.perf_counter() - start
        await listener.wait_closed()
    http.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await http_task

    print(f"one run, {deltas} text deltas, {sse_events} AG-UI events (same log, same octets)")
    print(f"{'transport':<28}{'events':>8}{'seconds':>10}{'events/s':>12}{'bytes/event':>13}")
    rows = [
        ("N-PAMP live (run + carry)", *live),
        ("N-PAMP replay (resume 0)", *replay),
        ("SSE replay (GET events)", sse_events, body, sse_seconds),
    ]
    for name, events, wire, seconds in rows:
        print(f"{name:<28}{events:>8}{seconds:>10.3f}{events / seconds:>12.0f}"
              f"{wire / events:>13.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deltas", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().deltas))
