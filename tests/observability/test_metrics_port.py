"""``metrics.port``: the registry on a listener of its own, also for the N-PAMP-only server
(``--no-http``, run here with FastAPI, Starlette and uvicorn made unimportable), and then not
on the HTTP port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from tests.helpers import LiveServer, free_port
from typer.testing import CliRunner

from iobridge.app import Backend
from iobridge.cli import app
from iobridge.config import MetricsSettings, Settings
from iobridge.http.app import create_app
from iobridge.npamp.handshake import load_identity

pytestmark = pytest.mark.timeout(60)

BLOCK_HTTP = (
    "import sys\n"
    "for name in ('fastapi', 'starlette', 'uvicorn'):\n"
    "    sys.modules[name] = None\n"
    "from iobridge.cli import main\n"
    "sys.argv = ['iobridge', *sys.argv[1:]]\n"
    "main()\n"
)


@contextlib.contextmanager
def _serving(args: list[str], wait_port: int) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCK_HTTP, "serve", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            try:
                httpx.get(f"http://127.0.0.1:{wait_port}/metrics", timeout=1)
                break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=15)[0].decode()
        assert proc.returncode == 0, output
        assert "Traceback" not in output, output


def _values(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_the_npamp_only_server_serves_metrics_on_its_own_port(tmp_path: Path) -> None:
    assert CliRunner().invoke(app, ["npamp", "keygen", str(tmp_path / "server")]).exit_code == 0
    fingerprint = load_identity(tmp_path / "server").fingerprint
    npamp_port, metrics_port = free_port(), free_port()
    config = tmp_path / "iobridge.toml"
    config.write_text(
        'database_url = "memory://"\n'
        "[metrics]\n"
        f"port = {metrics_port}\n"
        "[npamp]\n"
        f'identity_key = "{tmp_path / "server"}"\n'
        'trusted_peers = "*"\n'
        'agui_peers = "*"\n',
        encoding="utf-8",
    )
    args = ["--no-http", "--npamp-port", str(npamp_port), "--config", str(config)]
    with _serving(args, metrics_port):
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        before = httpx.get(url).text
        assert _values(before, "iobridge_runs_started_total") == {}
        result = CliRunner().invoke(app, [
            "npamp", "run", "--connect", f"127.0.0.1:{npamp_port}", "--pin", fingerprint,
            "--message", "what is 2 + 3", "--timeout", "10",
        ])
        assert result.exit_code == 0, result.output
        events = [json.loads(line) for line in result.stdout.splitlines()
                  if line.startswith("{")]
        assert events[-1]["type"] == "RUN_FINISHED"
        after = httpx.get(url).text
    demo = frozenset({("agent", "demo")})
    assert _values(after, "iobridge_runs_started_total") == {demo: 1.0}
    assert _values(after, "iobridge_events_total") == {demo: float(len(events))}
    assert _values(after, "iobridge_tool_calls_total") == {
        frozenset({("agent", "demo"), ("kind", "server")}): 1.0
    }
    assert _values(after, "iobridge_active_runs") == {frozenset(): 0.0}


def test_with_a_metrics_port_the_http_port_does_not_serve_them() -> None:
    settings = Settings(database_url="memory://", metrics={"port": free_port()})
    with LiveServer(create_app(Backend(settings))) as live:
        assert httpx.get(f"{live.url}/metrics").status_code == 404


def test_a_token_with_a_metrics_port_is_refused() -> None:
    with pytest.raises(ValidationError, match="takes no token"):
        MetricsSettings(port=9100, token_env="SCRAPE_TOKEN")


def test_workers_refuse_a_shared_metrics_port(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--workers", "2", "--port", str(free_port())],
        env={"IOBRIDGE_REDIS_URL": "redis://127.0.0.1:1/0",
             "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/w.db",
             "IOBRIDGE_METRICS__PORT": str(free_port())},
    )
    assert result.exit_code == 2
    assert "cannot share metrics.port" in result.output
