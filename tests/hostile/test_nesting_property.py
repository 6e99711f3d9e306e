"""Every JSON field a client or an upstream sends, nested to every depth the parser takes.

Every field is tried at the depths around every limit (ours, orjson's encoder and decoder),
and Hypothesis picks fields and depths from 1 to past orjson's decoding limit (1024); the
server (a real uvicorn on loopback, the demo agent and an upstream AG-UI agent) must answer
with a 4xx or a valid run, never a 5xx, and keep the connection alive: the same connection
serves every request of the test (on af03d35 ``state`` nested 255 levels answered 500 and
dropped the connection, a tool result nested ~1,000 too, a structuredOutput schema nested
100 too, and an upstream RUN_FINISHED whose result nested past 254 levels ended the run with
no terminal event).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.agents.upstream_apps import Script, scripted_upstream
from tests.helpers import LiveServer, parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.upstream import AgUiUpstreamAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

from .test_nesting import HOLE, RUN_FIELDS, WEATHER, encoded_arguments, nest, run_with, splice

BASE = "/io-bridge"
UPSTREAM_FIELDS = ["snapshot", "custom", "result", "arguments", "tool-result", "delta-value",
                   "unknown-type"]
CLIENT_FIELDS = [*RUN_FIELDS, "metadata", "tool-result"]
#: Depths around every limit on the way: ours (64), orjson's encoder (254) and decoder (1024).
EDGES = [1, 2, 62, 63, 64, 65, 66, 127, 128, 129, 253, 254, 255, 256, 1000, 1023, 1024, 1025]
depths = st.one_of(st.sampled_from(EDGES), st.integers(1, 1100))


@dataclass
class Live:
    """The server, its upstream's next answer, and one client connection per role."""

    url: str
    plan: dict[str, list[bytes]]
    main: httpx.Client
    side: httpx.Client
    count: int = 0

    def next_id(self) -> str:
        self.count += 1
        return f"n{self.count}"

    def kept_alive(self, client: httpx.Client, response: httpx.Response) -> None:
        """The connection of ``response`` serves the next request (the client has one)."""
        assert response.headers.get("connection", "").lower() != "close", response.headers
        after = client.get(f"{BASE}/agents")
        assert after.status_code == 200
        assert after.extensions["network_stream"] is response.extensions["network_stream"], (
            "the connection was dropped")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    plan: dict[str, list[bytes]] = {"frames": []}
    with scripted_upstream(Script(chunks=lambda body: plan["frames"])) as upstream:
        folder = tmp_path_factory.mktemp("nesting")
        # The demo agent answers the client cases; the upstream only runs named ("up").
        settings_ = Settings(database_url=f"sqlite+aiosqlite:///{folder}/db", default_agent="demo")
        app = create_app(Backend(settings_, agents=[AgUiUpstreamAgent(upstream.url, id="up",
                                                                      timeout=10)]))
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with (
            LiveServer(app) as server,
            httpx.Client(base_url=server.url, timeout=30, limits=limits) as main,
            httpx.Client(base_url=server.url, timeout=30, limits=limits) as side,
        ):
            yield Live(server.url, plan, main, side)


def check_answer(rig: Live, response: httpx.Response) -> list[dict[str, Any]] | None:
    """A 4xx with the error envelope, or a valid run (its events); the connection lives."""
    rig.kept_alive(rig.main, response)
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"code", "message"}
        return None
    assert response.status_code == 200, response.text[:300]
    events = parse_sse(response.text)
    verify_events(events)
    return events


def post(client: httpx.Client, path: str, content: bytes) -> httpx.Response:
    return client.post(path, content=content, headers={"content-type": "application/json"})


def client_field(rig: Live, name: str, depth: int) -> None:
    run_id = rig.next_id()
    if name == "metadata":
        body = splice({"id": run_id, "metadata": {"k": HOLE}}, nest(depth, objects=True))
        response = post(rig.main, f"{BASE}/threads", body)
        rig.kept_alive(rig.main, response)
        assert response.status_code in (201, 400), response.text[:300]
        return
    if name == "tool-result":
        tool_result(rig, run_id, depth)
        return
    body = run_with(name)
    body.update(threadId=run_id, runId=run_id)
    value = encoded_arguments(nest(depth)) if name == "arguments" else nest(depth)
    check_answer(rig, post(rig.main, f"{BASE}/run", splice(body, value)))


