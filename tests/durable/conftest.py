"""Fixtures of the durable-run tests: the project's fake OpenAI-compatible server, and a
migrated database of each kind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.agents.fake_openai import FakeOpenAI
from tests.backends import postgres_url
from tests.cluster.replicas import postgres_database

from iobridge.store.migrate import upgrade


@pytest.fixture(scope="session")
def _openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_openai(_openai_server: FakeOpenAI) -> FakeOpenAI:
    _openai_server.reset()
    return _openai_server


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of its own: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'durable.db'}"
        asyncio.run(upgrade(url))
        yield url
        return
    postgres_url()
    with postgres_database() as url:
        asyncio.run(upgrade(url))
        yield url
