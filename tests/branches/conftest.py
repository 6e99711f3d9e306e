"""Fixtures of the branch and busy-thread tests: a server on SQLite or PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.branches import slow_agents
from tests.cluster.replicas import postgres_database
from tests.helpers import LiveServer

from iobridge.agents.pydantic_agent import PydanticAIAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/iobridge.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def server(database_url: str) -> Iterator[Callable[..., LiveServer]]:
    """``server(**settings)``: a live server with the demo and the slow agent."""
    started: list[LiveServer] = []

    def start(*, python_agents: list[Any] | None = None, **overrides: Any) -> LiveServer:
        overrides.setdefault("database_url", database_url)
        overrides.setdefault("default_agent", "demo")
        slow = PydanticAIAgent(slow_agents.agent, id="slow")
        live = LiveServer(create_app(Backend(Settings(**overrides),
                                             agents=[slow, *(python_agents or [])])))
        started.append(live.__enter__())
        return live

    yield start
    for live in started:
        live.__exit__(None, None, None)


def client(live: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=f"{live.url}/io-bridge", timeout=20)


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str
) -> Iterator[tuple[Any, Any, Any]]:
    """Replicas A and B (``iobridge serve`` processes) on one PostgreSQL and a real Redis,
    with the demo agent as default and the slow agent, a queue bound of 3; and a client of
    that Redis whose ``queued(thread)`` counts the runs waiting for a thread."""
    import json
    import os
    import uuid

    from tests.cluster.replicas import redis_server, start_replica

    root = str(Path(__file__).resolve().parents[2])
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        "IOBRIDGE_DEFAULT_AGENT": "demo",
        "IOBRIDGE_AGENTS": json.dumps([
            {"id": "slow", "pydantic_ai": "tests.branches.slow_agents:agent"}]),
        "IOBRIDGE_MAX_QUEUED_RUNS_PER_THREAD": "3",
        "IOBRIDGE_DETACH_GRACE_SECONDS": "0",
    }
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with redis_server(tmp_path_factory.mktemp("redis")) as redis_url:
        a = start_replica("A", tmp_path_factory.mktemp("a"), redis_url=redis_url,
                          database_url=pg_url, prefix=prefix, env=env)
        b = start_replica("B", tmp_path_factory.mktemp("b"), redis_url=redis_url,
                          database_url=pg_url, prefix=prefix, env=env)
        import redis

        shared = redis.Redis.from_url(redis_url)

        class Queues:
            def queued(self, thread: str) -> int:
                keys = [k for k in shared.scan_iter(f"{prefix}:queue:*") if k.endswith(
                    f".{thread}".encode())]
                return sum(int(shared.zcard(k)) for k in keys)

        yield a, b, Queues()
        shared.close()
        for replica in (a, b):
            output = replica.stop()
            assert "Traceback" not in output, output
