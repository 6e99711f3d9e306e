"""The real application on a real store (SQLite file, PostgreSQL), reached in-process.

Stores are opened in the test's event loop, so the app is driven through
``httpx.ASGITransport`` (with its lifespan) rather than a server thread with its own loop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import SQL_BACKENDS, open_backend
from tests.helpers import free_port

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import ThreadStore


@dataclass
class Rig:
    client: httpx.AsyncClient
    store: ThreadStore
    app: Any


@pytest.fixture(params=SQL_BACKENDS)
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    async with open_backend(request.param, tmp_path) as store:
        app = create_app(Backend(Settings(database_url="memory://"), store=store))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", timeout=30
            ) as client:
                yield Rig(client, store, app)


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``iobridge serve`` in its own process (``IOBRIDGE_*`` settings as keywords): timing
    probes then measure the server's loop, not a GIL shared with the test's client."""
    started: list[subprocess.Popen[bytes]] = []

    def start(**settings: Any) -> str:
        port = free_port()
        env = {**os.environ, "IOBRIDGE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/db",
               "IOBRIDGE_LOG_LEVEL": "warning"}
        env.pop("IOBRIDGE_CONFIG", None)
        env.update({f"IOBRIDGE_{k.upper()}": str(v) for k, v in settings.items()})
        executable = Path(sys.executable).with_name("iobridge")
        with open(tmp_path / f"server-{port}.log", "ab") as log:
            process = subprocess.Popen(
                [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port)],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        started.append(process)
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, (tmp_path / f"server-{port}.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                assert time.monotonic() < deadline, "iobridge serve did not start"
                time.sleep(0.05)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
