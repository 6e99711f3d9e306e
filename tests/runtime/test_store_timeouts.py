"""Every store call made for a run is bounded by ``store_timeout_seconds``.

A store that does not answer (a PostgreSQL URL pointed at a socket that accepts and never
answers; a real PostgreSQL behind a relay that freezes, the way a SIGSTOPped server does)
refuses a new run with 503 ``STORE_UNAVAILABLE`` within the timeout, and a run already
streaming ends ``RUN_ERROR STORE_UNAVAILABLE`` with nothing of its end write stored. A store
whose writes fail (a full disk) turns ``/readyz`` 503 until a write succeeds again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url
from tests.backends import postgres_url, shared_pg_schema
from tests.helpers import LiveServer, parse_sse, run_body
from tests.relay import Relay, SilentServer

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.runtime import engine
from iobridge.store import MemoryThreadStore, SqlThreadStore
from iobridge.store.sqlalchemy_store import make_engine

TIMEOUT = 2.0
#: What the issue allows past the timeout for the 503 to arrive.
SLACK = 1.0


async def _post_run(client: httpx.AsyncClient, **kwargs: Any) -> tuple[httpx.Response, float]:
    begun = time.monotonic()
    response = await client.post("/io-bridge/run", json=run_body("hi", **kwargs))
    return response, time.monotonic() - begun


def _assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    assert response.json() == {"error": {
        "code": "STORE_UNAVAILABLE", "message": "the thread store does not answer"}}


async def test_a_new_run_on_a_store_that_never_answers_is_503_within_the_timeout() -> None:
    silent = SilentServer()
    url = make_url(postgres_url()).set(host="127.0.0.1", port=silent.port)
    store = SqlThreadStore(make_engine(url.render_as_string(hide_password=False)),
                           timeout=TIMEOUT)
    settings = Settings(store_timeout_seconds=TIMEOUT)
    try:
        with LiveServer(create_app(Backend(settings, store=store))) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                for n in range(2):  # the second one too: nothing stayed claimed or queued
                    refused, took = await _post_run(client, run_id=f"r{n}")
                    _assert_store_unavailable(refused)
                    assert took < TIMEOUT + SLACK, f"503 after {took:.2f} s"
                assert silent.accepted, "the store never even connected"
                assert server.runtime.active_runs == 0
                assert (await client.get("/readyz")).status_code == 503
    finally:
        silent.close()


async def test_thread_routes_on_a_store_that_never_answers_are_503_not_500() -> None:
    silent = SilentServer()
    url = make_url(postgres_url()).set(host="127.0.0.1", port=silent.port)
    store = SqlThreadStore(make_engine(url.render_as_string(hide_password=False)),
                           timeout=TIMEOUT)
    try:
        with LiveServer(create_app(Backend(Settings(store_timeout_seconds=TIMEOUT),
                                           store=store))) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                for method, path, body in (
                    ("GET", "/io-bridge/threads", None),
                    ("POST", "/io-bridge/threads", {"id": "t1"}),
                    ("GET", "/io-bridge/threads/t1", None),
                    ("PATCH", "/io-bridge/threads/t1", {"title": "x"}),
                    ("GET", "/io-bridge/threads/t1/messages", None),
                    ("GET", "/io-bridge/threads/t1/branches", None),
                    ("DELETE", "/io-bridge/threads/t1", None),
                ):
                    begun = time.monotonic()
                    response = await client.request(method, path, json=body)
                    took = time.monotonic() - begun
                    _assert_store_unavailable(response)
                    assert took < TIMEOUT + SLACK, f"{method} {path}: 503 after {took:.2f} s"
    finally:
        silent.close()


async def test_the_timeout_is_a_setting_of_its_own_and_defaults_to_five_seconds() -> None:
    assert Settings().store_timeout_seconds == 5.0
    with pytest.raises(ValueError, match="greater than 0"):
        Settings(store_timeout_seconds=0)


# -- a real PostgreSQL that stops answering mid-flight ------------------------------------


class Gate:
    """Holds a run's agent until the test opens it (across the server's thread)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    async def agent(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "the reply"
        self.entered.set()
        while not self.opened.is_set():
            await asyncio.sleep(0.01)


@pytest.fixture
async def relayed() -> AsyncIterator[tuple[Relay, SqlThreadStore]]:
    url = make_url(postgres_url())
    schema = await shared_pg_schema()
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    relay.restore()
    store = SqlThreadStore(make_engine(
        url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False),
        connect_args={"server_settings": {"search_path": schema}},
    ), timeout=TIMEOUT)
    yield relay, store
    relay.close()


async def _stored(client: httpx.AsyncClient, thread_id: str) -> list[str]:
    """The ids of the thread's stored messages (through the server: its pool is its loop's),
    once the store answers again."""
    deadline = time.monotonic() + 30
    while True:
        response = await client.get(f"/io-bridge/threads/{thread_id}/messages",
                                    params={"format": "agui"})
        if response.status_code < 500:
            break
        assert time.monotonic() < deadline, "the store never came back"
        await asyncio.sleep(0.1)
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


