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

    def start(*, agents: list[Any] | None = None, **overrides: Any) -> LiveServer:
        overrides.setdefault("database_url", database_url)
        overrides.setdefault("default_agent", "demo")
        slow = PydanticAIAgent(slow_agents.agent, id="slow")
        live = LiveServer(create_app(Backend(Settings(**overrides),
                                             agents=[slow, *(agents or [])])))
        started.append(live.__enter__())
        return live

    yield start
    for live in started:
        live.__exit__(None, None, None)


def client(live: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=f"{live.url}/io-bridge", timeout=20)
