"""A real Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright for Python.

The browser is the system one (never ``playwright install``). Without it the browser tests
skip locally and fail under ``CI=true``. Screenshots go to ``tests/web/artifacts/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("IOBRIDGE_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium for one test.

    Per test, not per session: Playwright's sync API runs an event loop in the main thread
    while it is open, which would stop pytest-asyncio from running the async tests after it.
    """
    if not CHROMIUM.is_file():
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page; requests leaving the loopback are refused.

    Uncaught script errors and Content-Security-Policy violations are collected on
    ``page.errors``.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.route("**/*", _loopback_only)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: page.errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.set_default_timeout(15_000)
    yield page
    context.close()


def _loopback_only(route: Any) -> None:
    url: str = route.request.url
    if url.startswith(("http://127.0.0.1:", "data:", "blob:")):
        route.continue_()
    else:
        route.abort("internetdisconnected")


@pytest.fixture
def screenshot(page: Any, request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """``screenshot(step)`` saves the page as ``artifacts/<test>-<step>.png``, printing the path."""

    def take(step: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{request.node.name}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    return take
