"""The playground page is served with the configured prefix and a script Node can parse."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest


async def test_playground_is_served_for_the_configured_prefix(serve: Any, tmp_path: Path) -> None:
    server = serve(prefix="/bridge")
    async with httpx.AsyncClient(base_url=server.url) as client:
        root = await client.get("/")
        page = await client.get("/playground")
    assert root.status_code == 307 and root.headers["location"] == "/playground"
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'const PREFIX = document.documentElement.dataset.prefix || "/bridge";' in page.text
    assert "__PREFIX__" not in page.text
    script = re.search(r"<script>(.*)</script>", page.text, re.S)
    assert script is not None
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed: the playground script's syntax was not checked"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " (CI=true makes this a failure)")
        pytest.skip(reason)
    source = tmp_path / "playground.mjs"
    source.write_text(script.group(1))
    checked = subprocess.run([node, "--check", str(source)], capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stderr.decode()


async def test_playground_can_be_turned_off(serve: Any) -> None:
    server = serve(playground=False)
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/playground")).status_code == 404
