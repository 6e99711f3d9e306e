"""Busy-thread strategies on one server (SQLite and PostgreSQL), over loopback HTTP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from tests.branches.conftest import client
from tests.branches.scenarios import (
    Stream,
    body,
    check_overlap,
    first_body,
    overlap,
    park_or_stream,
    stored,
)
from tests.helpers import LiveServer

from iobridge.auth import DEFAULT_RESOURCE

Serve = Callable[..., LiveServer]


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def _thread() -> str:
    return f"th-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("first", ["parked", "streaming"])
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_two_overlapping_runs_per_strategy(server: Serve, strategy: str, first: str) -> None:
    live = server()
    with client(live) as http:
        thread = _thread()
        first_events, second, messages, bodies = overlap(http, http, thread, first, strategy)
        check_overlap(first_events, second, messages, bodies, first, strategy)
    assert live.runtime.active_runs == 0
    assert len(live.runtime.pending) == 0


@pytest.mark.parametrize("where", ["agent", "server"])
def test_the_strategy_of_the_agent_or_the_server_applies(server: Serve, where: str) -> None:
    from iobridge.agents.demo import DemoAgent

    if where == "agent":
        patient = DemoAgent()
        patient.id, patient.multitask_strategy = "patient", "rollback"
        live = server(python_agents=[patient])
        second = body(_thread(), "second", agentId="patient")
    else:
        live = server(multitask_strategy="rollback")
        second = body(_thread(), "second")
    thread = second["threadId"]
    with client(live) as http:
        a = first_body(thread, "parked")
        with http.stream("POST", "/run", json=a) as response:
            s1 = Stream(response)
            park_or_stream(s1, "parked")
            with http.stream("POST", "/run", json=second) as response2:
                s2 = Stream(response2)
                assert s2.first_frame() == ": queued"
                assert s1.rest()[-1]["outcome"] == {"type": "cancelled"}
                assert s2.rest()[-1]["type"] == "RUN_FINISHED"
        assert [m["role"] for m in stored(http, thread)] == ["user", "assistant"]
        # The request's own strategy wins over both.
        with http.stream("POST", "/run", json=first_body(thread, "parked")) as response:
            s1 = Stream(response)
            park_or_stream(s1, "parked")
            refused = http.post("/run", json={**second, "runId": "r-x", "forwardedProps": {
                **second["forwardedProps"], "multitaskStrategy": "reject"}})
            assert refused.status_code == 409
            assert http.post(f"/runs/{s1.events[0]['runId']}/cancel", json={}).status_code == 202
            s1.rest()


def test_an_unknown_strategy_is_a_400_naming_the_four(server: Serve) -> None:
    live = server()
    with client(live) as http:
        thread = _thread()
        refused = http.post("/run", json=body(thread, "x", multitaskStrategy="supersede"))
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "INVALID_MULTITASK_STRATEGY"
        for name in ("reject", "enqueue", "interrupt", "rollback"):
            assert f"'{name}'" in error["message"]
        assert http.get(f"/threads/{thread}").status_code == 404  # nothing stored


def test_the_queue_bound_answers_429_and_queued_runs_that_go_store_nothing(
    server: Serve,
) -> None:
    live = server(max_queued_runs_per_thread=2)
    with client(live) as http:
        thread = _thread()
        a = first_body(thread, "parked")
        with http.stream("POST", "/run", json=a) as response:
            s1 = Stream(response)
            call = park_or_stream(s1, "parked")
            queued = [body(thread, f"queued {i}", multitaskStrategy="enqueue") for i in range(3)]
            assert live.runtime.admission.queued((DEFAULT_RESOURCE, thread)) == 0
            with http.stream("POST", "/run", json=queued[0]) as r1:
                q1 = Stream(r1)
                assert q1.first_frame() == ": queued"
                with http.stream("POST", "/run", json=queued[1]) as r2:
                    q2 = Stream(r2)
                    assert q2.first_frame() == ": queued"
                    assert live.runtime.admission.queued((DEFAULT_RESOURCE, thread)) == 2
                    full = http.post("/run", json=queued[2])
                    assert full.status_code == 429
                    assert full.json()["error"]["code"] == "TOO_MANY_QUEUED_RUNS"
                    # A queued run cancelled before it starts ends with RUN_ERROR.
                    cancelled = http.post(f"/runs/{queued[0]['runId']}/cancel", json={})
                    assert cancelled.status_code == 202
                    assert q1.rest() == [{"type": "RUN_ERROR", "code": "RUN_CANCELLED",
                                          "message": "The run was cancelled before it started."}]
                # The second queued run's client left before it started: once the server
                # saw it go, it left the queue.
                wait_for(lambda: live.runtime.admission.queued((DEFAULT_RESOURCE, thread)) == 0)
            assert live.runtime.active_runs == 1
            posted = http.post(f"/runs/{a['runId']}/tool-calls/{call}/result",
                               json={"result": {"temperature": 21}})
            assert posted.status_code == 200
            assert s1.rest()[-1]["type"] == "RUN_FINISHED"
        messages = stored(http, thread)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[0]["id"] == a["messages"][0]["id"]
        # The thread is free: a next run goes at once.
        after = http.post("/run", json=body(thread, "after", multitaskStrategy="enqueue"))
        assert after.status_code == 200
        assert ": queued" not in after.text
    assert live.runtime.active_runs == 0


def test_an_enqueued_run_sees_the_thread_as_the_runs_ahead_left_it(server: Serve) -> None:
    """Three runs queue in order; each one's history holds the runs before it."""
    live = server()
    with client(live) as http:
        thread = _thread()
        a = first_body(thread, "streaming")
        later = [body(thread, f"next {i}", multitaskStrategy="enqueue") for i in range(2)]
        with http.stream("POST", "/run", json=a) as response:
            s1 = Stream(response)
            park_or_stream(s1, "streaming")
            with http.stream("POST", "/run", json=later[0]) as r1, \
                    http.stream("POST", "/run", json=later[1]) as r2:
                q1, q2 = Stream(r1), Stream(r2)
                assert q1.first_frame() == ": queued"
                assert q2.first_frame() == ": queued"
                s1.rest()
                q1.rest()
                q2.rest()
        users = [m["content"] for m in stored(http, thread) if m["role"] == "user"]
        assert users == ["stream please", "next 0", "next 1"]


def test_interrupt_of_a_run_that_is_still_queued_leaves_the_queue_alone(
    server: Serve,
) -> None:
    """An interrupt stops the run holding the thread, not the runs enqueued behind it."""
    live = server()
    with client(live) as http:
        thread = _thread()
        a = first_body(thread, "parked")
        queued = body(thread, "queued", multitaskStrategy="enqueue")
        urgent = body(thread, "urgent", multitaskStrategy="interrupt")
        with http.stream("POST", "/run", json=a) as response:
            s1 = Stream(response)
            park_or_stream(s1, "parked")
            with http.stream("POST", "/run", json=queued) as rq, \
                    http.stream("POST", "/run", json=urgent) as ru:
                q, u = Stream(rq), Stream(ru)
                assert q.first_frame() == ": queued"
                assert u.first_frame() == ": queued"
                assert s1.rest()[-1]["outcome"] == {"type": "cancelled"}
                assert u.rest()[-1]["type"] == "RUN_FINISHED"
                assert q.rest()[-1]["type"] == "RUN_FINISHED"
        users = [m["content"] for m in stored(http, thread) if m["role"] == "user"]
        assert users == ["get_weather city=Oslo", "urgent", "queued"]


