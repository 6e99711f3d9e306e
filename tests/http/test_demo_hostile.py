"""Hostile text for the default (demo) agent never stalls the server (issue: hostile input).

Each input once froze every request for seconds. Here several copies run at once against a
real ``iobridge serve`` process (its own interpreter: the test process's garbage collector
cannot pause it) while another client times ``GET /agents`` back to back, with this
process's collector off for the measurement: the median must be
under ``MAX_LATENCY`` (the acceptance bound, 100 ms) and the slowest under
``SLOWEST_ALLOWED``. A stall blocks the one request in flight for its whole length (those
inputs froze the server 3.8 s to 31 s), so the slowest sample is the stall detector; its
bound leaves room for scheduling noise on a loaded shared CI machine (typical: a few ms
median, under 100 ms slowest).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.helpers import free_port, parse_sse, run_body

MAX_LATENCY = 0.100
SLOWEST_ALLOWED = 0.5
COPIES = 3

MANY_TOOLS = [
    {"name": f"tool_{i}", "description": "t",
     "parameters": {"type": "object", "properties": {"value": {"type": "string"}}}}
    for i in range(1000)
]
WORDS = "alpha beta: gamma=delta tool_x " * 40_000  # ~1.2 MB, separators and near-names


def hostile_bodies() -> dict[str, tuple[str, list[Any]]]:
    return {
        "20 KB of digits": ("1" * 20_000, []),
        "20 KB of digits in an expression": ("1" * 20_000 + " + 1", []),
        "nested powers": ("calculate (((9**99)**99)**99)**3", []),
        "1,000 tools x 1.2 MB": ("tool_999 value=last " + WORDS, MANY_TOOLS),
    }


def sample_latencies(url: str, done: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        while not done.is_set() or len(out) < 5:
            start = time.perf_counter()
            response = http.get("/io-bridge/agents")
            out.append(time.perf_counter() - start)
            assert response.status_code == 200
            time.sleep(0.01)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh ``iobridge serve`` process with the defaults (the demo agent), 8 MiB bodies."""
    port = free_port()
    db = tmp_path_factory.mktemp("hostile") / "iobridge.db"
    env = {**os.environ, "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
           "IOBRIDGE_MAX_BODY_BYTES": str(8 * 1024 * 1024), "IOBRIDGE_LOG_LEVEL": "warning"}
    env.pop("IOBRIDGE_CONFIG", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "iobridge.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a loaded machine starts a server slowly
        while True:
            try:
                httpx.get(f"{url}/io-bridge/agents", timeout=0.5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("iobridge serve did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("case", list(hostile_bodies()))
def test_hostile_demo_input_keeps_discovery_responsive(server_url: str, case: str) -> None:
    text, tools = hostile_bodies()[case]
    results: dict[int, list[dict[str, Any]]] = {}

    def hostile_run(index: int) -> None:
        # next-run: the frontend tool the text names ends the run instead of waiting.
        body = run_body(text, thread_id=f"{case}-{index}", run_id=f"{case}-{index}",
                        tools=tools, toolResultMode="next-run")
        with httpx.Client(base_url=server_url, timeout=60) as http:
            response = http.post("/io-bridge/run", json=body)
        results[index] = parse_sse(response.text)

    with httpx.Client(base_url=server_url, timeout=10) as http:
        http.get("/io-bridge/agents")  # warm up the connection path
    latencies: list[float] = []
    done = threading.Event()
    sampler = threading.Thread(target=sample_latencies, args=(server_url, done, latencies))
    runs = [threading.Thread(target=hostile_run, args=(i,)) for i in range(COPIES)]
    gc.collect()
    gc.disable()
    try:
        sampler.start()
        for run in runs:
            run.start()
        for run in runs:
            run.join(timeout=120)
        done.set()
        sampler.join(timeout=30)
    finally:
        gc.enable()

    assert len(results) == COPIES
    for events in results.values():
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    median, slowest = statistics.median(latencies), max(latencies)
    print(f"{case}: {len(latencies)} samples, median {median * 1000:.1f} ms, "
          f"max {slowest * 1000:.1f} ms")
    assert median < MAX_LATENCY, latencies
    assert slowest < SLOWEST_ALLOWED, latencies

    events = results[0]
    starts = {e["toolCallId"]: e["toolCallName"]
              for e in events if e["type"] == "TOOL_CALL_START"}
    outcome = {starts[e["toolCallId"]]: json.loads(e["content"])
               for e in events if e["type"] == "TOOL_CALL_RESULT"}
    if case == "nested powers":
        too_large = "the numbers are too large (about 1,000 digits at most)"
        assert outcome == {"calculate": {"error": too_large}}
    elif case == "20 KB of digits in an expression":
        assert outcome == {"calculate": {"error": "expression longer than 1000 characters"}}
    elif case == "1,000 tools x 1.2 MB":
        args = [e for e in events if e["type"] == "TOOL_CALL_ARGS"]
        assert list(starts.values()) == ["tool_999"]
        assert json.loads(args[0]["delta"]) == {"value": "last"}
    else:
        assert starts == {}
