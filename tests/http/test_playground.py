"""The playground's files: served for the configured prefix, bundled, parseable by Node."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest

from iobridge.auth import hash_api_key
from iobridge.web import ASSETS


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed")
        pytest.skip("node is not installed")
    return node


async def test_playground_is_served_for_the_configured_prefix(serve: Any) -> None:
    server = serve(prefix="/bridge", max_media_part_bytes=1000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        root = await client.get("/")
        page = await client.get("/playground")
        config = await client.get("/playground/config.json")
        assets = {name: await client.get(f"/playground/{name}") for name in ASSETS}
        unknown = await client.get("/playground/playground.html")
        traversal = await client.get("/playground/..%2Fdocs.py")
        favicon = await client.get("/favicon.ico")
    assert root.status_code == 307 and root.headers["location"] == "/playground"
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "connect-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<html lang="en" data-prefix="/bridge">' in page.text
    assert "__PREFIX__" not in page.text
    assert not re.search(r"(src|href)=\"https?:", page.text)
    referenced = re.findall(r"(?:src|href)=\"/playground/([^\"]+)\"", page.text)
    # The page names its entry points; the modules it imports come from playground.js.
    assert sorted(referenced) == sorted(
        set(ASSETS) - {"markdown.js", "inspector.js", "attachments.js"}
    )
    assert page.headers["cross-origin-opener-policy"] == "same-origin"
    assert config.json() == {
        "prefix": "/bridge", "defaultAgent": "demo",
        # What the page checks attachments against before sending them.
        "limits": {"maxBodyBytes": 4 * 1024 * 1024, "maxMediaPartBytes": 1000,
                   "maxMediaMessageBytes": 3 * 1024 * 1024},
    }
    for name, response in assets.items():
        assert response.status_code == 200, name
        assert response.headers["content-type"] == ASSETS[name], name
        assert response.content == files("iobridge.web").joinpath(name).read_bytes()
    assert unknown.status_code == 404 and traversal.status_code == 404
    assert favicon.headers["content-type"] == "image/svg+xml"


async def test_config_names_the_default_agent_and_authenticates(serve: Any) -> None:
    key = "k-playground"
    server = serve(
        default_agent="demo",
        auth={"mode": "api-key", "api_keys": [{"sha256": hash_api_key(key), "principal": "p"}]},
    )
    async with httpx.AsyncClient(base_url=server.url) as client:
        anonymous = await client.get("/playground/config.json")
        keyed = await client.get("/playground/config.json", headers={"X-API-Key": key})
        page = await client.get("/playground")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "UNAUTHORIZED"
    assert keyed.json()["defaultAgent"] == "demo"
    assert page.status_code == 200


def test_scripts_parse_as_modules(tmp_path: Path) -> None:
    node = _node()
    for name in ("playground.js", "markdown.js", "inspector.js", "attachments.js"):
        source = tmp_path / f"{name[:-3]}.mjs"
        source.write_text(files("iobridge.web").joinpath(name).read_text(encoding="utf-8"))
        checked = subprocess.run([node, "--check", str(source)], capture_output=True, timeout=30)
        assert checked.returncode == 0, checked.stderr.decode()


async def test_playground_can_be_turned_off(serve: Any) -> None:
    server = serve(playground=False)
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/playground")).status_code == 404
        assert (await client.get("/playground/playground.js")).status_code == 404
