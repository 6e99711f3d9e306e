"""The README's N-PAMP quick start, run verbatim (by the shell) from a fresh clone's folder,
beside a running ``make serve``.

The folder is empty but for ``.venv`` (what ``make serve`` leaves there: here a link to the
suite's own virtualenv). A server already holds the HTTP port the quick start's server would
take (``IOBRIDGE_PORT`` points both at it: the stand-in for ``make serve`` on 8000, which a
test may not bind), so the quick start must leave HTTP alone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

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
    """The command as the user's shell runs it (``exec``: a signal reaches the program)."""
    assert shlex.split(command)[0] == ".venv/bin/iobridge", command
    return ["/bin/sh", "-c", f"exec {command}"]


def _fresh_clone_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "iobridge"
    folder.mkdir()
    (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return folder


def test_the_readme_quick_start_completes_a_run(tmp_path: Path, serve: Any) -> None:
    keygen, serve_line, run = _commands()
    make_serve = serve()  # the stand-in for `make serve`, holding the HTTP port
    tmp_path = _fresh_clone_folder(tmp_path)
    env = {**os.environ, "IOBRIDGE_PORT": str(make_serve.port), "IOBRIDGE_LOG_LEVEL": "warning"}
    made = subprocess.run(_argv(keygen), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    fingerprint = made.stdout.strip()
    with socket.socket() as probe:  # the quick start's port must be free (TIME_WAIT is fine)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", NPAMP_PORT))
    server = subprocess.Popen(
        _argv(serve_line), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
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
    assert "HTTP on" not in output
    assert make_serve.server.started  # the other server still serves
