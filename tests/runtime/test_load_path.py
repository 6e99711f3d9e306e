"""The run path under load and faults, over real loopback HTTP: what is written when, the
thread held until stored, bounded memory, admission limits, and no dangling calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, app_client, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import hash_api_key
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.store import MemoryThreadStore
from iobridge.store.base import Carryover, RunRead

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


class GatedStore(MemoryThreadStore):
    """A store whose run writes wait until ``gate`` opens (a slow database), and are logged."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.writes: list[list[str]] = []
        self.waiting = threading.Event()
        self.read_gate = threading.Event()
        self.read_gate.set()
        self.reading = threading.Event()

    async def read_for_run(self, thread_id: str, **kwargs: Any) -> RunRead:
        while not self.read_gate.is_set():
            self.reading.set()
            await asyncio.sleep(0.01)
        return await super().read_for_run(thread_id, **kwargs)

    async def write_for_run(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None = None,
        carryover: Carryover | None = None,
    ) -> None:
        while not self.gate.is_set():
            self.waiting.set()
            await asyncio.sleep(0.01)
        await super().write_for_run(
            thread_id, resource_id=resource_id, agent_id=agent_id, messages=messages, title=title,
            carryover=carryover,
        )
        self.writes.append([str(m["id"]) for m in messages])


@pytest.fixture
def gated() -> Iterator[tuple[GatedStore, LiveServer]]:
    store = GatedStore()
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        yield store, server


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


# -- item 1: RUN_STARTED before any write --------------------------------------------------


async def test_run_started_and_text_leave_while_the_store_write_waits(
    gated: tuple[GatedStore, LiveServer],
) -> None:
    store, server = gated
    store.gate.clear()
    seen: list[str] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=run_body("hello")) as response:
            async for event in _events(response):
                seen.append(event["type"])
                if event["type"] == "TEXT_MESSAGE_END":
                    # The whole reply streamed while no write had completed.
                    assert store.writes == []
                    store.gate.set()
        assert seen[0] == "RUN_STARTED" and seen[-1] == "RUN_FINISHED"
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    # One write when the run started (the user message), one when it ended (the reply: the
    # user message was stored by then).
    assert store.writes == [["u-r1"], [stored[1]["id"]]]


async def test_one_run_id_started_twice_at_once_runs_once(
    gated: tuple[GatedStore, LiveServer],
) -> None:
    store, server = gated
    store.read_gate.clear()  # both requests wait inside the thread read
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        first = asyncio.create_task(
            client.post("/io-bridge/run", json=run_body("a", thread_id="ta", run_id="same"))
        )
        for _ in range(200):
            if store.reading.is_set():
                break
            await asyncio.sleep(0.01)
        second = await client.post(
            "/io-bridge/run", json=run_body("b", thread_id="tb", run_id="same")
        )
        assert second.status_code == 409
        assert second.json()["error"]["code"] == "RUN_ALREADY_RUNNING"
        store.read_gate.set()
        assert parse_sse((await first).text)[-1]["type"] == "RUN_FINISHED"
        assert (await client.get("/io-bridge/threads/tb")).status_code == 404


# -- item 2: the thread is held until its run is stored -----------------------------------


async def test_a_disconnect_during_the_final_write_keeps_the_thread_busy_until_stored(
    gated: tuple[GatedStore, LiveServer],
) -> None:
    store, server = gated
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        store.gate.clear()
        first = run_body("first", run_id="rA")
        async with client.stream("POST", "/io-bridge/run", json=first) as r:
            async for event in _events(r):
                if event["type"] == "TEXT_MESSAGE_END":
                    break  # the final write is waiting: drop the connection now
        for _ in range(200):  # the run concludes: the disconnect cancels it mid-write
            if store.waiting.is_set() and server.runtime.active_runs == 1:
                break
            await asyncio.sleep(0.01)
        busy = await client.post("/io-bridge/run", json=run_body("second", run_id="rB"))
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "THREAD_BUSY"
        store.gate.set()
        for _ in range(200):
            if server.runtime.active_runs == 0:
                break
            await asyncio.sleep(0.01)
        assert server.runtime.active_runs == 0
        second = await client.post("/io-bridge/run", json=run_body("second", run_id="rC"))
        assert parse_sse(second.text)[-1]["type"] == "RUN_FINISHED"
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()["messages"]
    # Run A's messages, then run C's: never interleaved.
    ids = [m["id"] for m in stored]
    assert ids[0] == "u-rA" and ids.index("u-rC") == len(ids) - 2
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert "rB" not in json.dumps(stored)  # the refused run stored nothing


