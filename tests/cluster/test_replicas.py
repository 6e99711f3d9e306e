"""Two ``iobridge serve`` replicas on one Redis and one PostgreSQL act as one backend."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.cluster.replicas import (
    OWNER_LOST,
    Replica,
    read_until,
    run_body,
    sse,
    start_replica,
)

pytestmark = pytest.mark.timeout(90)


def _thread() -> str:
    return f"thread-{uuid.uuid4().hex[:10]}"


def _seqs(events: list[tuple[int, dict[str, object]]]) -> list[int]:
    return [seq for seq, _ in events]


def test_a_tool_result_posted_to_b_continues_the_run_on_a(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    body = run_body(_thread())
    with a.client().stream("POST", "/run", json=body) as response:
        assert response.status_code == 200
        events = sse(response)
        head = read_until(events, "TOOL_CALL_END")
        call_id = head[-1][1]["toolCallId"]
        path = f"/runs/{body['runId']}/tool-calls/{call_id}/result"
        # Ownership first: bob's post names a run he does not have, on either replica.
        foreign = b.client("bob").post(path, json={"result": {"temp": 21}})
        missing = b.client().post(f"/runs/no-such-run/tool-calls/{call_id}/result",
                                  json={"result": 1})
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
        unknown_call = b.client().post(f"/runs/{body['runId']}/tool-calls/nope/result",
                                       json={"result": 1})
        assert unknown_call.status_code == 404
        assert unknown_call.json()["error"]["code"] == "TOOL_CALL_NOT_FOUND"
        accepted = b.client().post(path, json={"result": {"temp": 21}})
        assert accepted.status_code == 200, accepted.text
        assert accepted.json() == {"status": "accepted"}
        # A duplicate is refused exactly once, wherever it lands.
        for replica in (b, a):
            again = replica.client().post(path, json={"result": {"temp": 99}})
            assert again.status_code == 409
            assert again.json()["error"]["code"] == "TOOL_RESULT_ALREADY_SUBMITTED"
        tail = read_until(events, "RUN_FINISHED")
    results = [e for _, e in tail if e["type"] == "TOOL_CALL_RESULT"]
    assert len(results) == 1 and "21" in str(results[0]["content"])
    assert "99" not in str(results[0]["content"])
    assert _seqs(head + tail) == list(range(1, len(head) + len(tail) + 1))
    messages = b.client().get(f"/threads/{body['threadId']}/messages",
                              params={"format": "agui"}).json()
    assert any(m.get("role") == "tool" and "21" in str(m.get("content")) for m in
               messages["messages"])


def test_a_client_dropping_from_a_resumes_on_b_with_every_event_once(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    body = run_body(_thread())
    with a.client().stream("POST", "/run", json=body) as response:
        head = read_until(sse(response), "TOOL_CALL_END")
    # The client drops here (the run waits for its tool, within the detach grace).
    last = head[-1][0]
    call_id = head[-1][1]["toolCallId"]
    run_path = f"/runs/{body['runId']}"
    with b.client().stream("GET", f"{run_path}/events",
                           headers={"Last-Event-ID": str(last)}) as resumed:
        assert resumed.status_code == 200
        events = sse(resumed)
        posted = b.client().post(f"{run_path}/tool-calls/{call_id}/result",
                                 json={"result": "sunny"})
        assert posted.status_code == 200
        tail = read_until(events, "RUN_FINISHED")
        assert next(events, None) is None  # nothing after the terminal event
    seqs = _seqs(head) + _seqs(tail)
    assert seqs == list(range(1, len(seqs) + 1))  # every event exactly once, in order
    # The whole run replayed from B's shared log equals what the client assembled.
    with b.client().stream("GET", f"{run_path}/events") as replay:
        assert [e for _, e in sse(replay)] == [e for _, e in head + tail]
    # Resume cursors are checked the same way on either replica.
    for replica in (a, b):
        bad = replica.client().get(f"{run_path}/events", headers={"Last-Event-ID": "x1"})
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "INVALID_CURSOR"
        beyond = replica.client().get(f"{run_path}/events",
                                      headers={"Last-Event-ID": str(len(seqs) + 5)})
        assert beyond.status_code == 400
        foreign = replica.client("bob").get(f"{run_path}/events")
        assert foreign.status_code == 404
        assert foreign.json()["error"]["code"] == "RUN_NOT_FOUND"


def test_cancel_via_b_ends_the_run_on_a_with_one_cancelled_outcome(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    body = run_body(_thread())
    with a.client().stream("POST", "/run", json=body) as response:
        events = sse(response)
        head = read_until(events, "TOOL_CALL_END")
        assert b.client("bob").post(f"/runs/{body['runId']}/cancel", json={}).status_code == 404
        cancelled = b.client().post(f"/runs/{body['runId']}/cancel", json={})
        assert cancelled.status_code == 202
        assert cancelled.json() == {"status": "cancelling"}
        rest = list(events)
    terminals = [e for _, e in head + rest if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    assert terminals == [{"type": "RUN_FINISHED", "threadId": body["threadId"],
                          "runId": body["runId"], "outcome": {"type": "cancelled"}}]
    again = b.client().post(f"/runs/{body['runId']}/cancel", json={})
    assert again.status_code == 200
    assert again.json() == {"status": "ended"}


def test_a_second_run_on_the_thread_via_b_is_thread_busy_while_a_runs(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    thread = _thread()
    body = run_body(thread)
    with a.client().stream("POST", "/run", json=body) as response:
        events = sse(response)
        read_until(events, "TOOL_CALL_END")
        busy = b.client().post("/run", json=run_body(thread))
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "THREAD_BUSY"
        same_id = b.client().post("/run", json=run_body(_thread(), body["runId"]))
        assert same_id.status_code == 409
        assert same_id.json()["error"]["code"] == "RUN_ALREADY_RUNNING"
        assert a.client().post(f"/runs/{body['runId']}/cancel", json={}).status_code == 202
        assert read_until(events, "RUN_FINISHED")[-1][1]["outcome"] == {"type": "cancelled"}
    # The lock was released once the run was stored: B may run on the thread at once.
    with b.client().stream("POST", "/run", json=run_body(thread, text="hello")) as after:
        assert after.status_code == 200
        assert read_until(sse(after), "RUN_FINISHED")[-1][1]["type"] == "RUN_FINISHED"
    # Nothing of the refused runs was stored: the thread holds two runs' user messages.
    stored = b.client().get(f"/threads/{thread}/messages", params={"format": "agui"}).json()
    users = [m for m in stored["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["get_weather city=Oslo", "hello"]


def test_sigkill_of_the_owner_ends_its_followers_with_run_lost(
    pair: tuple[Replica, Replica], tmp_path: Path, redis_url: str, database_url: str,
    prefix: str,
) -> None:
    _, b = pair
    c = start_replica("C", tmp_path, redis_url=redis_url, database_url=database_url,
                      prefix=prefix)
    thread = _thread()
    body = run_body(thread)
    try:
        with c.client().stream("POST", "/run", json=body) as response:
            head = read_until(sse(response), "TOOL_CALL_END")
        with b.client().stream("GET", f"/runs/{body['runId']}/events",
                               headers={"Last-Event-ID": str(head[-1][0])}) as follower:
            assert follower.status_code == 200
            c.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            tail = list(sse(follower))
            lost_after = time.monotonic() - killed
    finally:
        c.stop(signal.SIGKILL)
    assert [e for _, e in tail] == [
        {"type": "RUN_ERROR", "message": "The replica running this run stopped.",
         "code": "RUN_LOST"}
    ]
    assert tail[0][0] == head[-1][0] + 1
    print(f"RUN_LOST {lost_after:.2f} s after SIGKILL (bound {OWNER_LOST} s + a heartbeat)")
    # A tool result for the lost run is refused, not silently dropped.
    late = b.client().post(f"/runs/{body['runId']}/tool-calls/{head[-1][1]['toolCallId']}"
                           "/result", json={"result": 1})
    assert late.status_code == 503
    assert late.json()["error"]["code"] == "RUN_OWNER_UNAVAILABLE"
    # The thread lock expires within the same bound: the thread is usable again.
    deadline = time.monotonic() + 10 * OWNER_LOST
    while True:
        started = b.client().post("/run", json=run_body(thread, text="hello again"))
        if started.status_code != 409:
            break
        assert started.json()["error"]["code"] == "THREAD_BUSY"
        assert time.monotonic() < deadline, "the thread lock never expired"
        time.sleep(0.1)
    assert started.status_code == 200
    stored = b.client().get(f"/threads/{thread}/messages", params={"format": "agui"}).json()
    roles = [m["role"] for m in stored["messages"]]
    # The lost run stored its user message at RUN_STARTED and nothing half-made after it.
    assert roles[:1] == ["user"]
    assert "tool" not in roles[:2]


def test_readyz_checks_redis_and_healthz_does_not(pair: tuple[Replica, Replica]) -> None:
    a, _ = pair
    with httpx.Client(base_url=a.url, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200


def test_a_replica_refuses_to_start_without_redis(
    tmp_path: Path, database_url: str, prefix: str
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(pytest.fail.Exception) as failed:
        start_replica("X", tmp_path, redis_url=f"redis://127.0.0.1:{port}/0",
                      database_url=database_url, prefix=prefix)
    assert "cannot connect to Redis" in str(failed.value)
    assert "Traceback" not in str(failed.value)
