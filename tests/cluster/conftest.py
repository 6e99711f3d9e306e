"""Fixtures of the cluster tests: one Redis per session, two replicas per module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.cluster.replicas import Replica, postgres_database, redis_server, start_replica


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture(scope="module")
def prefix() -> str:
    """A key prefix per module, so modules sharing the Redis never see each other's keys."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, database_url: str, prefix: str
) -> Iterator[tuple[Replica, Replica]]:
    """Replicas A and B on one PostgreSQL database and one Redis (A migrates first)."""
    a = start_replica("A", tmp_path_factory.mktemp("a"), redis_url=redis_url,
                      database_url=database_url, prefix=prefix)
    b = start_replica("B", tmp_path_factory.mktemp("b"), redis_url=redis_url,
                      database_url=database_url, prefix=prefix)
    yield a, b
    for replica in (a, b):
        output = replica.stop()
        assert "Traceback" not in output, output
