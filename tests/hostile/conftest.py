"""The real application on a real store (SQLite file, PostgreSQL), reached in-process.

Stores are opened in the test's event loop, so the app is driven through
``httpx.ASGITransport`` (with its lifespan) rather than a server thread with its own loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import SQL_BACKENDS, open_backend

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
        app = create_app(Settings(database_url="memory://"), store=store)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", timeout=30
            ) as client:
                yield Rig(client, store, app)
