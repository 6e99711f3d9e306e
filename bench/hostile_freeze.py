"""How long one hostile request holds the server's event loop (issue 29), per attack.

Each server is ``iobridge serve`` in its own process (a fresh SQLite file, upstream agents
configured through ``IOBRIDGE_AGENTS``, warmed up by one plain run); the upstream attacks come
from an AG-UI server in a process of its own (this script with ``--upstream``). While one
attack runs, a thread polls
``GET /healthz`` back to back; the figure is the slowest answer (a freeze shows as one long
poll), with the attack's answer beside it. ``--baseline DIR`` runs the same attacks against
the ``iobridge`` of another checkout's venv (``DIR/.venv/bin/iobridge``) in the same run,
interleaved, so the load of the machine weighs on both. Attacks are scaled down where the
old code is exponential or linear in them (stated per attack), to keep the run bounded.

With ``--loop-debug`` the servers run in asyncio's debug mode, which logs each callback that
holds the loop over 100 ms: their count and the longest are printed per attack (a measure of
the loop itself, where a probe also waits for the CPU on a loaded machine; debug mode slows
both sides).

    .venv/bin/python bench/hostile_freeze.py [--baseline /work/wt/base] [--rounds 3]
        [--loop-debug]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from _harness import free_port, wait_for_port

HERE = Path(__file__).resolve().parent
sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]


# -- the upstream attacks (``--upstream PORT``) ------------------------------------------------

def _upstream_events(kind: str) -> Iterator[dict[str, Any]]:
    if kind == "finish":  # the warm-up run
        yield {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "ready"}
        yield {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
        return
    if kind == "doubling":
        # 18 copies from the root: 1.3 s on af03d35 (22, the measured attack, took 21.4 s).
        yield {"type": "STATE_SNAPSHOT", "snapshot": {"a": "x" * 40}}
        yield {"type": "STATE_DELTA",
               "delta": [{"op": "copy", "from": "", "path": f"/k{i}"} for i in range(18)]}
        yield {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
        return
    if kind == "heavy-deltas":
        yield {"type": "STATE_SNAPSHOT", "snapshot": {"a": "x" * 400_000}}
        copy_and_remove = [{"op": "copy", "from": "/a", "path": "/b"},
                           {"op": "remove", "path": "/b"}]
        while True:
            yield {"type": "STATE_DELTA", "delta": copy_and_remove * 4}
    n = 0
    while True:  # "text": short deltas without end
        yield {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"word{n} "}
        n += 1


def serve_upstream(port: int) -> None:
    """``POST /agui/{kind}`` streams ``_upstream_events(kind)``."""
    import asyncio
    from collections.abc import AsyncIterator

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def run(request: Request) -> Response:
        await request.body()
        kind = request.path_params["kind"]

        async def stream() -> AsyncIterator[bytes]:
            for n, event in enumerate(_upstream_events(kind)):
                yield b"data: " + orjson.dumps(event) + b"\n\n"
                if n % 100 == 99:
                    await asyncio.sleep(0)

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/agui/{kind}", run, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--upstream", str(port)])
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/agui"
    finally:
        process.terminate()
        process.wait(timeout=10)


# -- the servers -------------------------------------------------------------------------------

class Server:
    """``iobridge serve`` of one checkout, on a free port, with its log in ``folder``."""

    def __init__(self, executable: Path, agents: list[dict[str, Any]], folder: Path,
                 loop_debug: bool) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "log"
        env = {**os.environ, "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{folder}/db",
               "IOBRIDGE_LOG_LEVEL": "warning", "IOBRIDGE_AGENTS": json.dumps(agents)}
        env.pop("IOBRIDGE_CONFIG", None)
        if loop_debug:
            # asyncio's debug mode logs every callback that holds the loop over 100 ms.
            env["PYTHONASYNCIODEBUG"] = "1"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(executable), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, self.process)
        self._read = 0

    def slow_callbacks(self) -> list[float]:
        """Seconds of each slow callback logged since the last call (debug mode)."""
        text = self.log_path.read_bytes()
        new, self._read = text[self._read:], len(text)
        return [float(m) for m in re.findall(rb"took (\d+\.\d+) seconds", new)]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


# -- the client attacks ------------------------------------------------------------------------

def run_body(run_id: str, **props: Any) -> dict[str, Any]:
    return {"threadId": run_id, "runId": run_id, "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u1", "role": "user", "content": "go"}],
            "forwardedProps": props}


def _post(url: str, body: bytes) -> str:
    with httpx.Client(base_url=url, timeout=120) as client:
        response = client.post("/io-bridge/run", content=body,
                               headers={"content-type": "application/json"})
    if response.status_code != 200:
        try:
            return f"{response.status_code} {response.json()['error']['code']}"
        except ValueError:
            return str(response.status_code)
    return _last_event(response.content)


def _last_event(stream: bytes) -> str:
    last = json.loads(stream.rstrip().rsplit(b"data: ", 1)[-1])
    return f"200 {last['type']} {last.get('code') or ''}".rstrip()


def _run_streamed(url: str, body: dict[str, Any]) -> str:
    """The run's last event, reading the stream without decoding the rest."""
    tail = b""
    with (httpx.Client(base_url=url, timeout=120) as client,
          client.stream("POST", "/io-bridge/run", json=body) as response):
        for chunk in response.iter_raw():
            tail = (tail + chunk)[-8192:]
    return _last_event(tail)


