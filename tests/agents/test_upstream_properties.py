"""Any upstream event sequence becomes a valid run, and never an internal error.

Hypothesis draws upstream streams from the guard's property-test vocabulary (malformed ids,
broken arguments, stray lifecycle events, unknown types, bad timestamps); a Starlette
upstream sends them as SSE, reached in-process through ``httpx.ASGITransport`` (the loopback
tests in ``test_upstream.py`` cover the real sockets). The run through iobridge must pass the
independent checker and the third-party validator, end with a code the upstream agent
documents (or the guard's own), and leave a thread whose stored messages are complete.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from ag_ui_validate.pytest_plugin import assert_valid_agui
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from tests.backends import open_backend
from tests.helpers import app_client, parse_sse
from tests.protocol.test_guard_properties import decorated_events

from agui_verify import verify_events
from iobridge.agents.upstream import AgUiUpstreamAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

#: The codes a run of an upstream agent may end with.
CODES = {"UPSTREAM_RUN_ERROR", "UPSTREAM_PROTOCOL_ERROR", "INVALID_TOOL_ARGS"}
WEATHER = {"name": "get_weather", "description": "", "parameters": {"type": "object"}}


def _upstream(events: list[dict[str, Any]], cut: int) -> Starlette:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)

    async def run(request: Request) -> Response:
        # ``cut``: the stream may end anywhere, even inside a frame.
        return StreamingResponse(iter([body[:cut]]), media_type="text/event-stream")

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


async def _run(events: list[dict[str, Any]], cut: int) -> tuple[httpx.Response, Any]:
    transport = httpx.ASGITransport(app=_upstream(events, cut))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://upstream") as upstream,
        open_backend("memory", Path()) as store,
    ):
        agent = AgUiUpstreamAgent("http://upstream/agui", id="up", client=upstream)
        app = create_app(Backend(Settings(), agents=[agent], store=store))
        async with app_client(app) as client:
            body = {"threadId": "t", "runId": "r", "tools": [WEATHER], "context": [],
                    "messages": [{"id": "u1", "role": "user", "content": "go"}],
                    "forwardedProps": {"agentId": "up", "toolResultMode": "next-run"}}
            response = await asyncio.wait_for(client.post("/io-bridge/run", json=body), 10)
            stored = (await client.get("/io-bridge/threads/t/messages?format=agui")).json()
    return response, stored["messages"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(decorated_events(), max_size=30), cut=st.integers(0, 100_000))
# Found by this test: a non-string toolCallId on TOOL_CALL_ARGS crashed the event reader.
@example(events=[{"type": "TOOL_CALL_ARGS", "toolCallId": ["x"], "delta": "{}"}], cut=100_000)
def test_any_upstream_stream_yields_a_valid_run(events: list[dict[str, Any]], cut: int) -> None:
    response, stored = asyncio.run(_run(events, cut))
    assert response.status_code == 200
    wire = parse_sse(response.content)
    verify_events(wire, thread_id="t", run_id="r")
    assert_valid_agui(wire)
    terminal = wire[-1]
    if terminal["type"] == "RUN_ERROR":
        assert terminal["code"] in CODES, terminal
    assert stored[0] == {"id": "u1", "role": "user", "content": "go"}
    ids = [m["id"] for m in stored]
    assert len(ids) == len(set(ids))
    # Every stored call has its arguments as the wire showed them, and parses.
    for message in stored:
        for call in message.get("toolCalls", []):
            json.loads(call["function"]["arguments"])
