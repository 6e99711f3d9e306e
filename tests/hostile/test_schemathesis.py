"""Generated requests from the app's own OpenAPI document, on both stores: no 5xx, ever.

Bounded (``EXAMPLES`` per operation and store, a few seconds each) so it runs in every CI
build. Status conformance is not checked here (the OpenAPI document is fixed separately):
only that nothing is a server error and that no body carries a stack trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer

from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store.sqlalchemy_store import SqlThreadStore, make_engine

EXAMPLES = 25
#: Frontend tool calls in generated runs give up quickly instead of holding the stream.
FUZZ = {"tool_timeout": 0.5, "playground": False}

schema = schemathesis.openapi.from_dict(create_app(Settings(database_url="memory://")).openapi())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[str]:
    """A real server on loopback over a real store, shared by one store's examples."""
    if request.param == "sqlite":
        folder: Path = tmp_path_factory.mktemp("fuzz")
        app = create_app(Settings(database_url=f"sqlite+aiosqlite:///{folder}/db", **FUZZ))
    else:
        schema_name = asyncio.run(shared_pg_schema())
        engine = make_engine(
            postgres_url(), connect_args={"server_settings": {"search_path": schema_name}}
        )
        # The engine connects lazily, inside the server's own loop.
        app = create_app(Settings(database_url="memory://", **FUZZ), store=SqlThreadStore(engine))
    with LiveServer(app) as server:
        yield server.url


def no_stack_trace(text: str) -> bool:
    return "Traceback" not in text and 'File "' not in text


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_generated_requests_never_get_a_server_error(case: Any, base_url: str) -> None:
    # Routes that read their body by hand (tool results) or take none (cancel) declare no
    # request body; the JSON content type lets their requests past the cross-site guard.
    response = case.call(
        base_url=base_url, timeout=15, headers={"content-type": "application/json"}
    )
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    assert no_stack_trace(response.text), response.text[:500]