def schema_bomb(run_id: str) -> bytes:
    # 10,000 properties (~0.3 MB): ~3.5 s on af03d35 (100,000 took 33 s).
    schema = {"type": "object",
              "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    return orjson.dumps(run_body(run_id, structuredOutput={"schema": schema}))


def deep_state(run_id: str) -> bytes:
    body = orjson.dumps(run_body(run_id))
    return body.replace(b'"state":{}', b'"state":' + b"[" * 5000 + b"]" * 5000)


def big_numbers(run_id: str) -> bytes:
    body = orjson.dumps(run_body(run_id))
    numbers = b",".join([b"123456789012345678901234567890"] * 100_000)
    return body.replace(b'"state":{}', b'"state":[' + numbers + b"]")


@dataclass
class Attack:
    name: str
    #: (server url, run id) -> the attack's answer.
    send: Callable[[str, str], str]
    #: The upstream kind an ``up-<kind>`` agent streams (``None``: a client attack).
    upstream: str | None = None


ATTACKS = [
    Attack("schema bomb (10k properties)", lambda url, r: _post(url, schema_bomb(r))),
    Attack("state nested 5,000 levels", lambda url, r: _post(url, deep_state(r))),
    Attack("100k integers beyond 64 bits", lambda url, r: _post(url, big_numbers(r))),
    Attack("upstream: 18 doubling copies", lambda url, r: _run_streamed(
        url, run_body(r, agentId="up-doubling")), upstream="doubling"),
    Attack("upstream: endless text (timeout 3 s)", lambda url, r: _run_streamed(
        url, run_body(r, agentId="up-text")), upstream="text"),
    Attack("upstream: heavy state deltas (timeout 3 s)", lambda url, r: _run_streamed(
        url, run_body(r, agentId="up-heavy-deltas")), upstream="heavy-deltas"),
]


def probe_during(url: str, work: Callable[[], Any]) -> tuple[float, int, Any, float]:
    """Worst ``/healthz`` latency while ``work`` runs; probes made; its answer; its time."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            client.get("/healthz")
            while not done.is_set() or len(latencies) < 3:
                started = time.perf_counter()
                client.get("/healthz")
                latencies.append(time.perf_counter() - started)

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.05)
    started = time.perf_counter()
    try:
        answer = work()
    except httpx.HTTPError as exc:
        answer = type(exc).__name__
    took = time.perf_counter() - started
    done.set()
    thread.join()
    return max(latencies), len(latencies), answer, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout with a .venv")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop-debug", action="store_true",
                        help="also count callbacks over 100 ms (asyncio debug mode)")
    parser.add_argument("--upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        serve_upstream(args.upstream)
        return
    sides = {"this": Path(sys.executable).with_name("iobridge")}
    if args.baseline:
        sides["baseline"] = args.baseline / ".venv" / "bin" / "iobridge"
    print(f"worst GET /healthz latency during each attack, {args.rounds} rounds "
          f"(load average {os.getloadavg()[0]:.1f})")
    with contextlib.ExitStack() as stack:
        upstream_url = stack.enter_context(upstream())
        kinds = {a.upstream for a in ATTACKS if a.upstream} | {"finish"}
        agents = [{"id": f"up-{kind}", "agui_url": f"{upstream_url}/{kind}", "timeout": 3}
                  for kind in sorted(kinds)]
        servers: dict[str, Server] = {}
        for side, executable in sides.items():
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            servers[side] = Server(executable, agents, folder, args.loop_debug)
            stack.callback(servers[side].stop)
            # Warm up (imports, first connections) with one plain upstream run.
            print(f"{side}: warm-up", _run_streamed(servers[side].url,
                                                     run_body("warm", agentId="up-finish")))
            servers[side].slow_callbacks()
        for index, attack in enumerate(ATTACKS):
            print(f"\n{attack.name}")
            worst: dict[str, list[float]] = {side: [] for side in sides}
            for number in range(args.rounds):
                for side, server in servers.items():
                    idle, _, _, _ = probe_during(server.url, functools.partial(time.sleep, 0.3))
                    send = functools.partial(attack.send, server.url, f"a{index}-{number}")
                    freeze, probes, answer, took = probe_during(server.url, send)
                    worst[side].append(freeze)
                    slow = server.slow_callbacks()
                    debug = (f", callbacks over 100 ms: {len(slow)} (longest "
                             f"{max(slow, default=0) * 1000:.0f} ms)") if args.loop_debug else ""
                    print(f"  {side:8} round {number + 1}: worst {freeze * 1000:8.1f} ms "
                          f"({probes} probes, idle worst {idle * 1000:.1f} ms), "
                          f"attack {took:.2f} s -> {answer}{debug}")
            for side, values in worst.items():
                print(f"  {side:8} worst probe: min {min(values) * 1000:.1f} ms, "
                      f"max {max(values) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