# -- item 3: bounded memory ---------------------------------------------------------------


def _counting(deltas: int) -> FunctionAgent:
    async def count(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for i in range(deltas):
            if i % 8 == 0:
                await asyncio.sleep(0)  # a model's pace: the live follower keeps up
            yield f"{i} "

    return FunctionAgent(count, id="count")


async def test_a_resume_before_the_run_log_window_is_410(serve: Any) -> None:
    server = serve(agents=[_counting(300)], max_run_log_bytes=8192)
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("x", agentId="count"))).text)
        assert len(events) == 304 and events[-1]["type"] == "RUN_FINISHED"  # the live stream
        gone = await client.get("/io-bridge/runs/r1/events", headers={"Last-Event-ID": "3"})
        assert gone.status_code == 410
        assert gone.json()["error"]["code"] == "EVENTS_NOT_RETAINED"
        tail = await client.get("/io-bridge/runs/r1/events", headers={"Last-Event-ID": "300"})
        assert tail.status_code == 200
        frames = [f.split("\n") for f in tail.text.split("\n\n") if f]
        assert [f[0] for f in frames] == ["id: 301", "id: 302", "id: 303", "id: 304"]
        assert json.loads(frames[-1][1].removeprefix("data: "))["type"] == "RUN_FINISHED"
        # At the window's edge: the cursor just before the first retained event replays it
        # whole; one further back would leave a gap, so it is 410.
        first = server.run("r1").log.first_seq
        assert first > 2
        edge = await client.get("/io-bridge/runs/r1/events",
                                headers={"Last-Event-ID": str(first - 1)})
        assert edge.status_code == 200
        replayed = [f.split("\n")[0] for f in edge.text.split("\n\n") if f]
        assert replayed[0] == f"id: {first}" and replayed[-1] == "id: 304"
        gap = await client.get("/io-bridge/runs/r1/events",
                               headers={"Last-Event-ID": str(first - 2)})
        assert gap.status_code == 410
    run = server.run("r1")
    assert run.log.nbytes <= 8192 and run.log.last_seq == 304


