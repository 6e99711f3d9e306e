"""Real parts for the cluster tests: a ``redis-server``, a PostgreSQL database,
``iobridge serve`` replicas as separate processes on loopback ports, and two in-process
replicas, one of them behind a relay that can freeze."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import postgres_url
from tests.helpers import free_port
from tests.relay import Relay

from iobridge.agents.base import Agent
from iobridge.app import Backend
from iobridge.config import Settings

#: The two principals of the cluster tests (auth mode api-key).
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
#: Fast heartbeats so that losing a replica takes about a second.
HEARTBEAT, OWNER_LOST = 0.2, 1.0
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


def _require(what: str) -> None:
    reason = f"CLUSTER TESTS NOT RUN: {what}"
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " (CI=true makes this a failure)")
    pytest.skip(reason)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A private ``redis-server`` on a free port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        _require("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(process, port, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database on the test server (dropped on exit); yields its URL."""
    import asyncio

    import asyncpg

    url = postgres_url()
    name = f"iobridge_cluster_{uuid.uuid4().hex[:10]}"
    plain = url.replace("postgresql+asyncpg://", "postgresql://")

    async def admin(statement: str) -> None:
        conn = await asyncpg.connect(plain)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(admin(_ENDS_OUR_SESSIONS.format(name=name)))
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}"'))


# Not `DROP DATABASE ... WITH (FORCE)`: a role that is not a superuser may end only its own
# sessions, and FORCE fails when an autovacuum worker is in the database (a plain DROP stops
# that worker itself, and waits up to 5 s for the sessions ended here to go).
_ENDS_OUR_SESSIONS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = '{name}' AND usename = current_user AND pid <> pg_backend_pid()"
)


def _wait_port(process: subprocess.Popen[bytes], port: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            output = process.stdout.read().decode() if process.stdout else ""
            pytest.fail(f"{what} exited with {process.returncode}:\n{output}")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not open port {port} within 30 s")
        time.sleep(0.05)


def write_config(workdir: Path, *, api_keys: bool = True) -> Path:
    """auth api-key with alice and bob (keys in the environment), or no auth."""
    config = workdir / "iobridge.toml"
    config.write_text(
        "" if not api_keys else '[auth]\nmode = "api-key"\n'
        + "".join(f'[[auth.api_keys]]\nkey_env = "CLUSTER_KEY_{name.upper()}"\n'
                  f'principal = "{name}"\n' for name in KEYS),
        encoding="utf-8",
    )
    return config


@dataclass
class Replica:
    """One ``iobridge serve`` process."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    npamp_port: int | None = None
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def client(self, principal: str = "alice") -> httpx.Client:
        if principal not in self.clients:
            self.clients[principal] = httpx.Client(
                base_url=f"{self.url}/io-bridge", timeout=20,
                headers={"Authorization": f"Bearer {KEYS[principal]}"},
            )
        return self.clients[principal]

    def stop(self, sig: int = signal.SIGTERM) -> str:
        for client in self.clients.values():
            client.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            output = self.process.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            self.process.kill()
            output = self.process.communicate(timeout=5)[0]
        return output.decode(errors="replace")


def start_replica(
    name: str, workdir: Path, *, redis_url: str, database_url: str, prefix: str,
    env: dict[str, str] | None = None, args: tuple[str, ...] = (), npamp: bool = False,
    api_keys: bool = True,
) -> Replica:
    port = free_port()
    npamp_port = free_port() if npamp else None
    full_env = {
        **os.environ, "PYTHONUNBUFFERED": "1",
        "IOBRIDGE_DATABASE_URL": database_url, "IOBRIDGE_REDIS_URL": redis_url,
        "IOBRIDGE_REDIS_PREFIX": prefix, "IOBRIDGE_HEARTBEAT_SECONDS": str(HEARTBEAT),
        "IOBRIDGE_OWNER_LOST_SECONDS": str(OWNER_LOST), "IOBRIDGE_LOG_LEVEL": "warning",
        "IOBRIDGE_DETACH_GRACE_SECONDS": "10",
        **{f"CLUSTER_KEY_{who.upper()}": key for who, key in KEYS.items()},
        **(env or {}),
    }
    full_env.pop("IOBRIDGE_CONFIG", None)
    config = write_config(workdir, api_keys=api_keys)
    command = [sys.executable, "-m", "iobridge.cli", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--config", str(config), *args]
    if npamp_port is not None:
        command += ["--npamp-port", str(npamp_port), "--npamp-agree"]
    process = subprocess.Popen(command, cwd=workdir, env=full_env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait_port(process, port, f"replica {name}")
    if npamp_port is not None:
        _wait_port(process, npamp_port, f"replica {name} (N-PAMP)")
    return Replica(name, process, f"http://127.0.0.1:{port}", npamp_port)


def run_body(thread_id: str, run_id: str | None = None, text: str = "get_weather city=Oslo",
             **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": run_id or f"run-{uuid.uuid4().hex[:10]}",
            "messages": [{"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}],
            "tools": [WEATHER], "context": [], "state": {}, "forwardedProps": {}, **extra}


def sse(response: httpx.Response) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(id, event)`` of an SSE response as frames arrive."""
    seq = 0
    for line in response.iter_lines():
        if line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("data: "):
            yield seq, json.loads(line[6:])


def read_until(
    events: Iterator[tuple[int, dict[str, Any]]], kind: str
) -> list[tuple[int, dict[str, Any]]]:
    """Events up to and including the first of type ``kind``."""
    seen = []
    for seq, event in events:
        seen.append((seq, event))
        if event["type"] == kind:
            return seen
    raise AssertionError(f"the stream ended before {kind}: {[e['type'] for _, e in seen]}")


@contextlib.asynccontextmanager
async def a_behind_a_relay(
    tmp_path: Path, prefix: str, *agents: Agent
) -> AsyncIterator[tuple[Backend, Backend, Relay]]:
    """Replicas A and B on one SQLite file and one Redis, A's Redis connection through a relay
    the test may freeze (A then lives on, its store reachable, its heartbeats gone)."""
    with redis_server(tmp_path) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        relay = Relay(("127.0.0.1", port))
        relay.restore()
        # The heartbeats of the replica processes: a loaded machine must not lose A early.
        common = {"database_url": f"sqlite:///{tmp_path}/runs.db", "redis_prefix": prefix,
                  "heartbeat_seconds": HEARTBEAT, "owner_lost_seconds": OWNER_LOST}
        a = Backend(Settings(redis_url=f"redis://127.0.0.1:{relay.port}/0", **common),
                    agents=list(agents))
        try:
            async with Backend(Settings(redis_url=url, **common), agents=list(agents)) as b:
                await a.__aenter__()
                yield a, b, relay
        finally:
            relay.frozen = False
            if a.is_open:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(a.__aexit__(None, None, None), 10)
            relay.close()
