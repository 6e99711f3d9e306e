"""Agent discovery routes (Level 4) of ``create_app``, in-process (lifespan running) and over
real loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, app_client

from iobridge.agents.base import Agent
from iobridge.agents.tools import ServerTool
from iobridge.app import Backend
from iobridge.auth import hash_api_key
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import MemoryThreadStore

BASE = "/io-bridge"


class Scripted(Agent):
    """An agent that is only ever described, never run."""

    def __init__(self, agent_id: str, model_id: str | None = None, tools: Any = ()) -> None:
        self.id = agent_id
        self.name = agent_id.title()
        self.description = f"The {agent_id} agent"
        self.model_id = model_id
        self.tools = tools

    async def run(self, ctx: Any) -> Any:  # pragma: no cover - never run here
        yield None


def lookup(city: str) -> str:
    return city


WEATHER = ServerTool(
    name="weather", description="Look up the weather", parameters={"type": "object"}, func=lookup
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    agents = [Scripted("planner", "openai:gpt-4o", (WEATHER,)), Scripted("offline")]
    backend = Backend(Settings(), agents=agents, store=MemoryThreadStore())
    async with app_client(create_app(backend)) as c:
        yield c


async def test_list_agents_in_registration_order(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/agents")
    assert response.status_code == 200
    demo, *given = response.json()["agents"]
    assert demo["id"] == "demo"  # the built-in agent comes first
    assert [a.pop("capabilities")["identity"]["name"] for a in given] == ["Planner", "Offline"]
    assert {"agents": given} == {
        "agents": [
            {
                "id": "planner",
                "name": "Planner",
                "description": "The planner agent",
                "modelId": "openai:gpt-4o",
                "status": "available",
                "tools": [{"name": "weather", "description": "Look up the weather"}],
            },
            {"id": "offline", "name": "Offline", "description": "The offline agent",
             "modelId": "offline", "status": "available", "tools": []},
        ]
    }


async def test_get_one_agent(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/agents/offline")
    assert response.status_code == 200
    assert response.json()["id"] == "offline" and response.json()["modelId"] == "offline"


@pytest.mark.parametrize(
    ("agent_id", "status", "code"),
    [
        ("missing", 404, "AGENT_NOT_FOUND"),
        ("x" * 257, 400, "INVALID_ID"),
        ("a%7Fb", 400, "INVALID_ID"),
    ],
)
async def test_unknown_or_bad_agent_id(
    client: httpx.AsyncClient, agent_id: str, status: int, code: str
) -> None:
    response = await client.get(f"{BASE}/agents/{agent_id}")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_discovery_and_threads_over_real_http_with_api_key(
    serve: Callable[..., LiveServer],
) -> None:
    """Through the real ``create_app(Backend(...))`` on 127.0.0.1: wiring, auth, envelope,
    persistence."""
    server = serve(
        agents=[Scripted("offline")],
        auth={
            "mode": "api-key",
            "api_keys": [
                {"sha256": hash_api_key("k1"), "principal": "alice", "resource_ids": ["alice"]}
            ],
        },
    )
    key = {"X-API-Key": "k1"}
    with httpx.Client(base_url=server.url + BASE, timeout=10) as http:
        denied = http.get("/agents")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "UNAUTHORIZED"
        agents = http.get("/agents", headers=key).json()["agents"]
        assert "offline" in [a["id"] for a in agents]

        created = http.post("/threads", json={"id": "t1", "title": "Hello"}, headers=key)
        assert created.status_code == 201 and created.json()["resourceId"] == "alice"
        assert http.get("/threads", headers=key).json()["threads"][0]["id"] == "t1"
        assert http.get("/threads/t1/messages", headers=key).json() == {"messages": []}
        assert (
            http.patch("/threads/t1", json={"title": "Bye"}, headers=key).json()["title"] == "Bye"
        )
        assert http.post("/threads", json={"id": 3}, headers=key).status_code == 400
        assert http.delete("/threads/t1", headers=key).status_code == 204
        assert http.get("/threads/t1", headers=key).status_code == 404
