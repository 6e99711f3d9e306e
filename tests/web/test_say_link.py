"""``/playground?say=...`` fills in the message box and never sends by itself.

A page of another site (``localhost`` against the server's ``127.0.0.1``: another origin
and another site) links to, opens or frames the playground with ``?say=``: no run is
started and nothing is stored until the user presses Send, with or without a stored key.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.sync_api import expect
from tests.helpers import LiveServer

from iobridge.auth import hash_api_key

SAY = "get_weather city=Paris"
KEY = "say-test-key"


@pytest.fixture
def other_site() -> Any:
    """A server on ``localhost`` whose page is given (as HTML) per test."""
    pages: dict[str, str] = {}
    app = FastAPI()

    @app.get("/{name}")
    async def page(name: str) -> HTMLResponse:
        return HTMLResponse(pages.get(name, ""))

    with LiveServer(app) as server:
        server.url = server.url.replace("127.0.0.1", "localhost")
        server.pages = pages
        yield server


def _watch_runs(page: Any) -> list[str]:
    """The URL of every run request any page of the context makes, as it is made."""
    runs: list[str] = []

    def seen(request: Any) -> None:
        if request.method == "POST" and request.url.endswith("/run"):
            runs.append(request.url)

    page.context.on("request", seen)
    return runs


@pytest.mark.parametrize("auth", ["none", "api-key"])
def test_a_link_from_another_site_sends_nothing(
    serve: Any, new_page: Any, other_site: Any, auth: str
) -> None:
    settings: dict[str, Any] = {}
    if auth == "api-key":
        settings["auth"] = {"mode": "api-key",
                            "api_keys": [{"sha256": hash_api_key(KEY), "principal": "ann"}]}
    server = serve(**settings)
    target = f"{server.url}/playground?say={quote(SAY)}"
    other_site.pages["link"] = f'<a id="go" href="{html.escape(target)}">go</a>'
    other_site.pages["open"] = f"<script>window.open({json.dumps(target)})</script>"
    other_site.pages["frame"] = f'<iframe id="f" src="{html.escape(target)}"></iframe>'
    headers = {"X-API-Key": KEY} if auth == "api-key" else {}

    page = new_page()
    runs = _watch_runs(page)
    if auth == "api-key":  # the tab already holds the key, as after a real session
        page.goto(f"{server.url}/playground")
        page.evaluate(f"sessionStorage.setItem('iobridge.auth.key', {json.dumps(KEY)})")
    page.goto(f"{other_site.url}/link")
    page.locator("#go").click()
    page.wait_for_url(f"{server.url}/playground**")
    expect(page.locator("#send")).to_be_enabled()  # connected, history loaded, idle
    expect(page.locator("#text")).to_have_value(SAY)
    expect(page.locator(".msg.notice")).to_have_text(
        "The link filled in the message box: press Send to run it."
    )

    with page.context.expect_page() as opened:
        page.goto(f"{other_site.url}/open")
    popup = opened.value
    expect(popup.locator("#send")).to_be_enabled()
    expect(popup.locator("#text")).to_have_value(SAY)
    assert popup.evaluate("window.opener") is None  # Cross-Origin-Opener-Policy

    page.goto(f"{other_site.url}/frame")  # waits for the frame's load too
    assert page.frame_locator("#f").locator("#text").count() == 0  # frame-ancestors 'self'

    assert runs == []
    threads = httpx.get(f"{server.url}/io-bridge/threads", headers=headers).json()["threads"]
    assert threads == []

    # The user's click is what sends it.
    popup.locator("#send").click()
    expect(popup.locator(".tool-card pre.result")).to_contain_text('"city": "Paris"')
    assert len(runs) == 1
    threads = httpx.get(f"{server.url}/io-bridge/threads", headers=headers).json()["threads"]
    assert len(threads) == 1
