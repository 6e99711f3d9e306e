"""Fixtures of the frontend tests: the bundled apps on a static server, a headless
Chromium (Debian's ``/usr/bin/chromium`` driven by Playwright) whose requests may only
reach loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.frontends.harness import CHROMIUM, bundle, require, static_server

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(scope="session")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The origin serving ``/assistant-ui/`` and ``/copilotkit/`` (bundled once)."""
    out = bundle(tmp_path_factory.mktemp("frontends"))
    with static_server(out) as origin:
        yield origin


@pytest.fixture
def browser() -> Iterator[Any]:
    """Per test: Playwright's sync API holds an event loop on the main thread while open."""
    require(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)",
            CHROMIUM.is_file())
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh context and page; requests leaving loopback are refused; uncaught errors
    are collected on ``page.errors``. A failing test leaves a screenshot in artifacts/."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.route("**/*", _loopback_only)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.set_default_timeout(15_000)
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _loopback_only(route: Any) -> None:
    if route.request.url.startswith(("http://127.0.0.1:", "data:", "blob:")):
        route.continue_()
    else:
        route.abort("internetdisconnected")
