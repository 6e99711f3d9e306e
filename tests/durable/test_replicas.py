"""Two replicas on one store and a real Redis: a run parked on a frontend tool outlives the
replica that owned it — SIGKILLed (the survivor continues it when the result arrives,
exactly one claimant) or SIGTERMed in a rolling restart (its parked runs are handed off)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.agents.fake_openai import FakeOpenAI, Reply, calls, text
from tests.backends import postgres_url
from tests.cluster.replicas import (
    KEYS,
    Replica,
    postgres_database,
    read_until,
    redis_server,
)
from tests.durable.processes import assert_valid_stream, run_body, serve, sse_ids

from iobridge.store.migrate import upgrade


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'durable.db'}"
        asyncio.run(upgrade(url))
        yield url
        return
    postgres_url()
    with postgres_database() as url:
        asyncio.run(upgrade(url))
        yield url


def _pair(tmp_path: Path, redis_url: str, database_url: str,
          fake: FakeOpenAI) -> tuple[Replica, Replica]:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    a = serve("A", tmp_path / "a", database_url=database_url, model_base_url=fake.base_url,
              redis_url=redis_url, prefix=prefix)
    b = serve("B", tmp_path / "b", database_url=database_url, model_base_url=fake.base_url,
              redis_url=redis_url, prefix=prefix)
    return a, b


@pytest.fixture
def workdirs(tmp_path: Path) -> Path:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return tmp_path


def _stored(replica: Replica, thread: str) -> list[dict[str, Any]]:
    response = replica.client().get(f"/threads/{thread}/messages", params={"format": "agui"})
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def test_owner_sigkilled_while_parked_the_result_on_the_survivor_finishes_the_run(
    workdirs: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}'), say="Checking."),
                     text("Sunny."))
    a, b = _pair(workdirs, redis_url, database_url, fake_openai)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    try:
        with a.client().stream("POST", "/run", json=body) as response:
            events = sse_ids(response)  # kept: a client that goes away cancels its run
            head = read_until(events, "TOOL_CALL_END")
            time.sleep(0.3)  # the park point's write
            a.process.send_signal(signal.SIGKILL)
        a.stop(signal.SIGKILL)
        call = head[-1][1]["toolCallId"]
        url = f"/runs/{body['runId']}/tool-calls/{call}/result"
        # Two clients post at once: exactly one result is taken, the other is refused.
        answers: list[httpx.Response] = []

        def post(value: int) -> None:
            with httpx.Client(base_url=f"{b.url}/io-bridge", timeout=20,
                              headers={"Authorization": f"Bearer {KEYS['alice']}"}) as c:
                answers.append(c.post(url, json={"result": {"tempC": value}}))

        posts = [threading.Thread(target=post, args=(v,)) for v in (21, 22)]
        for p in posts:
            p.start()
        for p in posts:
            p.join()
        assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
        with b.client().stream("GET", f"/runs/{body['runId']}/events",
                               headers={"Last-Event-ID": head[-1][0]}) as resumed:
            assert resumed.status_code == 200
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(head + tail)
        stored = _stored(b, thread)
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        taken = next(r for r in answers if r.status_code == 200)
        assert taken.status_code == 200 and stored[2]["content"] in ('{"tempC":21}',
                                                                      '{"tempC":22}')
        assert len(fake_openai.requests) == 2
    finally:
        b.stop()


def test_a_rolling_restart_hands_off_ten_parked_runs(
    workdirs: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    count = 10
    for _ in range(count):
        fake_openai.push(calls((f"c-{uuid.uuid4().hex[:6]}", "get_weather", '{"city":"Oslo"}')))
    a, b = _pair(workdirs, redis_url, database_url, fake_openai)
    runs: list[tuple[str, dict[str, Any], list[tuple[int, dict[str, Any]]]]] = []
    try:
        streams = []
        for _ in range(count):
            thread = f"t-{uuid.uuid4().hex[:8]}"
            body = run_body(thread)
            response = a.client().send(
                a.client().build_request("POST", "/run", json=body), stream=True)
            events = sse_ids(response)
            streams.append((response, events))
            runs.append((thread, body, read_until(events, "TOOL_CALL_END")))
        fake_openai.push(*[text("Done.") for _ in range(count)])
        time.sleep(0.5)
        a.process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        for response, events in streams:
            assert list(events) == []  # ended at the point: no RUN_ERROR SERVER_SHUTDOWN
            response.close()
        a.process.wait(timeout=20)  # within drain_seconds (10) + a bound
        output = a.stop()
        assert a.process.returncode == 0, output
        assert time.monotonic() - stopped < 10
        assert "Traceback" not in output, output
        for thread, body, head in runs:
            call = head[-1][1]["toolCallId"]
            posted = b.client().post(f"/runs/{body['runId']}/tool-calls/{call}/result",
                                     json={"result": "21"})
            assert posted.status_code == 200, posted.text
            with b.client().stream("GET", f"/runs/{body['runId']}/events",
                                   headers={"Last-Event-ID": head[-1][0]}) as resumed:
                tail = read_until(sse_ids(resumed), "RUN_FINISHED")
            assert_valid_stream(head + tail)
            assert [m["role"] for m in _stored(b, thread)] == ["user", "assistant", "tool",
                                                               "assistant"]
    finally:
        a.stop(signal.SIGKILL)
        b.stop()


def test_a_result_forwarded_to_a_live_owner_is_not_asked_again_when_it_dies(
    workdirs: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    """B stores the result before it forwards it to A; A is SIGKILLed right after it got it
    (before its run's next point, or after): the continued run has the result either way."""
    fake_openai.push(calls(("c1", "get_weather", '{"city":"Oslo"}')),
                     Reply(text=("Sunny ", "in ", "Oslo."), delay=1.0), text("Sunny in Oslo."))
    a, b = _pair(workdirs, redis_url, database_url, fake_openai)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    try:
        with a.client().stream("POST", "/run", json=body) as response:
            events = sse_ids(response)
            head = read_until(events, "TOOL_CALL_END")
            time.sleep(0.3)
            call = head[-1][1]["toolCallId"]
            posted = b.client().post(f"/runs/{body['runId']}/tool-calls/{call}/result",
                                     json={"result": {"tempC": 21}})
            assert posted.status_code == 200, posted.text
            head += read_until(events, "TOOL_CALL_RESULT")
            a.process.send_signal(signal.SIGKILL)  # A asks the model (1 s): killed meanwhile
        a.stop(signal.SIGKILL)
        with b.client().stream("GET", f"/runs/{body['runId']}/events",
                               headers={"Last-Event-ID": head[-1][0]}) as resumed:
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(head + tail)
        stored = _stored(b, thread)
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[2]["content"] == '{"tempC":21}' and stored[3]["content"] == "Sunny in Oslo."
    finally:
        a.stop(signal.SIGKILL)
        b.stop()
