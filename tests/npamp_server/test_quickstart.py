"""The README's N-PAMP quick start, run verbatim in an empty folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(60)

README = Path(__file__).resolve().parents[2] / "README.md"
NPAMP_PORT = 7443


def _commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- npamp-quickstart -->\n```sh\n(.*?)```\n<!-- /npamp-quickstart -->", text, re.S
    )
    assert block, "the README lost its N-PAMP quick start block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "iobridge"
    executable = shutil.which("iobridge", path=str(Path(sys.executable).parent))
    assert executable is not None
    return [executable, *words[1:]]


def test_the_readme_quick_start_completes_a_run(tmp_path: Path) -> None:
    keygen, serve, run = _commands()
    env = {**os.environ, "IOBRIDGE_PORT": str(free_port()), "IOBRIDGE_LOG_LEVEL": "warning"}
    made = subprocess.run(_argv(keygen), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    fingerprint = made.stdout.strip()
    with socket.socket() as probe:  # the quick start's port must be free (TIME_WAIT is fine)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", NPAMP_PORT))
    server = subprocess.Popen(
        _argv(serve), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert server.poll() is None, server.communicate()[0].decode()
            try:
                socket.create_connection(("127.0.0.1", NPAMP_PORT), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        result = subprocess.run(_argv(run), cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        assert any(e["type"] == "TOOL_CALL_RESULT" and '"value":5' in e["content"]
                   for e in events)
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=20)[0].decode()
    assert server.returncode == 0, output
    assert f"identity {fingerprint}" in output  # the server printed what to pin
