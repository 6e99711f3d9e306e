"""``/docs`` and ``/redoc`` work with no network: every asset comes from the server itself."""

from __future__ import annotations

import re
from typing import Any

import httpx


def _references(page: str) -> list[str]:
    """Every URL the page loads: src/href attributes and the OpenAPI url handed to the UI."""
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page)
    urls += re.findall(r"""\b(?:url|spec-url)\s*[:=]\s*["']([^"']+)["']""", page)
    return urls


def test_docs_pages_reference_only_assets_the_server_serves(serve: Any) -> None:
    server = serve()
    with httpx.Client(base_url=server.url) as client:
        for page_url in ("/docs", "/redoc"):
            page = client.get(page_url)
            assert page.status_code == 200, page_url
            assert not re.search(r"https?://", page.text), f"{page_url} names an external URL"
            references = _references(page.text)
            assert "/openapi.json" in references
            assert len(references) >= 3, references
            for url in references:
                assert url.startswith("/"), url
                asset = client.get(url)
                assert asset.status_code == 200, url
                assert asset.content, url
        oauth = client.get("/docs/oauth2-redirect")
    assert oauth.status_code == 200


def test_swagger_ui_renders_offline_in_chromium(serve: Any, page: Any, screenshot: Any) -> None:
    server = serve()
    page.goto(f"{server.url}/docs")
    page.locator(".swagger-ui .info .title").wait_for()
    assert "iobridge" in page.locator(".swagger-ui .info .title").inner_text()
    assert page.locator('.opblock-summary-path[data-path="/io-bridge/run"]').count() == 1
    screenshot("swagger")
    assert page.errors == []


def test_redoc_and_swagger_contact_no_other_host_in_chromium(serve: Any, page: Any) -> None:
    """Every request the pages make, images included, goes to the server itself (ReDoc's
    sidebar logo used to come from cdn.redoc.ly)."""
    server = serve()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{server.url}/redoc")
    page.get_by_text("API docs by Redocly").wait_for()
    page.wait_for_load_state("networkidle")
    assert [url for url in requested if "redoc.ly" in url] == []
    logo = page.locator('img[alt="redocly logo"]')
    assert logo.get_attribute("src") == "/docs-assets/favicon.png"
    page.goto(f"{server.url}/docs")
    page.locator(".swagger-ui .info .title").wait_for()
    page.wait_for_load_state("networkidle")
    assert requested, "no request was seen"
    elsewhere = [url for url in requested
                 if not url.startswith((server.url, "data:", "blob:"))]
    assert elsewhere == []
    assert page.errors == []
