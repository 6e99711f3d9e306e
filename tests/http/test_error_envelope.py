"""The error envelope on routes an application adds to ``create_app``'s app: FastAPI's own
validation errors, Starlette's HTTP errors, our errors with their headers, and unexpected
ones (logged with the request, never shown)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, HTTPException

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.errors import AuthenticationError, ServiceUnavailable, TooManyRequests
from iobridge.http.app import create_app


def _app() -> FastAPI:
    app = create_app(Backend(Settings(database_url="memory://")))

    @app.get("/custom/count")
    async def count(n: int) -> dict[str, int]:
        return {"n": n}

    @app.get("/custom/teapot")
    async def teapot() -> None:
        raise HTTPException(418, detail={"not": "text"}, headers={"X-Brewing": "no"})

    @app.get("/custom/busy")
    async def busy(after: float) -> None:
        raise ServiceUnavailable("busy now", code="BUSY", retry_after=after)

    @app.get("/custom/crowded")
    async def crowded() -> None:
        raise TooManyRequests("too many", code="CROWDED", retry_after=2.5)

    @app.get("/custom/denied")
    async def denied() -> None:
        raise AuthenticationError("invalid credentials", reason="the key expired yesterday")

    @app.get("/custom/boom")
    async def boom() -> None:
        raise RuntimeError("secret detail")

    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = _app()
    async with app.router.lifespan_context(app):
        # The 500 is what the client gets; the error is not raised into the test as well.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as opened:
            yield opened


async def test_a_validation_error_names_each_bad_field(client: httpx.AsyncClient) -> None:
    response = await client.get("/custom/count", params={"n": "many"})
    assert response.status_code == 400
    assert response.json() == {"error": {
        "code": "INVALID_REQUEST", "message": "invalid request",
        "details": [{"loc": ["query", "n"], "message":
                     "Input should be a valid integer, unable to parse string as an integer"}],
    }}
    assert (await client.get("/custom/count", params={"n": "3"})).json() == {"n": 3}


async def test_http_errors_keep_their_status_text_and_headers(client: httpx.AsyncClient) -> None:
    response = await client.get("/custom/teapot")
    assert response.status_code == 418
    assert response.json() == {"error": {"code": "HTTP_ERROR", "message": "request failed"}}
    assert response.headers["x-brewing"] == "no"
    wrong = await client.delete("/custom/count")
    assert wrong.status_code == 405
    assert wrong.json() == {"error": {"code": "METHOD_NOT_ALLOWED",
                                      "message": "Method Not Allowed"}}
    assert wrong.headers["allow"] == "GET"


async def test_a_delay_becomes_retry_after_in_whole_seconds_at_least_one(
    client: httpx.AsyncClient,
) -> None:
    for after, header in ((0.2, "1"), (1.0, "1"), (1.2, "2"), (7.0, "7")):
        response = await client.get("/custom/busy", params={"after": after})
        assert response.status_code == 503
        assert response.headers["retry-after"] == header
        assert response.json() == {"error": {"code": "BUSY", "message": "busy now"}}
    crowded = await client.get("/custom/crowded")
    assert (crowded.status_code, crowded.headers["retry-after"]) == (429, "3")


async def test_a_refused_credential_is_logged_with_its_reason_and_not_shown(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="iobridge.http"):
        response = await client.get("/custom/denied")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "yesterday" not in response.text
    assert "authentication refused: the key expired yesterday" in [
        r.getMessage() for r in caplog.records if r.name == "iobridge.http"]


async def test_an_unexpected_error_is_logged_with_its_request(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="iobridge.http"):
        response = await client.get("/custom/boom")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "INTERNAL_ERROR",
                                         "message": "internal server error"}}
    [record] = [r for r in caplog.records if r.name == "iobridge.http"]
    assert record.getMessage() == "unhandled error on GET /custom/boom"
    assert record.exc_info is not None and "secret detail" in str(record.exc_info[1])
