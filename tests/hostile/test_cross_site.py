"""Cross-site safety on a real server: JSON-only bodies, the Host check, CORS off by default.

A web page can send "simple" cross-site requests (``text/plain``, form posts, no preflight)
to a developer's local server, and with DNS rebinding read the answers under its own host
name. Both must be refused before anything runs or is stored.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from pydantic import ValidationError
from tests.helpers import run_body

from iobridge.config import Settings
from iobridge.http.guards import host_allowed

EVIL = "http://evil.example"
#: What a browser's ``fetch(url, {method: "POST", mode: "no-cors", body: text})`` sends.
SIMPLE = {"origin": EVIL, "content-type": "text/plain;charset=UTF-8"}


@pytest.mark.parametrize(
    "content_type",
    ["text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data",
     None, "application/jsonx", "text/json"],
)
async def test_a_cross_site_simple_post_is_refused_and_nothing_runs_or_is_stored(
    serve: Any, content_type: str | None
) -> None:
    server = serve()
    headers = {"origin": EVIL} | ({"content-type": content_type} if content_type else {})
    async with httpx.AsyncClient(base_url=server.url) as client:
        run = await client.post(
            "/io-bridge/run", content=orjson.dumps(run_body("hi")), headers=headers
        )
        thread = await client.post(
            "/io-bridge/threads", content=b'{"id": "planted"}', headers=headers
        )
        for response in (run, thread):
            assert response.status_code == 415
            assert response.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
            assert "access-control-allow-origin" not in response.headers
        assert (await client.get("/io-bridge/threads/planted")).status_code == 404
        assert (await client.get("/io-bridge/threads/t1")).status_code == 404
    assert server.runtime.active_runs == 0
    with pytest.raises(Exception, match="unknown run"):
        server.run("r1")


async def test_patch_and_bodyless_posts_need_json_too(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        created = await client.post("/io-bridge/threads", json={"id": "t", "title": "mine"})
        assert created.status_code == 201
        patched = await client.patch(
            "/io-bridge/threads/t", content=b'{"title": "pwned"}', headers=SIMPLE
        )
        assert patched.status_code == 415
        assert (await client.get("/io-bridge/threads/t")).json()["title"] == "mine"
        # A browser can POST with no body and no Content-Type; a bodyless route refuses it.
        bare = await client.post("/io-bridge/runs/r1/cancel")
        assert bare.status_code == 415
        # The same with the JSON content type reaches the route (and its 404).
        declared = await client.post(
            "/io-bridge/runs/r1/cancel", headers={"content-type": "application/json"}
        )
        assert declared.status_code == 404
        # Parameters after the media type are fine; so is upper case.
        empty = await client.post(
            "/io-bridge/threads", headers={"content-type": "Application/JSON; charset=utf-8"}
        )
        assert empty.status_code == 201


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example",
                                  "localhost.", "[::2]:80", ""])
async def test_a_foreign_host_header_is_refused(serve: Any, host: str) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        for method, path, body in (
            ("GET", "/io-bridge/threads", None),
            ("GET", "/io-bridge/agents", None),
            ("GET", "/playground", None),
            ("POST", "/io-bridge/threads", {"id": "rebound"}),
            ("POST", "/io-bridge/run", run_body("hi")),
        ):
            response = await client.request(method, path, json=body, headers={"host": host})
            assert response.status_code == 400, (method, path)
            assert response.json()["error"]["code"] == "HOST_NOT_ALLOWED"
        assert (await client.get("/io-bridge/threads/rebound")).status_code == 404
    assert server.runtime.active_runs == 0


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
async def test_loopback_names_are_served_by_default(serve: Any, host: str) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get(
            "/io-bridge/agents", headers={"host": f"{host}:{server.port}"}
        )
        assert response.status_code == 200
        page = await client.get("/playground", headers={"host": host})
        assert page.status_code == 200


async def test_configured_hosts_replace_the_loopback_names(serve: Any) -> None:
    server = serve(allowed_hosts=["bridge.example", "*.agents.example"])
    async with httpx.AsyncClient(base_url=server.url) as client:
        for host, status in (("bridge.example", 200), ("eu.agents.example:443", 200),
                             ("agents.example", 400), ("127.0.0.1", 400)):
            response = await client.get("/io-bridge/agents", headers={"host": host})
            assert response.status_code == status, host


def test_allowed_hosts_is_required_off_loopback() -> None:
    with pytest.raises(ValidationError, match="allowed_hosts is required"):
        Settings(host="0.0.0.0")
    assert Settings(host="0.0.0.0", allowed_hosts=["*"]).trusted_hosts == ["*"]
    assert Settings(host="::1").trusted_hosts == ["localhost", "127.0.0.1", "::1"]
    assert Settings(host="localhost").allowed_hosts is None


def test_host_patterns() -> None:
    assert host_allowed("LocalHost:8000", ["localhost"])
    assert host_allowed("[::1]:8000", ["::1"])
    assert host_allowed("a.b.example", ["*.example"])
    assert not host_allowed("example", ["*.example"])
    assert not host_allowed(None, ["*"])
    assert host_allowed("anything", ["*"])


async def test_cors_is_off_by_default_and_on_for_configured_origins(serve: Any) -> None:
    preflight = {"origin": EVIL, "access-control-request-method": "POST",
                 "access-control-request-headers": "content-type"}
    closed = serve()
    opened = serve(cors_origins=["http://app.example"])
    async with httpx.AsyncClient() as client:
        refused = await client.options(f"{closed.url}/io-bridge/run", headers=preflight)
        assert "access-control-allow-origin" not in refused.headers
        allowed = await client.options(
            f"{opened.url}/io-bridge/run", headers=preflight | {"origin": "http://app.example"}
        )
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "http://app.example"
        # The allowed origin's real request carries JSON and is served.
        served = await client.get(
            f"{opened.url}/io-bridge/agents", headers={"origin": "http://app.example"}
        )
        assert served.headers["access-control-allow-origin"] == "http://app.example"