async def test_retention_is_bounded_by_bytes_oldest_first(serve: Any) -> None:
    server = serve(agents=[_counting(20)], max_retained_bytes=8000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        for n in (1, 2, 3, 4):
            body = run_body("x", run_id=f"r{n}", thread_id=f"t{n}", agentId="count")
            assert parse_sse((await client.post("/io-bridge/run", json=body)).text)
        sizes = [server.run(f"r{n}").log.nbytes for n in (3, 4)]
        assert sum(sizes) <= 8000 < sum(sizes) + min(sizes)  # room for two logs, not three
        for n in (1, 2):  # each eviction gave its bytes back: the window keeps moving
            assert (await client.get(f"/io-bridge/runs/r{n}/events")).status_code == 404
        for n in (3, 4):
            assert (await client.get(f"/io-bridge/runs/r{n}/events")).status_code == 200
    assert server.runtime.retained_runs == 2


async def test_retained_runs_expire_on_a_timer(serve: Any) -> None:
    server = serve(retention_seconds=0.2)
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert parse_sse((await client.post("/io-bridge/run", json=run_body("hi"))).text)
    assert server.runtime.retained_runs == 1
    for _ in range(100):  # no other run ends and nobody asks: the timer expires it
        if server.runtime.retained_runs == 0:
            break
        await asyncio.sleep(0.02)
    assert server.runtime.retained_runs == 0


async def test_followers_per_run_are_limited(serve: Any) -> None:
    server = serve(max_followers_per_run=1)
    body = run_body("get_weather for Oslo", tools=[WEATHER])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            async for event in _events(response):
                if event["type"] == "TOOL_CALL_END":
                    second = await client.get("/io-bridge/runs/r1/events")
                    assert second.status_code == 429
                    assert second.json()["error"]["code"] == "TOO_MANY_FOLLOWERS"
                    posted = await client.post(
                        f"/io-bridge/runs/r1/tool-calls/{event['toolCallId']}/result",
                        json={"result": "sunny"},
                    )
                    assert posted.status_code == 200
        assert event["type"] == "RUN_FINISHED"


# -- item 4: admission control ------------------------------------------------------------


async def test_runs_over_the_per_principal_limit_are_429_and_store_nothing(serve: Any) -> None:
    keys = [{"sha256": hash_api_key("ka"), "principal": "alice"},
            {"sha256": hash_api_key("kb"), "principal": "bob"}]
    server = serve(max_active_runs_per_principal=1, max_active_runs=2,
                   auth={"mode": "api-key", "api_keys": keys})
    alice, bob = {"X-API-Key": "ka"}, {"X-API-Key": "kb"}
    pending = run_body("get_weather", tools=[WEATHER], thread_id="ta", run_id="ra")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=pending, headers=alice) as first:
            async for event in _events(first):
                if event["type"] == "TOOL_CALL_END":
                    break
            over = await client.post(
                "/io-bridge/run", json=run_body("hi", thread_id="tb", run_id="rb"), headers=alice
            )
            assert over.status_code == 429
            assert over.json()["error"] == {"code": "TOO_MANY_RUNS",
                                            "message": "too many runs at once for this caller"}
            assert int(over.headers["retry-after"]) >= 1
            missing = await client.get("/io-bridge/threads/tb", headers=alice)
            assert missing.status_code == 404  # nothing was stored for the refused run
            # Another principal still has room under the total limit.
            other = await client.post(
                "/io-bridge/run", json=run_body("hi", thread_id="tc", run_id="rc"), headers=bob
            )
            assert parse_sse(other.text)[-1]["type"] == "RUN_FINISHED"
        # Alice's first run ended with her disconnect: she may run again.
        for _ in range(200):
            if server.runtime.active_runs == 0:
                break
            await asyncio.sleep(0.01)
        again = await client.post(
            "/io-bridge/run", json=run_body("hi", thread_id="tb", run_id="rb"), headers=alice
        )
        assert parse_sse(again.text)[-1]["type"] == "RUN_FINISHED"


async def _park(client: httpx.AsyncClient, stack: contextlib.AsyncExitStack, n: int,
                resource: str) -> None:
    """Start a run that waits on a frontend tool (held by its open stream)."""
    body = run_body("get_weather", tools=[WEATHER], thread_id=f"tp{n}", run_id=f"rp{n}",
                    resourceId=resource)
    stream = await stack.enter_async_context(client.stream("POST", "/io-bridge/run", json=body))
    assert stream.status_code == 200
    seen: list[dict[str, Any]] = []
    async for event in _events(stream):
        if event["type"] == "TOOL_CALL_END":
            return
        seen.append(event)
    raise AssertionError(f"run rp{n} ended before parking: {seen}")