def tool_result(rig: Live, run_id: str, depth: int) -> None:
    """Answer the demo agent's frontend call with a nested result while its run streams."""
    body = run_body("get_weather", run_id=run_id, thread_id=run_id, tools=[WEATHER])
    lines = []
    with rig.main.stream("POST", f"{BASE}/run", json=body) as response:
        for line in response.iter_lines():
            lines.append(line)
            if not line.startswith("data: ") or '"TOOL_CALL_END"' not in line:
                continue
            path = f"{BASE}/runs/{run_id}/tool-calls/{json.loads(line[6:])['toolCallId']}/result"
            nested = post(rig.side, path, splice({"result": HOLE}, nest(depth)))
            rig.kept_alive(rig.side, nested)
            assert nested.status_code < 500, nested.text[:300]
            if nested.status_code != 200:
                answered = post(rig.side, path, b'{"result": "ok"}')
                assert answered.status_code == 200, (nested.text, answered.text)
    rig.kept_alive(rig.main, response)
    verify_events(parse_sse("\n".join(lines) + "\n"))


def upstream_field(rig: Live, name: str, depth: int) -> None:
    value = nest(depth)
    events: list[bytes] = []
    if name == "snapshot":
        events.append(b'{"type":"STATE_SNAPSHOT","snapshot":' + value + b"}")
    elif name == "custom":
        events.append(b'{"type":"CUSTOM","name":"c","value":' + value + b"}")
    elif name == "arguments":
        events += [b'{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f"}',
                   b'{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":'
                   + encoded_arguments(b'{"a":' + value + b"}") + b"}",
                   b'{"type":"TOOL_CALL_END","toolCallId":"c1"}']
    elif name == "tool-result":
        events += [b'{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f"}',
                   b'{"type":"TOOL_CALL_END","toolCallId":"c1"}',
                   b'{"type":"TOOL_CALL_RESULT","toolCallId":"c1","messageId":"m",'
                   b'"content":' + value + b"}"]
    elif name == "delta-value":
        events.append(b'{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":'
                      + value + b"}]}")
    elif name == "unknown-type":
        events.append(b'{"type":"SOMETHING_NEW","x":' + value + b"}")
    finished = b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"'
    if name == "result":
        finished += b',"result":' + value
    events.append(finished + b"}")
    rig.plan["frames"] = [b"data: " + e + b"\n\n" for e in events]
    run_id = rig.next_id()
    body = run_body("go", run_id=run_id, thread_id=run_id, agentId="up")
    run = check_answer(rig, rig.main.post(f"{BASE}/run", json=body))
    assert run is not None  # the request itself is fine: the run takes what it can
    # A resume replays the same events, terminal included.
    replay = rig.main.get(f"{BASE}/runs/{run_id}/events")
    rig.kept_alive(rig.main, replay)
    assert parse_sse(replay.text) == run


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(where=st.sampled_from(["client"] * len(CLIENT_FIELDS) + ["upstream"] * 4),
       data=st.data(), depth=depths)
def test_any_field_at_any_depth_is_a_4xx_or_a_valid_run(
    live: Live, where: str, data: st.DataObject, depth: int
) -> None:
    if where == "client":
        client_field(live, data.draw(st.sampled_from(CLIENT_FIELDS)), depth)
    else:
        upstream_field(live, data.draw(st.sampled_from(UPSTREAM_FIELDS)), depth)


@pytest.mark.parametrize("depth", EDGES)
@pytest.mark.parametrize(
    "where_field",
    [("client", f) for f in CLIENT_FIELDS] + [("upstream", f) for f in UPSTREAM_FIELDS],
    ids=lambda w: f"{w[0]}-{w[1]}",
)
def test_every_field_at_every_edge_depth(
    live: Live, where_field: tuple[str, str], depth: int
) -> None:
    """The sweep the property test samples from, exhaustively at the edges of every limit."""
    where, field = where_field
    if where == "client":
        client_field(live, field, depth)
    else:
        upstream_field(live, field, depth)
