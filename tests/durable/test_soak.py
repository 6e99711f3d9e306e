"""The soak: 50 live durable runs across two replicas (one store, a real Redis), half of them
streaming a reply, half parked on a frontend tool, while each replica is drained (SIGTERM)
and restarted in turn, twice. Each run's client follows its stream and, when a stream ends
without its terminal event, resumes on whichever replica answers with the last id it got;
results are posted to whichever replica answers. Every run ends RUN_FINISHED, every client's
concatenated stream is valid, and every thread holds its exchange exactly once."""

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
from tests.agents.fake_openai import FakeOpenAI, Reply, calls, text
from tests.cluster.replicas import KEYS, Replica, redis_server
from tests.durable.processes import assert_valid_stream, run_body, serve, sse_ids

RUNS = 50
#: How long the whole soak may take before it fails.
DEADLINE = 150.0
#: A streaming run's reply: 30 words 0.1 s apart (it spans a drain of 1 s).
WORDS = tuple(f"w{i} " for i in range(30))
ENV = {
    "IOBRIDGE_DRAIN_SECONDS": "1",
    # A reply cut by a drain is re-executed once per drain it spans: four here at most.
    "IOBRIDGE_MAX_TAKEOVERS": "8",
}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _respond(body: dict[str, Any]) -> Reply:
    """Replies by what is asked, whichever replica asks and however often."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text("done")
    asked = str(last["content"])
    if asked.startswith("stream"):
        return Reply(text=WORDS, piece_delay=0.1)
    return calls(("c", "get_weather", '{"city":"Oslo"}'))


class Cluster:
    """The two replicas, restarted in place (a restart gets a new port)."""

    def __init__(self, tmp_path: Path, redis_url: str, database_url: str,
                 fake: FakeOpenAI) -> None:
        self.args = (tmp_path, redis_url, database_url, fake)
        self.prefix = f"s{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.replicas: dict[str, Replica] = {}
        self.starts = 0
        for name in "ab":
            self.start(name)

    def start(self, name: str) -> None:
        tmp_path, redis_url, database_url, fake = self.args
        self.starts += 1
        workdir = tmp_path / f"{name}{self.starts}"
        workdir.mkdir()
        replica = serve(name.upper(), workdir, database_url=database_url,
                        model_base_url=fake.base_url, redis_url=redis_url,
                        prefix=self.prefix, env=ENV)
        with self.lock:
            self.replicas[name] = replica

    def restart(self, name: str) -> str:
        """Drain ``name`` (SIGTERM), wait for it to exit, start it again."""
        with self.lock:
            replica = self.replicas.pop(name)
        output = replica.stop(signal.SIGTERM)
        assert replica.process.returncode == 0, output
        self.start(name)
        return output

    def urls(self, first: int) -> list[str]:
        with self.lock:
            urls = [r.url for r in self.replicas.values()]
        return urls[first % len(urls):] + urls[:first % len(urls)] if urls else []

    def stop(self) -> None:
        with self.lock:
            for replica in self.replicas.values():
                replica.stop(signal.SIGKILL)


class Client(threading.Thread):
    """One run's client: starts it, follows it to its end across drains, answers its tool."""

    def __init__(self, cluster: Cluster, index: int, post_at: float) -> None:
        super().__init__(daemon=True)
        self.cluster, self.index = cluster, index
        #: When the frontend answers (a parked run stays parked through some drains).
        self.post_at = post_at
        self.parked = index % 2 == 1
        self.thread = f"t-{uuid.uuid4().hex[:8]}"
        self.body = run_body(self.thread, text=f"{'tool' if self.parked else 'stream'} {index}")
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.posted = False
        self.error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return bool(self.events) and self.events[-1][1]["type"] in ("RUN_FINISHED", "RUN_ERROR")

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE
        attempt = self.index
        try:
            while not self.finished and time.monotonic() < deadline:
                for url in self.cluster.urls(attempt):
                    attempt += 1
                    if self._stream(url) or self.finished:
                        break
                if not self.finished:
                    time.sleep(0.2)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _client(self, url: str) -> httpx.Client:
        return httpx.Client(base_url=f"{url}/io-bridge", timeout=30,
                            headers={"Authorization": f"Bearer {KEYS['alice']}"})

    def _stream(self, url: str) -> bool:
        """Follow the run on ``url`` until its stream ends; False if it would not answer."""
        run_id = self.body["runId"]
        try:
            with self._client(url) as client:
                if not self.events:
                    request = client.build_request("POST", "/run", json=self.body)
                else:
                    request = client.build_request(
                        "GET", f"/runs/{run_id}/events",
                        headers={"Last-Event-ID": self.events[-1][0]})
                response = client.send(request, stream=True)
                try:
                    if response.status_code != 200:
                        return False
                    for event_id, event in sse_ids(response):
                        self.events.append((event_id, event))
                        if event["type"] == "TOOL_CALL_END" and self.parked and not self.posted:
                            self._post(event["toolCallId"])
                finally:
                    response.close()
        except httpx.HTTPError:
            return False
        return True

    def _post(self, call: str) -> None:
        """The frontend's result, to whichever replica answers."""
        url = f"/runs/{self.body['runId']}/tool-calls/{call}/result"
        time.sleep(max(0.0, self.post_at - time.monotonic()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for base in self.cluster.urls(self.index):
                try:
                    with self._client(base) as client:
                        answer = client.post(url, json={"result": {"tempC": self.index}})
                except httpx.HTTPError:
                    continue
                if answer.status_code in (200, 409):  # 409: an earlier try got through
                    self.posted = True
                    return
            time.sleep(0.2)


def test_fifty_runs_live_through_two_rolling_restarts_of_both_replicas(
    tmp_path: Path, redis_url: str, database_url: str, fake_openai: FakeOpenAI
) -> None:
    fake_openai.responder = _respond
    cluster = Cluster(tmp_path, redis_url, database_url, fake_openai)
    # The answers come while the replicas are drained and restarted one after the other.
    start = time.monotonic()
    clients = [Client(cluster, i, start + 2 + 0.5 * (i // 2)) for i in range(RUNS)]
    try:
        for client in clients:
            client.start()
            time.sleep(0.02)
        time.sleep(1.0)  # every run is live: streaming, or parked on its tool
        for name in "abab":
            cluster.restart(name)
            time.sleep(1.0)
        for client in clients:
            client.join(timeout=DEADLINE)
        assert [c.index for c in clients if c.error is not None] == [], [
            repr(c.error) for c in clients if c.error is not None]
        finished = [c for c in clients if c.finished and
                    c.events[-1][1]["type"] == "RUN_FINISHED"]
        assert len(finished) == RUNS, [
            (c.index, c.events[-1][1] if c.events else None) for c in clients
            if c not in finished]
        # The drains did cut runs: clients were caught up after a stream ended at a drain.
        caught_up = [c for c in clients
                     if any(e["type"] == "MESSAGES_SNAPSHOT" for _, e in c.events)]
        print(f"soak: {len(caught_up)} of {RUNS} clients caught up after a drain "
              f"({sum(not c.parked for c in caught_up)} streaming)")
        assert any(not c.parked for c in caught_up) and any(c.parked for c in caught_up)
        reader = cluster.replicas["a"].client()
        for client in clients:
            assert_valid_stream(client.events, thread_id=client.thread,
                                run_id=client.body["runId"])
            stored = reader.get(f"/threads/{client.thread}/messages",
                                params={"format": "agui"}).json()["messages"]
            ids = [m["id"] for m in stored]
            assert len(ids) == len(set(ids)), stored
            shape = [(m["role"], m.get("content")) for m in stored]
            if client.parked:
                assert [role for role, _ in shape] == ["user", "assistant", "tool", "assistant"]
                assert shape[2][1] == f'{{"tempC":{client.index}}}' and shape[3][1] == "done"
            else:
                assert shape == [("user", f"stream {client.index}"),
                                 ("assistant", "".join(WORDS))], shape
    finally:
        cluster.stop()