async def test_in_auth_none_the_per_principal_limit_counts_per_resource_id(serve: Any) -> None:
    """Auth mode none: every caller is one principal; a deployment with its own auth in
    front tells its users apart by resourceId, and the limit counts those (issue 34)."""
    server = serve(max_active_runs_per_principal=2)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        for n, resource in enumerate(["u1", "u2", "u3"]):  # three users: all start
            await _park(client, stack, n, resource)
        assert server.runtime.active_runs == 3
        for n in (3, 4):  # two of one user: both start
            await _park(client, stack, n, "shared")
        over = await client.post("/io-bridge/run", json=run_body(
            "hi", thread_id="tp5", run_id="rp5", resourceId="shared"))
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "TOO_MANY_RUNS"
        # Without a resourceId the run acts for (and counts against) the default resource.
        for n in (6, 7):
            await _park(client, stack, n, "default")
        no_resource = await client.post("/io-bridge/run", json=run_body(
            "hi", thread_id="tp8", run_id="rp8"))
        assert no_resource.status_code == 429


async def test_runs_over_the_total_limit_are_429(serve: Any) -> None:
    server = serve(max_active_runs=1)
    pending = run_body("get_weather", tools=[WEATHER], thread_id="ta", run_id="ra")
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/io-bridge/run", json=pending) as first,
    ):
        async for event in _events(first):
            if event["type"] == "TOOL_CALL_END":
                break
        over = await client.post("/io-bridge/run", json=run_body("hi", thread_id="tb"))
        assert over.status_code == 429
        assert over.json()["error"] == {
            "code": "TOO_MANY_RUNS", "message": "the server is running as many runs as it may"}


async def test_new_runs_during_shutdown_are_503_with_retry_after() -> None:
    """``Backend.shutdown`` itself stops admission (the test does not set the flag)."""
    app = create_app(Backend(Settings(database_url="memory://", drain_seconds=0)))
    async with app_client(app) as client:
        assert (await client.get("/readyz")).status_code == 200
        await app.state.backend.shutdown()
        refused = await client.post("/io-bridge/run", json=run_body("hi"))
        ready = await client.get("/readyz")
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "SERVER_SHUTTING_DOWN"
        assert refused.headers["retry-after"] == "5"
        assert ready.status_code == 503 and ready.json()["error"]["message"] == "shutting down"
        assert (await client.get("/io-bridge/threads/t1")).status_code == 404  # nothing stored


# -- item 6: no dangling calls in history -------------------------------------------------


async def test_a_disconnect_with_a_pending_call_stores_an_error_result(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather for Oslo", tools=[WEATHER])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            async for event in _events(response):
                if event["type"] == "TOOL_CALL_END":
                    break
        for _ in range(200):
            if server.runtime.active_runs == 0:
                break
            await asyncio.sleep(0.01)
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[2]["toolCallId"] == stored[1]["toolCalls"][0]["id"]
    assert stored[2]["error"] == "the client disconnected before answering"


async def test_next_run_calls_are_left_for_the_next_run(serve: Any) -> None:
    server = serve(tool_result_mode="next-run")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        first = parse_sse((await client.post(
            "/io-bridge/run", json=run_body("get_weather", tools=[WEATHER]))).text)
        assert first[-1]["outcome"]["pendingToolCallIds"]
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()["messages"]
    # The deferred call is answered by the client's next run, not by an error result.
    assert [m["role"] for m in stored] == ["user", "assistant"]


async def test_a_backend_changes_nothing_process_wide_the_serve_command_tunes_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Full collections under load would otherwise walk every module, route and model built
    # at startup again (tens of milliseconds each, measured in bench/load_runs.py); but that
    # is the serving process's choice, not a library's: a Backend mounted into someone
    # else's app leaves their collector alone.
    import gc
    import signal

    from iobridge import cli

    thresholds = gc.get_threshold()
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    gc.unfreeze()
    async with Backend(Settings(database_url="memory://")) as backend:
        app = create_app(backend)
        async with app.router.lifespan_context(app):
            pass
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    set_to: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "set_threshold", lambda *t: set_to.append(t))
    try:
        cli.tune_collector_for_serving()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
    assert set_to == [cli.SERVING_GC_THRESHOLDS]


# -- the store does not answer ------------------------------------------------------------


