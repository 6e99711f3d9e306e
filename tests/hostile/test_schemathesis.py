"""Generated requests from the app's own OpenAPI document, on both stores and with auth on:
no 5xx, ever, and every answer is documented (with auth on: with the key, and without it, so
the 401s are checked too) (its status, its content type and, for JSON,
its schema).

Bounded (``EXAMPLES`` per operation and server, a few seconds each) so it runs in every CI
build.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer

from iobridge.app import Backend
from iobridge.auth import ApiKeyEntry, AuthSettings
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store.sqlalchemy_store import SqlThreadStore, make_engine

EXAMPLES = 25
#: Frontend tool calls in generated runs give up quickly instead of holding the stream.
FUZZ = {"tool_timeout": 0.5, "playground": False}
API_KEY = "fuzz-key"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

schema = schemathesis.openapi.from_dict(create_app(Backend(Settings(database_url="memory://"))).openapi())


def _api_key_auth() -> AuthSettings:
    digest = hashlib.sha256(API_KEY.encode()).hexdigest()
    return AuthSettings(mode="api-key", api_keys=[ApiKeyEntry(sha256=digest, principal="fuzz")])


SERVERS = ["sqlite", "postgres", "sqlite-api-key", "sqlite-api-key-anonymous"]


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, dict[str, str]]]:
    """A real server on loopback over a real store, shared by one server's examples, and the
    credentials its requests carry."""
    headers = {"content-type": "application/json"}
    if request.param.startswith("sqlite"):
        folder: Path = tmp_path_factory.mktemp("fuzz")
        options: dict[str, Any] = dict(FUZZ)
        if request.param.startswith("sqlite-api-key"):
            options["auth"] = _api_key_auth()
        if request.param == "sqlite-api-key":
            headers["x-api-key"] = API_KEY
        app = create_app(
            Backend(Settings(database_url=f"sqlite+aiosqlite:///{folder}/db", **options)))
    else:
        schema_name = asyncio.run(shared_pg_schema())
        engine = make_engine(
            postgres_url(), connect_args={"server_settings": {"search_path": schema_name}}
        )
        # The engine connects lazily, inside the server's own loop.
        app = create_app(
            Backend(Settings(database_url="memory://", **FUZZ), store=SqlThreadStore(engine)))
    with LiveServer(app) as live:
        yield live.url, headers


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
def test_generated_requests_get_documented_answers(
    case: Any, server: tuple[str, dict[str, str]]
) -> None:
    base_url, headers = server
    # Routes that read their body by hand (tool results) or take none (cancel) still pass
    # the cross-site guard: the JSON content type is always declared.
    response = case.call(base_url=base_url, timeout=15, headers=headers)
    assert no_stack_trace(response.text), response.text[:500]
    case.validate_response(response, checks=CHECKS)


def test_the_document_lists_no_422_and_the_envelope_on_every_error() -> None:
    document = create_app(Backend(Settings(database_url="memory://"))).openapi()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
            for status, answer in operation["responses"].items():
                if int(status) >= 400:
                    content = answer["content"]["application/json"]["schema"]
                    assert content == {"$ref": "#/components/schemas/ErrorEnvelope"}, status
