"""``iobridge npamp keygen`` and ``npamp run`` against ``serve``'s wiring (HTTP + N-PAMP in one
uvicorn loop, on loopback)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from tests.helpers import free_port
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.npamp.identity import load_identity
from iobridge.npamp_server.server import install

pytestmark = pytest.mark.timeout(30)


def test_keygen_prints_the_fingerprint_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "id")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_identity(tmp_path / "id").fingerprint
    assert (tmp_path / "id.pub").is_file()
    again = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "id")])
    assert again.exit_code == 2
    bad = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "x"), "--scheme", "rsa"])
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()


def test_serve_wiring_carries_a_run_to_the_cli_client(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["npamp", "keygen", str(tmp_path / "server")]).exit_code == 0
    fingerprint = load_identity(tmp_path / "server").fingerprint
    npamp_port, http_port = free_port(), free_port()
    settings = Settings(
        port=http_port,
        database_url="memory://",
        npamp={
            "port": npamp_port,
            "identity_key": tmp_path / "server",
            "trusted_peers": "*",
            "agui_peers": "*",
        },
    )
    application = create_app(settings)
    install(application, application.state.bridge)
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=http_port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.01)
        result = runner.invoke(
            app,
            [
                "npamp", "run", "--connect", f"127.0.0.1:{npamp_port}", "--pin", fingerprint,
                "--message", "what is 2 + 3", "--thread-id", "cli-thread", "--timeout", "10",
            ],
        )
        assert result.exit_code == 0, result.output
        events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        run_id = events[0]["runId"]
        # The same runtime serves the run over HTTP.
        sse = httpx.get(
            f"http://127.0.0.1:{http_port}/io-bridge/runs/{run_id}/events", timeout=5
        ).text
        assert sse.count("data: ") == len(events)
        wrong_pin = runner.invoke(
            app,
            ["npamp", "run", "--connect", f"127.0.0.1:{npamp_port}", "--pin", "sha256:" + "0" * 64,
             "-m", "hi", "--timeout", "5"],
        )
        assert wrong_pin.exit_code == 1
    finally:
        server.should_exit = True
        thread.join(timeout=10)
