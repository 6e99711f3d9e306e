"""Fixtures for agent tests: the shared local OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_openai import FakeOpenAI


@pytest.fixture(scope="session")
def _openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_openai(_openai_server: FakeOpenAI) -> FakeOpenAI:
    """The shared local OpenAI-compatible server, with no replies queued."""
    _openai_server.reset()
    return _openai_server
