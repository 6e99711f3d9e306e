"""E2e harness: ``iobridge serve`` as a subprocess and the real ``@ag-ui/client``."""

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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import free_port

from agui_verify import parse_sse

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE = shutil.which("node")
CLIENT = HERE / "node_modules" / "@ag-ui" / "client"


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


@contextmanager
def running_server(
    workdir: Path, *, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Iterator[str]:
    """``iobridge serve`` in a subprocess working in ``workdir``; yields its base URL."""
    _require_node()
    port = free_port()
    full_env = {**os.environ,
                "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{workdir}/iobridge.db",
                "IOBRIDGE_LOG_LEVEL": "warning", **(env or {})}
    full_env.pop("IOBRIDGE_CONFIG", None)
    executable = Path(sys.executable).with_name("iobridge")
    process = subprocess.Popen(
        [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        cwd=workdir, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60  # a loaded machine starts a server slowly
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
                    pytest.fail("iobridge serve did not open its port within 60 s")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with the default configuration (demo agent, SQLite file)."""
    with running_server(tmp_path_factory.mktemp("e2e-server")) as url:
        yield url


def run_node(script: str, scenario: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
    """Run one of this folder's Node scripts on ``scenario``; returns the JSON report it
    prints last, asserting it reported no error and exited 0."""
    completed = subprocess.run(
        [NODE or "node", str(HERE / script), json.dumps(scenario)],
        cwd=HERE, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "SUPPRESS_TRANSFORMATION_WARNINGS": "true"},
    )
    lines = completed.stdout.strip().splitlines()
    assert lines, f"node printed nothing (exit {completed.returncode}):\n{completed.stderr}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert report["error"] is None, f"{report['error']}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, completed.stderr
    return report


def run_client(base_url: str, text: str | None, *, tools: list[dict[str, Any]] | None = None,
               frontend_results: dict[str, Any] | None = None,
               thread_id: str | None = None, agent_id: str | None = None,
               forwarded_props: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``runAgent`` call in Node; returns its report plus ids and the raw SSE replay.

    Only the new user message is sent (as io.Assist does; ``None``: no message at all);
    ``thread_id`` continues a thread.
    """
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    thread_id = thread_id or f"thread-{uuid.uuid4().hex[:12]}"
    scenario = {"baseUrl": base_url, "threadId": thread_id, "runId": run_id, "text": text,
                "tools": tools or [], "frontendResults": frontend_results or {},
                "timeoutMs": 15000, "agentId": agent_id,
                "forwardedProps": forwarded_props or {}}
    report = run_node("run_agent.mjs", scenario)
    # The same run replayed from the server's retained log: framing and lifecycle checked on
    # the exact bytes the client parsed.
    replay = httpx.get(f"{base_url}/io-bridge/runs/{run_id}/events", timeout=10)
    assert replay.status_code == 200
    report["wire"] = parse_sse(replay.content)
    report["runId"], report["threadId"] = run_id, thread_id
    return report




def run_conversation(base_url: str, texts: list[str], *, agent_id: str | None = None,
                     thread_id: str | None = None) -> dict[str, Any]:
    """Several runs on one thread by one ``HttpAgent`` that sends its whole history each run."""
    thread_id = thread_id or f"thread-{uuid.uuid4().hex[:12]}"
    turns = [{"runId": f"run-{uuid.uuid4().hex[:12]}", "text": text} for text in texts]
    scenario = {"baseUrl": base_url, "threadId": thread_id, "turns": turns,
                "agentId": agent_id, "timeoutMs": 20000}
    report = run_node("run_conversation.mjs", scenario, timeout=40)
    report["threadId"] = thread_id
    return report
