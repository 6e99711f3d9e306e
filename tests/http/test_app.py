"""What ``create_app`` adds around the routes, over loopback HTTP: CORS and the 500 handler."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import MemoryThreadStore

APP_ORIGIN = "https://app.example"
PREFLIGHT = {
    "Origin": APP_ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,authorization",
}


async def test_cors_preflight_and_simple_requests_with_cors_origins(serve: Any) -> None:
    server = serve(cors_origins=[APP_ORIGIN])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        preflight = await client.options("/io-bridge/run", headers=PREFLIGHT)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == APP_ORIGIN
        methods = preflight.headers["access-control-allow-methods"]
        assert {m.strip() for m in methods.split(",")} == {
            "GET", "POST", "PATCH", "DELETE", "OPTIONS"}
        for method in ("GET", "PATCH", "DELETE"):  # what the thread routes take
            other_method = await client.options("/io-bridge/threads/t", headers={
                **PREFLIGHT, "Access-Control-Request-Method": method})
            assert other_method.status_code == 200, method
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert "content-type" in allowed and "authorization" in allowed

        simple = await client.get("/io-bridge/agents", headers={"Origin": APP_ORIGIN})
        assert simple.status_code == 200
        assert simple.headers["access-control-allow-origin"] == APP_ORIGIN

        streamed = await client.post("/io-bridge/run", json=run_body("hi"),
                                     headers={"Origin": APP_ORIGIN})
        assert streamed.headers["access-control-allow-origin"] == APP_ORIGIN
        assert parse_sse(streamed.text)[-1]["type"] == "RUN_FINISHED"

        # Another origin gets no CORS grant (the browser then blocks the response).
        other = {**PREFLIGHT, "Origin": "https://evil.example"}
        refused = await client.options("/io-bridge/run", headers=other)
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        foreign = await client.get("/io-bridge/agents", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in foreign.headers


async def test_no_cors_headers_without_cors_origins(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        preflight = await client.options("/io-bridge/run", headers=PREFLIGHT)
        assert preflight.status_code == 405
        assert preflight.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        simple = await client.get("/io-bridge/agents", headers={"Origin": APP_ORIGIN})
        assert simple.status_code == 200
    for response in (preflight, simple):
        assert not [h for h in response.headers if h.startswith("access-control-")]


class BrokenStore(MemoryThreadStore):
    """A store whose listing fails with an error a response must never show."""

    async def list_threads(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection to postgres://admin:hunter2@db failed")


async def test_an_unexpected_error_is_a_generic_500_envelope(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(Backend(Settings(), store=BrokenStore()))
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            response = await client.get("/io-bridge/threads")
        # The server keeps serving (uvicorn closes the connection the error happened on).
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            assert (await client.get("/io-bridge/agents")).status_code == 200
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {"code": "INTERNAL_ERROR", "message": "internal server error"}
    }
    for leak in ("hunter2", "postgres://", "Traceback", "RuntimeError", "list_threads"):
        assert leak not in response.text
    # The operator still gets the details in the log.
    assert any("hunter2" in r.getMessage() or (r.exc_info and "hunter2" in str(r.exc_info[1]))
               for r in caplog.records)


ALICE = "alice-key-0123456789"


def _run_settings(database: str) -> Settings:
    from iobridge.auth import ApiKeyEntry, AuthSettings, hash_api_key

    auth = AuthSettings(mode="api-key", api_keys=[
        ApiKeyEntry(sha256=hash_api_key(ALICE), principal="alice", resource_ids=["alice"]),
    ])
    return Settings(database_url=database, auth=auth, max_body_bytes=2048,
                    max_active_runs_per_principal=1)


async def _run_answers(url: str) -> list[tuple[int, Any, str | None, str | None]]:
    """Status, body, WWW-Authenticate and Retry-After of a set of run requests."""
    key = {"Authorization": f"Bearer {ALICE}"}
    requests: list[tuple[dict[str, str], bytes]] = [
        ({}, b'{"threadId": "t"}'),  # no credentials
        (key, b"{not json"),
        (key, b'{"threadId": "t", "runId": "r", "messages": [], "x": "' + b"y" * 4000 + b'"}'),
        (key, b'{"threadId": "t", "runId": "r", "messages": "nope"}'),
        (key, httpx.Request("POST", "/", json=run_body(
            "hi", agentId="no-such-agent")).content),
    ]
    answers = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        for headers, body in requests:
            response = await client.post("/io-bridge/run", content=body, headers={
                **headers, "Content-Type": "application/json"})
            answers.append((response.status_code, response.json(),
                            response.headers.get("www-authenticate"),
                            response.headers.get("retry-after")))
        finished = await client.post("/io-bridge/run", headers=key, json=run_body(
            "what is 2 + 2", thread_id="t-ok", run_id="r-ok"))
        answers.append((finished.status_code, parse_sse(finished.text)[-1]["type"], None, None))
        # A second live run of the same principal: 429 with Retry-After.
        weather = {"name": "get_weather", "description": "Weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}
        body = run_body("get_weather", thread_id="t-pending", run_id="r-pending",
                        tools=[weather])
        async with client.stream("POST", "/io-bridge/run", json=body, headers=key) as first:
            assert first.status_code == 200
            async for line in first.aiter_lines():  # the demo agent now waits on the tool
                if line.startswith("data: ") and '"TOOL_CALL_END"' in line:
                    break
            second = await client.post("/io-bridge/run", headers=key, json=run_body(
                "hi", thread_id="t-other", run_id="r-other"))
            answers.append((second.status_code, second.json(),
                            second.headers.get("www-authenticate"),
                            second.headers.get("retry-after")))
    return answers


async def test_the_run_route_below_the_router_answers_like_the_mounted_route(
    tmp_path: Any,
) -> None:
    """``create_app`` serves ``POST /run`` from :class:`RunRoute`, ``mount`` through the
    FastAPI route: every answer, error or stream, is the same."""
    from fastapi import FastAPI

    from iobridge.http.app import mount

    below_app = create_app(Backend(_run_settings(f"sqlite+aiosqlite:///{tmp_path}/a.db")))
    with LiveServer(below_app) as server:
        below = await _run_answers(server.url)
    mounted_app = FastAPI()
    mount(mounted_app, Backend(_run_settings(f"sqlite+aiosqlite:///{tmp_path}/b.db")))
    with LiveServer(mounted_app) as server:
        routed = await _run_answers(server.url)
    assert below == routed
    codes = [answer[1]["error"]["code"] if isinstance(answer[1], dict) else answer[1]
             for answer in below]
    assert codes == ["UNAUTHORIZED", "INVALID_JSON", "PAYLOAD_TOO_LARGE", "INVALID_REQUEST",
                     "AGENT_NOT_FOUND", "RUN_FINISHED", "TOO_MANY_RUNS"]
    assert below[0][2] == "Bearer" and below[6][3] is not None
