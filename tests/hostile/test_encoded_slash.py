"""An id holding ``/`` (``%2F``) never reaches another route: 404, which every route with a
path parameter documents, instead of a 405 or redirect from the route it would split into."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from tests.helpers import run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

DOCUMENT = create_app(Backend(Settings(database_url="memory://"))).openapi()

PROBES = [
    ("DELETE", "/io-bridge/threads/x%2Fmessages", "/io-bridge/threads/{threadId}"),
    ("PATCH", "/io-bridge/threads/x%2fmessages", "/io-bridge/threads/{threadId}"),
    ("GET", "/io-bridge/agents/%2F", "/io-bridge/agents/{agentId}"),
    ("POST", "/io-bridge/runs/a%2Fb/cancel", "/io-bridge/runs/{run_id}/cancel"),
    ("GET", "/io-bridge/runs/r1%2Fevents/events", "/io-bridge/runs/{run_id}/events"),
]


@pytest.mark.parametrize(("method", "url", "path"), PROBES)
def test_an_encoded_slash_is_a_documented_404(
    serve: Any, method: str, url: str, path: str
) -> None:
    server = serve()
    httpx.post(f"{server.url}/io-bridge/threads", json={"id": "x"}).raise_for_status()
    answer = httpx.request(method, server.url + url, headers={"content-type": "application/json"},
                           content=b'{"title": "changed"}')
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "NOT_FOUND"
    assert "404" in DOCUMENT["paths"][path][method.lower()]["responses"]
    thread = httpx.get(f"{server.url}/io-bridge/threads/x").json()
    assert thread["title"] == ""


def test_a_run_cannot_be_reached_through_an_encoded_slash(serve: Any) -> None:
    server = serve()
    answer = httpx.post(f"{server.url}/io-bridge/run", json=run_body("hi", run_id="r1"))
    assert answer.status_code == 200
    resumed = httpx.get(f"{server.url}/io-bridge/runs/r1%2F/events")
    assert resumed.status_code == 404
    assert httpx.get(f"{server.url}/io-bridge/runs/r1/events").status_code == 200
