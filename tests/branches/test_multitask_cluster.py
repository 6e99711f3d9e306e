"""Busy-thread strategies across two replicas (real Redis, one PostgreSQL): the first run on
replica A, the second on replica B."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from tests.branches.scenarios import (
    Stream,
    body,
    check_overlap,
    first_body,
    overlap,
    park_or_stream,
    stored,
)


@pytest.mark.parametrize("first", ["parked", "streaming"])
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_two_overlapping_runs_on_two_replicas(
    replicas: tuple[Any, Any, Any], strategy: str, first: str
) -> None:
    a, b, _ = replicas
    thread = f"cl-{uuid.uuid4().hex[:10]}"
    first_events, second, messages, bodies = overlap(
        a.client(), b.client(), thread, first, strategy
    )
    check_overlap(first_events, second, messages, bodies, first, strategy)


def test_the_queue_bound_holds_across_replicas(replicas: tuple[Any, Any, Any]) -> None:
    """Three runs wait (on both replicas); the fourth gets 429 and nothing is stored; a
    queued run cancelled through the other replica, and one whose client left, store
    nothing."""
    a, b, shared = replicas
    thread = f"cl-{uuid.uuid4().hex[:10]}"
    first = first_body(thread, "parked")
    waiting = [body(thread, f"queued {i}", multitaskStrategy="enqueue") for i in range(4)]
    with a.client().stream("POST", "/run", json=first) as response:
        s1 = Stream(response)
        call = park_or_stream(s1, "parked")
        with a.client().stream("POST", "/run", json=waiting[0]) as r0, \
                b.client().stream("POST", "/run", json=waiting[1]) as r1:
            q0, q1 = Stream(r0), Stream(r1)
            assert q0.first_frame() == ": queued"
            assert q1.first_frame() == ": queued"
            with b.client().stream("POST", "/run", json=waiting[2]) as r2:
                assert Stream(r2).first_frame() == ": queued"
                assert shared.queued(thread) == 3
                full = a.client().post("/run", json=waiting[3])
                assert full.status_code == 429
                assert full.json()["error"]["code"] == "TOO_MANY_QUEUED_RUNS"
            # waiting[2]'s client left: once replica B saw it go, it left the shared queue.
            deadline = time.monotonic() + 10
            while shared.queued(thread) != 2:
                assert time.monotonic() < deadline, "the abandoned run stayed queued"
                time.sleep(0.02)
            # waiting[1] is cancelled through replica A.
            cancelled = a.client().post(f"/runs/{waiting[1]['runId']}/cancel", json={})
            assert cancelled.status_code == 202, cancelled.text
            assert q1.rest()[-1]["code"] == "RUN_CANCELLED"
            assert shared.queued(thread) == 1
            posted = a.client().post(f"/runs/{first['runId']}/tool-calls/{call}/result",
                                     json={"result": {"temperature": 21}})
            assert posted.status_code == 200
            assert s1.rest()[-1]["type"] == "RUN_FINISHED"
            assert q0.rest()[-1]["type"] == "RUN_FINISHED"
    users = [m["content"] for m in stored(b.client(), thread) if m["role"] == "user"]
    assert users == ["get_weather city=Oslo", "queued 0"]
