"""``/readyz`` follows a real PostgreSQL store: ready, then 503 when the database becomes
unreachable (its port closed, or a connection that never answers), then ready again.

The server reaches PostgreSQL through a TCP relay on loopback that the test can cut, the way
a database restart or a network partition cuts a running server off.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer, parse_sse, run_body
from tests.relay import Relay

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import SqlThreadStore
from iobridge.store.sqlalchemy_store import make_engine


async def _ready(client: httpx.AsyncClient) -> httpx.Response:
    return await client.get("/readyz")


async def _until_ready(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 30
    while (await _ready(client)).status_code != 200:
        assert time.monotonic() < deadline, "the store never came back"
        await asyncio.sleep(0.1)


@pytest.fixture
async def relayed_store() -> Any:
    url = make_url(postgres_url())
    schema = await shared_pg_schema()
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    relay.restore()
    engine = make_engine(
        url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False),
        connect_args={"server_settings": {"search_path": schema}, "timeout": 5},
    )
    yield relay, SqlThreadStore(engine)
    relay.close()


async def test_readyz_is_503_while_postgresql_is_unreachable(relayed_store: Any) -> None:
    relay, store = relayed_store
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await _ready(client)).json() == {"status": "ready"}
            ran = await client.post("/io-bridge/run", json=run_body("hi", thread_id="rz-1"))
            assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"

            relay.cut()  # the database's port is closed, pooled connections are dropped
            down = await _ready(client)
            assert down.status_code == 503
            assert down.json() == {
                "error": {"code": "NOT_READY", "message": "the store does not answer"}
            }
            assert (await client.get("/healthz")).status_code == 200  # alive, not ready
            # A run cannot read its thread: refused with 503 and Retry-After, nothing leaked.
            refused = await client.post("/io-bridge/run", json=run_body("hi", thread_id="rz-2"))
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            assert refused.json() == {"error": {
                "code": "STORE_UNAVAILABLE", "message": "the thread store does not answer"}}
            # The refused run holds no admission slot and never counted as started.
            metrics = (await client.get("/metrics")).text
            assert "iobridge_active_runs 0.0" in metrics.splitlines()
            assert 'iobridge_runs_started_total{agent="demo"} 1.0' in metrics.splitlines()

            relay.restore()
            await _until_ready(client)
            ran = await client.post("/io-bridge/run", json=run_body("again", thread_id="rz-3",
                                                                    run_id="r3"))
            assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"


async def test_readyz_is_503_when_postgresql_accepts_but_never_answers(
    relayed_store: Any,
) -> None:
    relay, store = relayed_store
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await _ready(client)).status_code == 200
            relay.freeze()  # connections stay open; no byte gets through
            hung = await _ready(client)
            assert hung.status_code == 503
            assert hung.json()["error"]["code"] == "NOT_READY"
            relay.cut()
            relay.restore()
            await _until_ready(client)
