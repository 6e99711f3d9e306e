"""The playground in real headless Chromium, behind the cross-site guards: it loads the
agents, runs a message, answers the frontend tool from the page, and the thread is stored.

Driven over the DevTools protocol (a WebSocket), so no browser-automation package is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WAIT = 20.0


def _require_chromium() -> str:
    if CHROMIUM is not None:
        return CHROMIUM
    reason = "PLAYGROUND BROWSER TEST NOT RUN: chromium is not installed"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class Page:
    """One tab: ``evaluate`` runs JavaScript and returns its JSON value."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def evaluate(self, expression: str) -> Any:
        call_id = next(self.ids)
        await self.ws.send(json.dumps({"id": call_id, "method": "Runtime.evaluate", "params": {
            "expression": expression, "returnByValue": True, "awaitPromise": True}}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == call_id:
                return reply["result"]["result"].get("value")

    async def until(self, expression: str) -> Any:
        async with asyncio.timeout(WAIT):
            while not (value := await self.evaluate(expression)):
                await asyncio.sleep(0.1)
        return value


@contextlib.asynccontextmanager
async def browser_page(url: str, profile: Path) -> AsyncIterator[Page]:
    process = subprocess.Popen(
        [_require_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
         "--no-first-run", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(WAIT):
            while "DevTools listening on" not in (line := await asyncio.to_thread(
                    process.stderr.readline)):
                assert line, "chromium exited before opening DevTools"
        port = line.strip().split("ws://127.0.0.1:")[1].split("/")[0]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as devtools:
            target = (await devtools.put(f"/json/new?{url}")).json()
        async with connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            yield Page(ws)
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_the_playground_runs_a_frontend_tool_in_a_real_browser(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    async with browser_page(f"{server.url}/playground", tmp_path / "profile") as page:
        agents = await page.until("document.getElementById('agent').options.length")
        assert agents >= 1
        await page.evaluate(
            "document.getElementById('text').value = 'get_weather for Paris';"
            "document.getElementById('form').requestSubmit(); true"
        )
        await page.until(
            "document.getElementById('events').textContent.includes('RUN_FINISHED')"
        )
        log = await page.evaluate("document.getElementById('events').textContent")
    events = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert "RUN_ERROR" not in log
    assert any(e["type"] == "TOOL_CALL_END" for e in events)
    thread_id = events[0]["threadId"]
    async with httpx.AsyncClient(base_url=server.url) as client:
        stored = (await client.get(f"/io-bridge/threads/{thread_id}/messages")).json()
    tool_results = [m for m in stored["messages"] if m["role"] == "tool"]
    assert tool_results, stored
    assert json.loads(tool_results[0]["content"])["sky"] == "clear"  # the page's answer
