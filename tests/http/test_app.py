"""What ``create_app`` adds around the routes, over loopback HTTP: CORS and the 500 handler."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import MemoryThreadStore

APP_ORIGIN = "https://app.example"
PREFLIGHT = {
    "Origin": APP_ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,authorization",
}


async def test_cors_preflight_and_simple_requests_with_cors_origins(serve: Any) -> None:
    server = serve(cors_origins=[APP_ORIGIN])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        preflight = await client.options("/io-bridge/run", headers=PREFLIGHT)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert "content-type" in allowed and "authorization" in allowed

        simple = await client.get("/io-bridge/agents", headers={"Origin": APP_ORIGIN})
        assert simple.status_code == 200
        assert simple.headers["access-control-allow-origin"] == APP_ORIGIN

        streamed = await client.post("/io-bridge/run", json=run_body("hi"),
                                     headers={"Origin": APP_ORIGIN})
        assert streamed.headers["access-control-allow-origin"] == APP_ORIGIN
        assert parse_sse(streamed.text)[-1]["type"] == "RUN_FINISHED"

        # Another origin gets no CORS grant (the browser then blocks the response).
        other = {**PREFLIGHT, "Origin": "https://evil.example"}
        refused = await client.options("/io-bridge/run", headers=other)
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        foreign = await client.get("/io-bridge/agents", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in foreign.headers


async def test_no_cors_headers_without_cors_origins(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        preflight = await client.options("/io-bridge/run", headers=PREFLIGHT)
        assert preflight.status_code == 405
        assert preflight.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        simple = await client.get("/io-bridge/agents", headers={"Origin": APP_ORIGIN})
        assert simple.status_code == 200
    for response in (preflight, simple):
        assert not [h for h in response.headers if h.startswith("access-control-")]


class BrokenStore(MemoryThreadStore):
    """A store whose listing fails with an error a response must never show."""

    async def list_threads(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection to postgres://admin:hunter2@db failed")


async def test_an_unexpected_error_is_a_generic_500_envelope(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(Settings(), store=BrokenStore())
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            response = await client.get("/io-bridge/threads")
        # The server keeps serving (uvicorn closes the connection the error happened on).
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            assert (await client.get("/io-bridge/agents")).status_code == 200
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {"code": "INTERNAL_ERROR", "message": "internal server error"}
    }
    for leak in ("hunter2", "postgres://", "Traceback", "RuntimeError", "list_threads"):
        assert leak not in response.text
    # The operator still gets the details in the log.
    assert any("hunter2" in r.getMessage() or (r.exc_info and "hunter2" in str(r.exc_info[1]))
               for r in caplog.records)
