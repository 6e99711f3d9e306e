"""``GET /metrics`` as a scraper meets it: the format it asks for (or none), and the refusal
of a wrong token (what the scraper is told, what the operator's log says)."""

from __future__ import annotations

import logging

import httpx
import pytest
from tests.helpers import LiveServer

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app


async def test_openmetrics_by_accept_and_text_without_any_accept() -> None:
    with LiveServer(create_app(Backend(Settings(database_url="memory://")))) as live:
        async with httpx.AsyncClient(base_url=live.url) as client:
            om = await client.get("/metrics", headers={
                "accept": "application/openmetrics-text; version=1.0.0"})
            assert om.status_code == 200
            assert om.headers["content-type"].startswith("application/openmetrics-text")
            assert om.text.endswith("# EOF\n")
            del client.headers["accept"]
            plain = await client.get("/metrics")
            assert "accept" not in plain.request.headers
            assert plain.status_code == 200
            assert plain.headers["content-type"].startswith("text/plain")
            assert "# EOF" not in plain.text and "iobridge_" in plain.text


async def test_a_wrong_token_is_told_little_and_logged_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEST_METRICS_TOKEN", "s3cret-scrape")
    settings = Settings(database_url="memory://", metrics={"token_env": "TEST_METRICS_TOKEN"})
    with caplog.at_level(logging.INFO, logger="iobridge.http"), \
            LiveServer(create_app(Backend(settings))) as live:
        refused = httpx.get(f"{live.url}/metrics", headers={"authorization": "Bearer nope"})
    assert refused.status_code == 401
    assert refused.json() == {"error": {"code": "UNAUTHORIZED",
                                        "message": "missing or invalid credentials"}}
    assert "authentication refused: wrong or missing metrics token" in [
        r.getMessage() for r in caplog.records if r.name == "iobridge.http"]
