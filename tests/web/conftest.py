"""A real Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright for Python.

The browser is the system one (never ``playwright install``). Without it the browser tests
skip locally and fail under ``CI=true``. Screenshots go to ``tests/web/artifacts/``.
``axe-core`` (pinned in ``tests/web/package.json``, installed by ``make e2e-deps``) is
injected into pages for the accessibility checks.
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
AXE = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"


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
    yield _watched(context)
    context.close()


@pytest.fixture
def new_page(browser: Any) -> Iterator[Callable[..., Any]]:
    """``new_page(width=, height=, color_scheme=)``: a page in a context of its own, like
    ``page`` (loopback only, errors on ``page.errors``)."""
    contexts: list[Any] = []

    def make(*, width: int = 1400, height: int = 900, color_scheme: str = "light") -> Any:
        context = browser.new_context(
            viewport={"width": width, "height": height}, color_scheme=color_scheme
        )
        contexts.append(context)
        return _watched(context)

    yield make
    for context in contexts:
        context.close()


def _watched(context: Any) -> Any:
    context.route("**/*", _loopback_only)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: page.errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    page.set_default_timeout(15_000)
    return page


@pytest.fixture
def axe() -> Callable[[Any], list[dict[str, Any]]]:
    """``axe(page)``: the serious and critical axe-core violations of the page as it is now."""
    return _axe_violations


def _axe_violations(page: Any) -> list[dict[str, Any]]:
    # axe runs inside the page; ``evaluate`` is not subject to the page's CSP.
    if not AXE.is_file():
        message = f"axe-core is not installed at {AXE} (make e2e-deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
            }));
        }"""
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


def _loopback_only(route: Any) -> None:
    url: str = route.request.url
    if url.startswith(("http://127.0.0.1:", "http://localhost:", "data:", "blob:")):
        route.continue_()
    else:
        route.abort("internetdisconnected")


def save_screenshot(page: Any, name: str) -> Path:
    """Save the whole page as ``artifacts/<name>.png`` and print the path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


@pytest.fixture
def shoot() -> Callable[[Any, str], Path]:
    """``shoot(page, name)``: ``save_screenshot`` for pages made with ``new_page``."""
    return save_screenshot


@pytest.fixture
def screenshot(page: Any, request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """``screenshot(step)`` saves the page as ``artifacts/<test>-<step>.png``, printing the path."""

    def take(step: str) -> Path:
        return save_screenshot(page, f"{request.node.name}-{step}")

    return take
