"""Shared fixtures (the helpers they use are in ``tests/helpers.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.helpers import LiveServer

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app


@pytest.fixture
def serve(tmp_path: Any) -> Iterator[Callable[..., LiveServer]]:
    """Start servers for a test: ``serve(agents=[...], **settings)``."""
    started: list[LiveServer] = []

    def start(*, agents: list[Any] | None = None, **overrides: Any) -> LiveServer:
        overrides.setdefault("database_url", f"sqlite+aiosqlite:///{tmp_path}/iobridge.db")
        settings = Settings(**overrides)
        server = LiveServer(create_app(Backend(settings, agents=agents or [])))
        started.append(server.__enter__())
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)
