"""End to end: the real ``iobridge serve`` process driven by the real ``@ag-ui/client``.

The server runs as a subprocess on a free loopback port; each scenario is one Node process
(``run_agent.mjs``) using ``HttpAgent.runAgent`` and printing what it saw. Frontend tools are
executed in ``onToolCallEndEvent`` and their results POSTed while the stream is open, as the
io.Intelligence frontends do. Skipped when Node or ``tests/e2e/node_modules`` is missing,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agui_verify import parse_sse, verify_events

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE = shutil.which("node")
CLIENT = HERE / "node_modules" / "@ag-ui" / "client"

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city (runs in the browser).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
STOCK = {
    "name": "get_stock",
    "description": "Latest price of a ticker (runs in the browser).",
    "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}},
}


def _require_node() -> None:
    missing = [what for what, ok in (("node", NODE), ("tests/e2e/node_modules", CLIENT.is_dir()))
               if not ok]
    if not missing:
        return
    reason = (f"E2E WITH THE REAL @ag-ui/client NOT RUN: missing {', '.join(missing)} "
              "(run `make e2e-deps`)")
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``iobridge serve`` in a subprocess; yields its base URL."""
    _require_node()
    port = _free_port()
    workdir = tmp_path_factory.mktemp("e2e-server")
    env = {**os.environ,
           "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{workdir}/iobridge.db",
           "IOBRIDGE_LOG_LEVEL": "warning"}
    env.pop("IOBRIDGE_CONFIG", None)
    executable = Path(sys.executable).with_name("iobridge")
    process = subprocess.Popen(
        [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 20
    try:
        while True:
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                pytest.fail(f"iobridge serve exited with {process.returncode}:\n{output}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("iobridge serve did not open its port within 20 s")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def run_client(base_url: str, text: str, *, tools: list[dict[str, Any]] | None = None,
               frontend_results: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``runAgent`` call in Node; returns its report plus ids and the raw SSE replay."""
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    scenario = {"baseUrl": base_url, "threadId": thread_id, "runId": run_id, "text": text,
                "tools": tools or [], "frontendResults": frontend_results or {},
                "timeoutMs": 15000}
    completed = subprocess.run(
        [NODE or "node", str(HERE / "run_agent.mjs"), json.dumps(scenario)],
        cwd=HERE, capture_output=True, text=True, timeout=30,
        env={**os.environ, "SUPPRESS_TRANSFORMATION_WARNINGS": "true"},
    )
    lines = completed.stdout.strip().splitlines()
    assert lines, f"node printed nothing (exit {completed.returncode}):\n{completed.stderr}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert report["error"] is None, f"{report['error']}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, completed.stderr
    # The same run replayed from the server's retained log: framing and lifecycle checked on
    # the exact bytes the client parsed.
    replay = httpx.get(f"{base_url}/io-bridge/runs/{run_id}/events", timeout=10)
    assert replay.status_code == 200
    report["wire"] = parse_sse(replay.content)
    report["runId"], report["threadId"] = run_id, thread_id
    return report


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def check(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Both views of the run pass the checker and agree; returns the client's events."""
    events: list[dict[str, Any]] = report["events"]
    verify_events(events, thread_id=report["threadId"], run_id=report["runId"])
    verify_events(report["wire"], thread_id=report["threadId"], run_id=report["runId"])
    assert kinds(events) == kinds(report["wire"])
    return events


def test_text_run_from_the_demo_agent(server: str) -> None:
    report = run_client(server, "hello there")
    events = check(report)
    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_FINISHED"
    assert kinds(events)[1] == "TEXT_MESSAGE_START" and kinds(events)[-2] == "TEXT_MESSAGE_END"
    assert set(kinds(events)[2:-2]) == {"TEXT_MESSAGE_CONTENT"}
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("You said: hello there.")
    assert [m["role"] for m in report["newMessages"]] == ["assistant"]
    assert report["newMessages"][0]["content"] == text
    assert report["runErrors"] == []


def test_server_tool_runs_on_the_server(server: str) -> None:
    report = run_client(server, "what time is it?")
    events = check(report)
    assert report["posts"] == []
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "current_time"
    call_id = start["toolCallId"]
    sequence = [e["type"] for e in events if e.get("toolCallId") == call_id]
    assert sequence == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "utc" in json.loads(result["content"])
    assert kinds(events)[-1] == "RUN_FINISHED"
    roles = [m["role"] for m in report["newMessages"]]
    assert roles[:2] == ["assistant", "tool"] and roles[-1] == "assistant"


def test_frontend_tool_result_posted_while_the_stream_is_open(server: str) -> None:
    report = run_client(server, 'Please call get_weather {"city": "Paris"}', tools=[WEATHER],
                        frontend_results={"get_weather": {"temperature": 21, "sky": "clear"}})
    events = check(report)
    [post] = report["posts"]
    assert post["toolCallName"] == "get_weather"
    assert post["status"] == 200 and post["body"] == {"status": "accepted"}
    call_id = post["toolCallId"]
    sequence = [e["type"] for e in events if e.get("toolCallId") == call_id]
    assert sequence == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    args = "".join(e["delta"] for e in events
                   if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == call_id)
    assert json.loads(args) == {"city": "Paris"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {"temperature": 21, "sky": "clear",
                                             "args": {"city": "Paris"}}
    # The run continued after the result: more text, then RUN_FINISHED.
    after = kinds(events)[kinds(events).index("TOOL_CALL_RESULT"):]
    assert "TEXT_MESSAGE_CONTENT" in after and after[-1] == "RUN_FINISHED"
    reply = "".join(e["delta"] for e in events[events.index(result):]
                    if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "get_weather" in reply and "21" in reply
    tool_messages = [m for m in report["newMessages"] if m["role"] == "tool"]
    assert [m["toolCallId"] for m in tool_messages] == [call_id]


def test_mixed_turn_server_tool_and_two_parallel_frontend_tools(server: str) -> None:
    report = run_client(
        server, "get_weather city=Oslo and get_stock ticker=ACME, and what time is it",
        tools=[WEATHER, STOCK],
        frontend_results={"get_weather": {"temperature": -3}, "get_stock": {"price": 12.5}},
    )
    events = check(report)
    starts = {e["toolCallName"]: e["toolCallId"] for e in events
              if e["type"] == "TOOL_CALL_START"}
    assert set(starts) == {"get_weather", "get_stock", "current_time"}
    # One assistant message carries the three parallel calls.
    parents = {e.get("parentMessageId") for e in events if e["type"] == "TOOL_CALL_START"}
    assert len(parents) == 1
    assert sorted(p["toolCallName"] for p in report["posts"]) == ["get_stock", "get_weather"]
    assert all(p["status"] == 200 for p in report["posts"])
    results = {e["toolCallId"]: json.loads(e["content"]) for e in events
               if e["type"] == "TOOL_CALL_RESULT"}
    assert set(results) == set(starts.values())
    assert results[starts["get_weather"]] == {"temperature": -3, "args": {"city": "Oslo"}}
    assert results[starts["get_stock"]] == {"price": 12.5, "args": {"ticker": "ACME"}}
    assert "utc" in results[starts["current_time"]]
    # The frontend executed only its own tools, never the server's.
    assert "current_time" not in {p["toolCallName"] for p in report["posts"]}
    assert kinds(events)[-1] == "RUN_FINISHED"
    assert report["runErrors"] == []
