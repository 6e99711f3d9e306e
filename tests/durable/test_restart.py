"""One node, no Redis: ``iobridge serve`` restarted (SIGTERM) while a run waits on a
frontend tool. The run survives; the result, resume and cancel work on the new process.
Real processes on one SQLite file (and on PostgreSQL), the model on the fake OpenAI server."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.backends import postgres_url
from tests.cluster.replicas import postgres_database, read_until
from tests.durable.processes import assert_valid_stream, run_body, serve, sse_ids

from iobridge.store.migrate import upgrade


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'durable.db'}"
        asyncio.run(upgrade(url))
        yield url
        return
    postgres_url()
    with postgres_database() as url:
        yield url


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_a_run_parked_across_a_restart_finishes_on_the_new_process(
    tmp_path: Path, database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Checking."),
                     text("Sunny in ", "Oslo."))
    first = serve("first", tmp_path, database_url=database_url,
                  model_base_url=fake_openai.base_url)
    thread, body = _thread(), None
    try:
        body = run_body(thread)
        with first.client().stream("POST", "/run", json=body) as response:
            events = sse_ids(response)
            head = read_until(events, "TOOL_CALL_END")
            time.sleep(0.3)  # the park point's write
            first.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            rest = list(events)
        output = first.stop()
        took = time.monotonic() - stopped
    finally:
        first.stop(signal.SIGKILL)
    # The stream ended at the point: no RUN_ERROR SERVER_SHUTDOWN, nothing after it.
    assert rest == [], rest
    assert first.process.returncode == 0, output
    assert took < 10, f"exit took {took:.1f} s"  # parked runs do not wait out the drain
    second = serve("second", tmp_path, database_url=database_url,
                   model_base_url=fake_openai.base_url)
    try:
        call = head[-1][1]["toolCallId"]
        posted = second.client().post(f"/runs/{body['runId']}/tool-calls/{call}/result",
                                      json={"result": {"tempC": 21}})
        assert posted.status_code == 200, posted.text
        again = second.client().post(f"/runs/{body['runId']}/tool-calls/{call}/result",
                                     json={"result": 1})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "TOOL_RESULT_ALREADY_SUBMITTED"
        with second.client().stream("GET", f"/runs/{body['runId']}/events",
                                    headers={"Last-Event-ID": head[-1][0]}) as resumed:
            assert resumed.status_code == 200
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(head + tail)
        # Caught up: the step the client had open closed, the conversation at the point,
        # then the continued run (its ids in epoch 1).
        kinds = [e["type"] for _, e in tail]
        assert kinds[:3] == ["STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
        # The result reaches the client once: in the snapshot (the run's last durable point
        # is after it) or as its event.
        shown = [m["role"] for m in tail[1][1]["messages"]]
        assert shown.count("tool") + kinds.count("TOOL_CALL_RESULT") == 1
        # A resume from the start: RUN_STARTED, the conversation at the last point, the rest.
        with second.client().stream("GET", f"/runs/{body['runId']}/events") as replay:
            again = read_until(sse_ids(replay), "RUN_FINISHED")
        assert_valid_stream(again)
        assert again[0][1]["type"] == "RUN_STARTED" and again[-1] == tail[-1]
        stored = second.client().get(f"/threads/{thread}/messages",
                                     params={"format": "agui"}).json()["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[3]["content"] == "Sunny in Oslo."
        assert len(fake_openai.requests) == 2
    finally:
        second.stop()


def test_resume_and_cancel_reach_a_parked_run_after_a_restart(
    tmp_path: Path, database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')))
    first = serve("first", tmp_path, database_url=database_url,
                  model_base_url=fake_openai.base_url)
    thread = _thread()
    body = run_body(thread)
    try:
        with first.client().stream("POST", "/run", json=body) as response:
            events = sse_ids(response)
            head = read_until(events, "TOOL_CALL_END")
            time.sleep(0.3)
            first.process.send_signal(signal.SIGTERM)
            assert list(events) == []  # the client stays until the server ends the stream
        first.stop()
    finally:
        first.stop(signal.SIGKILL)
    second = serve("second", tmp_path, database_url=database_url,
                   model_base_url=fake_openai.base_url)
    try:
        # Another principal's ids answer like missing ones.
        foreign = second.client("bob").post(f"/runs/{body['runId']}/cancel", json={})
        assert foreign.status_code == 404
        with second.client().stream("GET", f"/runs/{body['runId']}/events",
                                    headers={"Last-Event-ID": head[-1][0]}) as resumed:
            assert resumed.status_code == 200
            cancelled = second.client().post(f"/runs/{body['runId']}/cancel", json={})
            assert cancelled.status_code == 202, cancelled.text
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert tail[-1][1]["outcome"] == {"type": "cancelled"}
        assert_valid_stream(head + tail)
        stored = second.client().get(f"/threads/{thread}/messages",
                                     params={"format": "agui"}).json()["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
        # The thread is free for the next run.
        fake_openai.push(text("Hello."))
        with second.client().stream("POST", "/run", json=run_body(thread, text="hi")) as nxt:
            assert read_until(sse_ids(nxt), "RUN_FINISHED")[-1][1]["type"] == "RUN_FINISHED"
    finally:
        second.stop()
