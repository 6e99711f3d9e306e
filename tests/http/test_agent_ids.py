"""Agent ids as frontends use them, over loopback: aliases on every route, unavailable agents."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.agents.function import FunctionAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

BASE = "/io-bridge"


async def _reply(ctx: Any) -> str:
    return "IO Agent here."


IO_AGENT = FunctionAgent(_reply, id="io-agent", name="IO Agent", aliases=["ioAgent"],
                         model_id="openai:gpt-4o")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Any]:
    """``live(python=[...], **settings)``: settings may hold ``agents`` (``[[agents]]``)."""
    servers: list[LiveServer] = []

    def start(python: list[Any] | None = None, **values: Any) -> LiveServer:
        values.setdefault("database_url", f"sqlite+aiosqlite:///{tmp_path}/agents.db")
        server = LiveServer(create_app(Backend(Settings(**values), agents=python or [])))
        servers.append(server.__enter__())
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def test_aliases_resolve_on_every_route_that_takes_an_agent_id(live: Any) -> None:
    server = live(python=[IO_AGENT])
    with httpx.Client(base_url=server.url + BASE, timeout=10) as http:
        listed = http.get("/agents").json()["agents"]
        assert listed[0]["id"] == "demo" and listed[0]["modelId"] == "demo"
        assert listed[1].pop("capabilities")["identity"]["name"] == "IO Agent"
        assert listed[1] == {"id": "io-agent", "name": "IO Agent", "description": "",
                             "modelId": "openai:gpt-4o", "aliases": ["ioAgent"],
                             "status": "available", "tools": []}
        listed[1]["capabilities"] = http.get("/agents/ioAgent").json()["capabilities"]
        assert http.get("/agents/ioAgent").json() == listed[1]
        assert http.get("/agents/io-agent").json() == listed[1]
        assert http.get("/agents/ioagent").status_code == 404

        run = http.post("/run", json=run_body("hi", thread_id="t-run", agentId="ioAgent"))
        events = parse_sse(run.text)
        assert events[-1]["type"] == "RUN_FINISHED"
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "IO Agent here."
        assert http.get("/threads/t-run").json()["agentId"] == "io-agent"

        created = http.post("/threads", json={"id": "t-new", "agentId": "ioAgent"})
        assert created.status_code == 201 and created.json()["agentId"] == "io-agent"
        http.post("/threads", json={"id": "t-demo", "agentId": "demo"})

        for name in ("ioAgent", "io-agent"):
            threads = http.get("/threads", params={"agentId": name}).json()["threads"]
            assert sorted(t["id"] for t in threads) == ["t-new", "t-run"]
        assert http.get("/threads", params={"agentId": "gone"}).json() == {"threads": []}

        unknown = http.post("/threads", json={"id": "t-x", "agentId": "nobody"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "AGENT_NOT_FOUND"
        assert http.get("/threads/t-x").status_code == 404


def test_an_unbuildable_agent_is_listed_refuses_runs_and_warns_as_default(
    live: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("IOBRIDGE_TEST_IO_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-123")
    configured = [
        {"id": "io-agent", "aliases": ["ioAgent"], "name": "IO Agent",
         "model": "openai:gpt-4o", "api_key_env": "IOBRIDGE_TEST_IO_KEY"},
        {"id": "pasted", "model": "openai:gpt-4o", "api_key_env": "sk-secret-value-123"},
    ]
    with caplog.at_level(logging.WARNING, logger="iobridge"):
        server = live(agents=configured, default_agent="ioAgent")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the default agent 'io-agent' is unavailable" in w
               and "IOBRIDGE_TEST_IO_KEY" in w for w in warnings)

    with httpx.Client(base_url=server.url + BASE, timeout=10) as http:
        listing = http.get("/agents")
        assert "sk-secret-value-123" not in listing.text
        agents = {a["id"]: a for a in listing.json()["agents"]}
        assert agents["demo"]["status"] == "available"
        assert agents["io-agent"] == {
            "id": "io-agent", "name": "IO Agent", "description": "", "modelId": "openai:gpt-4o",
            "aliases": ["ioAgent"], "status": "unavailable",
            "reason": "environment variable IOBRIDGE_TEST_IO_KEY is not set (API key for openai)",
            "tools": [], "capabilities": {},
        }
        assert agents["pasted"]["status"] == "unavailable"
        assert http.get("/agents/ioAgent").json() == agents["io-agent"]

        for props in ({"agentId": "ioAgent"}, {"agentId": "io-agent"}, {}):
            response = http.post("/run", json=run_body("hi", thread_id="t-u", **props))
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "AGENT_UNAVAILABLE"
            assert "IOBRIDGE_TEST_IO_KEY is not set" in error["message"]
            assert "retry-after" not in response.headers  # a configuration problem: no retry
        assert http.get("/threads").json() == {"threads": []}

        fine = http.post("/run", json=run_body("hi", thread_id="t-d", agentId="demo"))
        assert parse_sse(fine.text)[-1]["type"] == "RUN_FINISHED"


def test_an_unknown_default_agent_warns_and_refuses_runs_without_agent_id(
    live: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="iobridge"):
        server = live(default_agent="missing-agent")
    assert "the default agent 'missing-agent' is not configured" in caplog.text
    with httpx.Client(base_url=server.url + BASE, timeout=10) as http:
        response = http.post("/run", json=run_body("hi"))
        assert response.status_code == 503
        assert response.json()["error"] == {
            "code": "AGENT_UNAVAILABLE",
            "message": "the default agent 'missing-agent' is not configured (default_agent)",
        }
        assert http.get("/threads").json() == {"threads": []}
        named = http.post("/run", json=run_body("hi", agentId="demo"))
        assert parse_sse(named.text)[-1]["type"] == "RUN_FINISHED"
