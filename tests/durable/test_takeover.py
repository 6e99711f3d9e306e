"""Mid-reply takeover: two ``iobridge serve`` on one store and a real Redis, a model agent on
the fake OpenAI server streaming a slow reply. The owner is SIGKILLed mid-reply; the other
replica claims the run and re-executes it from its last durable point. The follower on the
surviving replica, and a client that was streaming from the dead owner and resumes with the
last id it got, each see a valid stream that ends in the run's real RUN_FINISHED; the thread
holds the exchange once."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.agents.fake_openai import FakeOpenAI, Reply, text
from tests.cluster.replicas import KEYS, OWNER_LOST, Replica, read_until, redis_server
from tests.durable.processes import assert_valid_stream, run_body, serve, sse_ids

#: The reply the owner streams when it is killed: 40 words, 0.1 s apart.
SLOW = Reply(text=tuple(f"w{i} " for i in range(40)), piece_delay=0.1)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _replicas(tmp_path: Path, redis_url: str, database_url: str, fake: FakeOpenAI,
              names: str = "ab") -> list[Replica]:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    out = []
    for name in names:
        (tmp_path / name).mkdir()
        out.append(serve(name.upper(), tmp_path / name, database_url=database_url,
                         model_base_url=fake.base_url, redis_url=redis_url, prefix=prefix))
    return out


def _contents(events: list[tuple[str, dict[str, Any]]]) -> int:
    return sum(e["type"] == "TEXT_MESSAGE_CONTENT" for _, e in events)


def _stored(replica: Replica, thread: str) -> list[dict[str, Any]]:
    response = replica.client().get(f"/threads/{thread}/messages", params={"format": "agui"})
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def test_owner_sigkilled_mid_reply_the_survivor_re_executes_and_every_stream_stays_valid(
    tmp_path: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(SLOW, text("Sunny ", "in ", "Oslo."))
    a, b = _replicas(tmp_path, redis_url, database_url, fake_openai)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    run = body["runId"]
    try:
        with a.client().stream("POST", "/run", json=body) as direct:
            on_a = sse_ids(direct)
            seen_on_a = read_until(on_a, "TEXT_MESSAGE_CONTENT")
            # The follower on B, through the shared log.
            with b.client().stream("GET", f"/runs/{run}/events") as followed:
                on_b = sse_ids(followed)
                seen_on_b = read_until(on_b, "TEXT_MESSAGE_CONTENT")
                while _contents(seen_on_b) < 5:
                    seen_on_b.append(next(on_b))
                while _contents(seen_on_a) < 8:
                    seen_on_a.append(next(on_a))
                a.process.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                rest_on_b = list(on_b)
                took = time.monotonic() - killed
        a.stop(signal.SIGKILL)
        # The follower on B: what A streamed before it died, then the takeover, one stream.
        whole = seen_on_b + rest_on_b
        assert_valid_stream(whole, thread_id=thread, run_id=run)
        kinds = [e["type"] for _, e in rest_on_b]
        # What A had open is closed, the conversation at the durable point replaces A's
        # partial reply, and the re-executed step streams as a new message.
        assert "TEXT_MESSAGE_END" in kinds[: kinds.index("MESSAGES_SNAPSHOT")]
        assert kinds[-1] == "RUN_FINISHED"
        # The re-executed step streams after the snapshot, or, when B concluded the run
        # before this follower caught up (a loaded machine), is in the snapshot itself.
        at = kinds.index("MESSAGES_SNAPSHOT")
        replayed = "".join(e["delta"] for _, e in rest_on_b[at:]
                           if e["type"] == "TEXT_MESSAGE_CONTENT")
        snapshot = rest_on_b[at][1]["messages"]
        assert replayed.endswith("Sunny in Oslo.") or (
            not replayed and snapshot[-1].get("content") == "Sunny in Oslo."
        ), [e for _, e in rest_on_b]
        assert took < OWNER_LOST + 10, took
        # The client that streamed from A resumes on B with the last id A sent it.
        with b.client().stream("GET", f"/runs/{run}/events",
                               headers={"Last-Event-ID": seen_on_a[-1][0]}) as resumed:
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(seen_on_a + tail, thread_id=thread, run_id=run)
        assert tail[-1][1] == rest_on_b[-1][1]
        # And with any earlier id it got.
        for cut in (1, 2, len(seen_on_a) // 2):
            with b.client().stream("GET", f"/runs/{run}/events",
                                   headers={"Last-Event-ID": seen_on_a[cut - 1][0]}) as again:
                tail = read_until(sse_ids(again), "RUN_FINISHED")
            assert_valid_stream(seen_on_a[:cut] + tail, thread_id=thread, run_id=run)
        stored = _stored(b, thread)
        assert [(m["role"], m.get("content")) for m in stored] == [
            ("user", "Weather in Oslo?"), ("assistant", "Sunny in Oslo.")]
        assert len(fake_openai.requests) == 2
    finally:
        a.stop(signal.SIGKILL)
        b.stop()


def test_exactly_one_of_two_survivors_takes_a_killed_owner_s_run_over(
    tmp_path: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    """Followers on B and C both see A's heartbeat expire and try to continue the run: one
    claims it (the checkpoint's epoch compare-and-set), the other follows it there."""
    fake_openai.push(SLOW, text("Only ", "once."))
    a, b, c = _replicas(tmp_path, redis_url, database_url, fake_openai, "abc")
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    run = body["runId"]
    results: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    try:
        with a.client().stream("POST", "/run", json=body) as direct:
            on_a = sse_ids(direct)  # kept: a client that goes away cancels its run
            read_until(on_a, "TEXT_MESSAGE_CONTENT")

            def follow(replica: Replica) -> None:
                with httpx.Client(base_url=f"{replica.url}/io-bridge", timeout=30, headers={
                        "Authorization": f"Bearer {KEYS['alice']}"}) as client, \
                        client.stream("GET", f"/runs/{run}/events") as response:
                    results[replica.name] = read_until(sse_ids(response), "RUN_FINISHED")

            followers = [threading.Thread(target=follow, args=(r,)) for r in (b, c)]
            for follower in followers:
                follower.start()
            time.sleep(1.0)
            a.process.send_signal(signal.SIGKILL)
            for follower in followers:
                follower.join(timeout=40)
        assert set(results) == {"B", "C"}
        for name in ("B", "C"):
            assert_valid_stream(results[name], thread_id=thread, run_id=run)
            assert results[name][-1][1]["type"] == "RUN_FINISHED"
        assert [(m["role"], m.get("content")) for m in _stored(b, thread)] == [
            ("user", "Weather in Oslo?"), ("assistant", "Only once.")]
        # The model was asked once by A and once by the one that took the run over.
        assert len(fake_openai.requests) == 2
    finally:
        for replica in (a, b, c):
            replica.stop(signal.SIGKILL)


def _answered(replica: Replica, thread: str, seconds: float = 30) -> list[dict[str, Any]]:
    """The thread once its run's answer is stored."""
    deadline = time.monotonic() + seconds
    while True:
        stored = _stored(replica, thread)
        if [m["role"] for m in stored][-1:] == ["assistant"] or time.monotonic() > deadline:
            return stored
        time.sleep(0.2)


def test_a_killed_owner_s_run_nobody_follows_is_continued_by_a_survivor(
    tmp_path: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    """No follower anywhere notices: the survivors' sweep of lost replicas continues the
    run, and a client that comes back later with the dead owner's last id is caught up."""
    fake_openai.push(SLOW, text("Swept ", "up."))
    a, b = _replicas(tmp_path, redis_url, database_url, fake_openai)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    try:
        with a.client().stream("POST", "/run", json=body) as direct:
            on_a = sse_ids(direct)
            seen = read_until(on_a, "TEXT_MESSAGE_CONTENT")
            while _contents(seen) < 4:
                seen.append(next(on_a))
            a.process.send_signal(signal.SIGKILL)
        a.stop(signal.SIGKILL)
        stored = _answered(b, thread)
        assert [(m["role"], m.get("content")) for m in stored] == [
            ("user", "Weather in Oslo?"), ("assistant", "Swept up.")]
        with b.client().stream("GET", f"/runs/{body['runId']}/events",
                               headers={"Last-Event-ID": seen[-1][0]}) as resumed:
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(seen + tail, thread_id=thread, run_id=body["runId"])
        assert len(fake_openai.requests) == 2
    finally:
        a.stop(signal.SIGKILL)
        b.stop()


def test_a_drained_replica_hands_its_streaming_run_to_a_peer(
    tmp_path: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    """SIGTERM while a reply streams longer than ``drain_seconds``: the run stops (no
    RUN_ERROR SERVER_SHUTDOWN), the replica exits at once, its peer continues the run from
    its last durable point, and the client resumes there."""
    fake_openai.push(SLOW, text("Handed ", "over."))
    prefix = f"d{uuid.uuid4().hex[:8]}"
    replicas = []
    for name in "ab":
        (tmp_path / name).mkdir()
        replicas.append(serve(name.upper(), tmp_path / name, database_url=database_url,
                              model_base_url=fake_openai.base_url, redis_url=redis_url,
                              prefix=prefix, env={"IOBRIDGE_DRAIN_SECONDS": "1"}))
    a, b = replicas
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_body(thread)
    try:
        with a.client().stream("POST", "/run", json=body) as direct:
            on_a = sse_ids(direct)
            seen = read_until(on_a, "TEXT_MESSAGE_CONTENT")
            a.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            seen += list(on_a)  # the stream ends without a terminal event
        assert a.process.wait(timeout=20) == 0
        assert time.monotonic() - stopped < 1 + 10  # drain_seconds + a bound
        assert all(e["type"] != "RUN_ERROR" for _, e in seen), seen[-1]
        # B continues it by itself (A handed it over), before any client comes back.
        assert [(m["role"], m.get("content")) for m in _answered(b, thread)] == [
            ("user", "Weather in Oslo?"), ("assistant", "Handed over.")]
        with b.client().stream("GET", f"/runs/{body['runId']}/events",
                               headers={"Last-Event-ID": seen[-1][0]}) as resumed:
            tail = read_until(sse_ids(resumed), "RUN_FINISHED")
        assert_valid_stream(seen + tail, thread_id=thread, run_id=body["runId"])
    finally:
        a.stop(signal.SIGKILL)
        b.stop()