class DownStore(MemoryThreadStore):
    """A store whose run reads fail while ``failure`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: BaseException | None = None

    async def read_for_run(self, thread_id: str, **kwargs: Any) -> RunRead:
        if self.failure is not None:
            raise self.failure
        return await super().read_for_run(thread_id, **kwargs)


async def test_a_run_whose_thread_cannot_be_read_is_503_and_holds_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    settings = Settings(max_active_runs=1, max_active_runs_per_principal=1)
    with LiveServer(create_app(Backend(settings, store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            store.failure = ConnectionRefusedError("connection refused")
            # The refused run released its admission slots (in all and the principal's): 503
            # again, not 429.
            for n in range(2):
                with caplog.at_level(logging.ERROR, logger="iobridge.runtime"):
                    refused = await client.post(
                        "/io-bridge/run", json=run_body("hi", run_id=f"down{n}"))
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "5"
                assert refused.json() == {"error": {
                    "code": "STORE_UNAVAILABLE", "message": "the thread store does not answer"}}
            # The operator is told which run and why, once per refused run.
            assert [r.getMessage() for r in caplog.records if r.name == "iobridge.runtime"
                    ] == [f"run down{n}: the thread store does not answer "
                          "(ConnectionRefusedError: connection refused)" for n in range(2)]
            store.failure = None
            # Neither the runId nor the thread stayed claimed.
            ran = parse_sse((await client.post("/io-bridge/run", json=run_body("hi"))).text)
            assert ran[-1]["type"] == "RUN_FINISHED"
            assert server.runtime.active_runs == 0



class WriteFailingStore(MemoryThreadStore):
    """A store whose run writes fail (a full disk, say)."""

    async def write_for_run(self, thread_id: str, **kwargs: Any) -> None:
        raise RuntimeError("disk full")


async def test_a_run_whose_writes_fail_ends_store_unavailable_and_the_operator_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.ERROR, logger="iobridge.runtime"),
        LiveServer(create_app(Backend(Settings(), store=WriteFailingStore()))) as server,
    ):
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            events = parse_sse((await client.post("/io-bridge/run", json=run_body("hi"))).text)
            assert (await client.get("/io-bridge/threads/t1")).status_code == 404
            again = parse_sse((await client.post("/io-bridge/run", json=run_body(
                "hi", run_id="r2"))).text)
    # Not finished: nothing was stored (issue 29); the thread was freed for the next run.
    assert events[-1]["type"] == again[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == again[-1]["code"] == "STORE_UNAVAILABLE"
    failures = [r for r in caplog.records if r.getMessage().startswith("could not store")]
    # Each run's start write and end write, each with its cause.
    assert [r.getMessage().rsplit(" ", 1)[-1] for r in failures] == ["r1", "r1", "r2", "r2"]
    assert failures[0].getMessage() == "could not store the messages of run r1"
    assert all(r.exc_info is not None and r.exc_info[0] is RuntimeError for r in failures)


class FirstWriteFailingStore(GatedStore):
    """A store whose first run write fails (a lost connection, say), the rest succeed."""

    failed = False

    async def write_for_run(self, thread_id: str, **kwargs: Any) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("connection lost")
        await super().write_for_run(thread_id, **kwargs)


@pytest.mark.parametrize("first_fails", [False, True])
async def test_the_end_write_carries_the_new_messages_again_only_if_the_start_write_failed(
    first_fails: bool,
) -> None:
    store = FirstWriteFailingStore() if first_fails else GatedStore()
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            events = parse_sse((await client.post("/io-bridge/run", json=run_body("hi"))).text)
            stored = (await client.get("/io-bridge/threads/t1/messages")).json()["messages"]
    assert events[-1]["type"] == "RUN_FINISHED"
    user_id = run_body("hi")["messages"][0]["id"]
    reply_id = next(e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START")
    # Either way the thread holds the whole turn, once.
    assert [m["id"] for m in stored] == [user_id, reply_id]
    if first_fails:
        assert store.writes == [[user_id, reply_id]]  # the end write stored both
    else:
        assert store.writes == [[user_id], [reply_id]]  # not sent twice