async def _until_ready(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 30
    while (await client.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, "the store never came back"
        await asyncio.sleep(0.1)


async def test_a_frozen_postgresql_refuses_new_runs_within_the_timeout_and_recovers(
    relayed: tuple[Relay, SqlThreadStore],
) -> None:
    relay, store = relayed
    settings = Settings(store_timeout_seconds=TIMEOUT)
    with LiveServer(create_app(Backend(settings, store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            ran, _ = await _post_run(client, thread_id="fz-1", run_id="fz1")
            assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"
            relay.freeze()  # pooled connections stay open; no byte gets through
            for n in range(2):
                refused, took = await _post_run(client, thread_id="fz-2", run_id=f"fz2-{n}")
                _assert_store_unavailable(refused)
                assert took < TIMEOUT + SLACK, f"503 after {took:.2f} s"
            relay.cut()  # what the frozen connections held is dropped, not delivered late
            relay.restore()
            await _until_ready(client)
            again, _ = await _post_run(client, thread_id="fz-2", run_id="fz3")
            assert parse_sse(again.text)[-1]["type"] == "RUN_FINISHED"
            # The refused runs stored nothing; the one that ran stored its turn.
            assert (await _stored(client, "fz-2"))[0] == "u-fz3"


async def test_a_run_whose_end_write_stalls_ends_store_unavailable_with_nothing_half_written(
    relayed: tuple[Relay, SqlThreadStore],
) -> None:
    relay, store = relayed
    gate = Gate()
    backend = Backend(Settings(store_timeout_seconds=TIMEOUT),
                      agents=[FunctionAgent(gate.agent, id="gated")], store=store)
    with LiveServer(create_app(backend)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = run_body("hi", thread_id="st-1", run_id="st1", agentId="gated")
            async with client.stream("POST", "/io-bridge/run", json=body) as stream:
                reading = asyncio.ensure_future(stream.aread())
                await asyncio.to_thread(gate.entered.wait, 10)
                # The start write (the user's message) is stored while the agent works.
                deadline = time.monotonic() + 10
                while not await _stored(client, "st-1"):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                relay.freeze()
                gate.opened.set()
                begun = time.monotonic()
                events = parse_sse((await reading).decode())
                took = time.monotonic() - begun
            assert events[-1] == {"type": "RUN_ERROR", "code": "STORE_UNAVAILABLE",
                                  "message": "what the run produced could not be stored"}
            assert "RUN_FINISHED" not in [e["type"] for e in events]
            assert took < TIMEOUT + SLACK, f"the run ended {took:.2f} s after its agent"
            # While writes fail the server is not ready.
            assert (await client.get("/readyz")).status_code == 503
            relay.cut()
            relay.restore()
            # Nothing of the end write reached the thread: the user's message only.
            assert await _stored(client, "st-1") == ["u-st1"]
            # The thread was freed: the next run on it finishes and is stored.
            gate.opened.set()
            again = await client.post("/io-bridge/run", json=run_body(
                "again", thread_id="st-1", run_id="st2", agentId="gated"))
            assert parse_sse(again.text)[-1]["type"] == "RUN_FINISHED"
            await _until_ready(client)
            stored = await _stored(client, "st-1")
            assert stored[:2] == ["u-st1", "u-st2"] and len(stored) == 3


# -- a store whose writes fail: the run is not finished, readiness says so ---------------


class FullDiskStore(MemoryThreadStore):
    """A store whose run writes fail while ``full`` (a full disk, say); reads still work."""

    full = True

    async def write_for_run(self, thread_id: str, **kwargs: Any) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        await super().write_for_run(thread_id, **kwargs)


async def test_failed_writes_end_runs_store_unavailable_and_turn_readyz_503_until_one_succeeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = FullDiskStore()
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            assert (await client.get("/readyz")).status_code == 200
            events = parse_sse((await client.post("/io-bridge/run", json=run_body("hi"))).text)
            assert events[-1] == {"type": "RUN_ERROR", "code": "STORE_UNAVAILABLE",
                                  "message": "what the run produced could not be stored"}
            # The events are retained for resume, the terminal event the same.
            replay = parse_sse((await client.get("/io-bridge/runs/r1/events")).text)
            assert replay == events
            down = await client.get("/readyz")
            assert down.status_code == 503
            assert down.json() == {"error": {
                "code": "NOT_READY", "message": "the store refuses writes"}}
            # Recovery needs no restart: once the hold is over, traffic is let back in ...
            monkeypatch.setattr(engine, "WRITE_FAILURE_HOLD", 0.0)
            assert (await client.get("/readyz")).status_code == 200
            monkeypatch.setattr(engine, "WRITE_FAILURE_HOLD", 3600.0)
            # ... a failing write turns it 503 again, a successful one clears it at once.
            parse_sse((await client.post("/io-bridge/run", json=run_body("x", run_id="r2"))).text)
            assert (await client.get("/readyz")).status_code == 503
            store.full = False
            ok = parse_sse(
                (await client.post("/io-bridge/run", json=run_body("y", run_id="r3"))).text)
            assert ok[-1]["type"] == "RUN_FINISHED"
            assert (await client.get("/readyz")).status_code == 200
