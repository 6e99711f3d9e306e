"""Shared state end to end: ``ctx.state``, deltas checked by the guard, the thread keeps it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, StateDelta, StateSnapshot
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import SqlThreadStore
from iobridge.store.sqlalchemy_store import make_engine

pytestmark = pytest.mark.timeout(60)
SEEN: list[Any] = []


async def counter(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Counts runs in the shared state; ``bad`` sends a delta that cannot apply."""
    SEEN.append(ctx.state)
    text = ctx.messages[-1]["content"] if ctx.messages else ""
    if text == "reset":
        yield StateSnapshot(snapshot={"count": 0})
    elif text == "bad":
        yield "before"
        yield StateDelta(patch=[{"op": "replace", "path": "/missing/deep", "value": 1}])
        yield "never shown"
    elif text == "grow":
        yield StateSnapshot(snapshot={"blob": "x" * 200})
    else:
        yield StateDelta(patch=[{"op": "replace", "path": "/count",
                                 "value": ctx.state["count"] + 1}])
    yield "ok"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[str]:
    agents = [FunctionAgent(counter, id="counter")]
    limits = {"default_agent": "counter", "max_state_bytes": 100}
    if request.param == "sqlite":
        folder: Path = tmp_path_factory.mktemp("state")
        settings = Settings(database_url=f"sqlite+aiosqlite:///{folder}/db", **limits)
        app = create_app(Backend(settings, agents=agents))
    else:
        schema = asyncio.run(shared_pg_schema())
        engine = make_engine(
            postgres_url(), connect_args={"server_settings": {"search_path": schema}}
        )
        app = create_app(Backend(Settings(database_url="memory://", **limits), agents=agents,
                         store=SqlThreadStore(engine)))
    with LiveServer(app) as server:
        yield server.url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    SEEN.clear()
    with httpx.Client(base_url=base_url, timeout=20) as c:
        yield c


def run(client: httpx.Client, text: str, thread: str, n: int, **body: Any,
        ) -> list[dict[str, Any]]:
    response = client.post("/io-bridge/run",
                           json={**run_body(text, thread_id=thread, run_id=f"{thread}-{n}"),
                                 **body})
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def test_state_reaches_the_agent_and_a_delta_is_applied_and_kept(client: httpx.Client) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    first = run(client, "count", thread, 1, state={"count": 41, "keep": True})
    assert SEEN == [{"count": 41, "keep": True}]
    (delta,) = [e for e in first if e["type"] == "STATE_DELTA"]
    assert delta["delta"] == [{"op": "replace", "path": "/count", "value": 42}]
    assert first[-1]["type"] == "RUN_FINISHED"

    # No state sent: the run starts from the one the thread's last run ended with, and the
    # client is shown it first (its deltas then apply on the client too).
    second = run(client, "count", thread, 2)
    assert SEEN[-1] == {"count": 42, "keep": True}
    assert [e["type"] for e in second[:2]] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert second[1]["snapshot"] == {"count": 42, "keep": True}

    # State sent: it wins over the stored one.
    run(client, "count", thread, 3, state={"count": 0})
    assert SEEN[-1] == {"count": 0}
    run(client, "count", thread, 4)
    assert SEEN[-1] == {"count": 1}


def test_a_delta_that_does_not_apply_is_refused_and_not_kept(client: httpx.Client) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    run(client, "count", thread, 1, state={"count": 1})
    events = run(client, "bad", thread, 2)
    assert [e["type"] for e in events if e["type"].startswith("STATE")] == ["STATE_SNAPSHOT"]
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "INVALID_STATE_DELTA"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "before"
    run(client, "count", thread, 3)
    assert SEEN[-1] == {"count": 2}


def test_state_over_the_limit(client: httpx.Client) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    # At the limit (100 bytes of JSON) the request is taken; one byte more is refused.
    at_limit = {"s": "x" * 92}
    assert run(client, "reset", thread, 1, state=at_limit)[-1]["type"] == "RUN_FINISHED"
    assert [at_limit] == SEEN
    over = client.post("/io-bridge/run", json={**run_body("count", thread_id=thread,
                                                          run_id=f"{thread}-2"),
                                               "state": {"s": "x" * 93}})
    assert over.status_code == 413
    assert over.json()["error"]["code"] == "STATE_TOO_LARGE"
    assert client.get(f"/io-bridge/runs/{thread}-2/events").status_code == 404
    # An agent growing it beyond the limit ends its run; the stored state stays as it was.
    grown = run(client, "grow", thread, 3)
    assert grown[-1]["type"] == "RUN_ERROR" and grown[-1]["code"] == "STATE_TOO_LARGE"
    run(client, "count", thread, 4)
    assert SEEN[-1] == {"count": 0}  # what "reset" left
