"""``iobridge serve`` as a real process: N-PAMP alone (``--no-http``) and both transports.

The standalone test blocks FastAPI, Starlette and uvicorn from being imported at all in the
server process: if any part of the N-PAMP path built (or even imported) the HTTP app, the
server would fail to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import free_port
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.npamp.handshake import IdentityKey, SignatureScheme, load_identity
from iobridge.npamp_server.client import connect

pytestmark = pytest.mark.timeout(60)

BLOCK_HTTP = (
    "import sys\n"
    "for name in ('fastapi', 'starlette', 'uvicorn'):\n"
    "    sys.modules[name] = None  # any import of these now raises ImportError\n"
    "from iobridge.cli import main\n"
    "sys.argv = ['iobridge', *sys.argv[1:]]\n"
    "main()\n"
)
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


def _config(tmp_path: Path, key: Path) -> Path:
    config = tmp_path / "iobridge.toml"
    config.write_text(
        'database_url = "memory://"\n'
        "[npamp]\n"
        f'identity_key = "{key}"\n'
        'trusted_peers = "*"\n'
        'agui_peers = "*"\n',
        encoding="utf-8",
    )
    return config


@contextlib.contextmanager
def _serving(args: list[str], *, block_http: bool, npamp_port: int) -> Iterator[None]:
    command = [sys.executable, "-c", BLOCK_HTTP] if block_http else [
        sys.executable, "-m", "iobridge.cli"]
    proc = subprocess.Popen(
        [*command, "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", npamp_port), 0.2
            ):
                break
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output = proc.communicate(timeout=15)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert proc.returncode == 0, output
        assert "Traceback" not in output, output


def _cli_run(npamp_port: int, fingerprint: str, message: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        app,
        ["npamp", "run", "--connect", f"127.0.0.1:{npamp_port}", "--pin", fingerprint,
         "--message", message, "--timeout", "10"],
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


async def _resume_then_cancel(npamp_port: int, fingerprint: str) -> list[str]:
    """Start an in-run frontend-tool run, drop the association, resume on a new one, cancel."""
    key = IdentityKey.generate(SignatureScheme.ED25519)
    body = {
        "threadId": "t-standalone", "runId": "r-standalone", "tools": [WEATHER], "context": [],
        "messages": [{"id": "u1", "role": "user", "content": "get_weather for Oslo"}],
        "forwardedProps": {"toolResultMode": "in-run"},
    }
    async with connect("127.0.0.1", npamp_port, identity=key, pinned=[fingerprint]) as client:
        stream = client.run(body)
        async for event in stream:
            if event.type == "TOOL_CALL_END":
                break  # the association drops while the run waits for the tool
    # Resume two events back: the replay must start right after the cursor.
    cursor, corr = stream.last_event_id - 2, stream.correlation_id
    ids: list[int] = []
    seen: list[str] = []
    async with connect("127.0.0.1", npamp_port, identity=key, pinned=[fingerprint]) as client:
        resumed = client.resume(corr, cursor)
        async with asyncio.timeout(10):
            async for event in resumed:
                ids.append(event.event_id)
                seen.append(event.type)
                if event.type == "TOOL_CALL_END":
                    await client.cancel(resumed)
        assert ids[:2] == [cursor + 1, cursor + 2]  # every event once, in order
        assert resumed.cancelled
    return seen


def test_no_http_serves_run_resume_and_cancel_without_fastapi(tmp_path: Path) -> None:
    assert CliRunner().invoke(app, ["npamp", "keygen", str(tmp_path / "server")]).exit_code == 0
    fingerprint = load_identity(tmp_path / "server").fingerprint
    port = free_port()
    config = _config(tmp_path, tmp_path / "server")
    args = ["--no-http", "--npamp-port", str(port), "--config", str(config)]
    with _serving(args, block_http=True, npamp_port=port):
        events = _cli_run(port, fingerprint, "what is 2 + 3")
        assert events[0]["type"] == "RUN_STARTED"
        assert events[-1]["type"] == "RUN_FINISHED"
        assert any(e["type"] == "TOOL_CALL_RESULT" and "5" in e["content"] for e in events)
        seen = asyncio.run(_resume_then_cancel(port, fingerprint))
        # The resumed stream carries what came after the cursor, and the cancel ends it.
        assert seen[1] == "TOOL_CALL_END"


def test_no_http_without_an_npamp_port_is_one_clear_error() -> None:
    result = CliRunner().invoke(app, ["serve", "--no-http"])
    assert result.exit_code == 2
    assert "--no-http needs an N-PAMP port" in result.output


def test_serve_carries_both_transports_from_one_backend(tmp_path: Path) -> None:
    assert CliRunner().invoke(app, ["npamp", "keygen", str(tmp_path / "server")]).exit_code == 0
    fingerprint = load_identity(tmp_path / "server").fingerprint
    npamp_port, http_port = free_port(), free_port()
    config = _config(tmp_path, tmp_path / "server")
    args = ["--port", str(http_port), "--npamp-port", str(npamp_port), "--config", str(config)]
    with _serving(args, block_http=False, npamp_port=npamp_port):
        events = _cli_run(npamp_port, fingerprint, "what is 2 + 3")
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        # Both transports serve one Backend: the N-PAMP run is retained for HTTP resume.
        # (Runs are keyed by their owner; in auth mode none every caller is "anonymous".)
        deadline = time.monotonic() + 10
        while True:
            try:
                sse = httpx.get(
                    f"http://127.0.0.1:{http_port}/io-bridge/runs/{events[0]['runId']}/events",
                    timeout=5,
                )
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert sse.status_code == 200
        assert sse.text.count("data: ") == len(events)
        wrong_pin = CliRunner().invoke(
            app,
            ["npamp", "run", "--connect", f"127.0.0.1:{npamp_port}", "--pin", "sha256:" + "0" * 64,
             "-m", "hi", "--timeout", "5"],
        )
        assert wrong_pin.exit_code == 1


def test_npamp_agree_off_loopback_and_a_missing_key_are_one_line_errors(tmp_path: Path) -> None:
    agree = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--npamp-port", "7443", "--npamp-agree"],
        env={"IOBRIDGE_ALLOWED_HOSTS": '["*"]'},  # off loopback, HTTP needs its host names
    )
    assert agree.exit_code == 2
    assert agree.output.strip() == (
        "iobridge: --npamp-agree is for development: bind N-PAMP to a loopback address"
    )
    missing = CliRunner().invoke(
        app, ["serve", "--npamp-port", "7443", "--npamp-key", str(tmp_path / "nope.key")]
    )
    assert missing.exit_code == 2
    assert len(missing.output.strip().splitlines()) == 1
    assert "no key file at" in missing.output and "iobridge npamp keygen" in missing.output
