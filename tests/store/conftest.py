"""Fixtures for store tests: every contract test runs on memory, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.backends import BACKENDS, StepClock, open_backend

from iobridge.store import ThreadStore


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture(params=BACKENDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: StepClock
) -> AsyncIterator[ThreadStore]:
    async with open_backend(request.param, tmp_path, clock) as opened:
        yield opened
