"""Fixtures of the durable-run tests: the project's fake OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.agents.fake_openai import FakeOpenAI


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
