"""Fixtures for store tests: every contract test runs on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest_pg import BACKENDS, StepClock, open_backend  # noqa: E402

from iobridge.store import ThreadStore  # noqa: E402


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture(params=BACKENDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: StepClock
) -> AsyncIterator[ThreadStore]:
    async with open_backend(request.param, tmp_path, clock) as opened:
        yield opened
