"""OpenTelemetry: one span per run with its tool-call spans, read from an in-memory exporter
after runs over real HTTP; and without tracing turned on, no OpenTelemetry SDK is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.config import Settings, TracingSettings
from iobridge.errors import AgentError
from iobridge.http.app import mount
from iobridge.observability.tracing import TracingUnavailable, open_tracer

CONFIRM = {"name": "confirm", "description": "Ask", "parameters": {"type": "object"}}


@tool
def lookup(order: str) -> dict[str, str]:
    """Look an order up."""
    if order == "bad":
        raise ValueError("no such order")
    return {"order": order}


async def ops(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    if ctx.messages[-1]["content"] == "fail":
        raise AgentError("the order system is down", code="ORDERS_DOWN")
    await ctx.call_tool("lookup", {"order": "A1"})
    await ctx.call_tool("lookup", {"order": "bad"})
    answer = await ctx.call_tool("confirm", {})
    yield f"confirmed {answer.content}"


@pytest.fixture
def traced(tmp_path: Any) -> Iterator[tuple[LiveServer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = Backend(
        Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/t.db"),
        agents=[FunctionAgent(ops, id="ops", tools=[lookup])],
        tracer_provider=provider,
    )
    app = FastAPI()
    mount(app, backend)
    with LiveServer(app) as server:
        yield server, exporter


async def _run_answering(server: LiveServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            seen.append(event)
            if event["type"] == "TOOL_CALL_START":
                names[event["toolCallId"]] = event["toolCallName"]
            if event["type"] == "TOOL_CALL_END" and names[event["toolCallId"]] == "confirm":
                posted = await client.post(
                    f"/io-bridge/runs/{body['runId']}/tool-calls/{event['toolCallId']}/result",
                    json={"content": "yes"},
                )
                assert posted.status_code == 200
    return seen


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_one_run_span_with_a_child_span_per_tool_call(
    traced: tuple[LiveServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    body = run_body("go", tools=[CONFIRM], agentId="ops", resourceId="acme")
    seen = await _run_answering(server, body)
    assert seen[-1]["type"] == "RUN_FINISHED"
    spans = exporter.get_finished_spans()
    [run] = _by_name(spans, "run ops")
    assert run.kind is SpanKind.SERVER
    assert dict(run.attributes or {}) == {
        "iobridge.thread_id": "t1",
        "iobridge.run_id": "r1",
        "iobridge.agent_id": "ops",
        "iobridge.resource_id": "acme",
        "iobridge.outcome": "success",
    }
    assert run.parent is None
    lookups = _by_name(spans, "tool lookup")
    [confirm] = _by_name(spans, "tool confirm")
    assert len(lookups) == 2
    call_ids = [e["toolCallId"] for e in seen if e["type"] == "TOOL_CALL_START"]
    for span in [*lookups, confirm]:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
    assert [s.attributes["gen_ai.tool.call.id"] for s in [*lookups, confirm]] == call_ids
    assert [s.attributes["iobridge.tool.kind"] for s in [*lookups, confirm]] == [
        "server", "server", "frontend"
    ]
    # The failing server tool's span is an error; the others are not.
    assert [s.status.status_code for s in [*lookups, confirm]] == [
        StatusCode.UNSET, StatusCode.ERROR, StatusCode.UNSET
    ]
    # The run span covers its tool calls.
    assert run.start_time is not None and run.end_time is not None
    assert all(run.start_time <= s.start_time and s.end_time <= run.end_time  # type: ignore[operator]
               for s in [*lookups, confirm])
    # Tracing changes nothing the thread keeps: the run's messages are stored as without it.
    async with httpx.AsyncClient(base_url=server.url) as client:
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui",
                                   headers={"X-Resource-Id": "acme"})).json()
    assert [m["role"] for m in stored["messages"]][:2] == ["user", "assistant"]
    assert len([m for m in stored["messages"] if m["role"] == "tool"]) == 3


async def test_a_failed_run_span_carries_the_error_outcome(
    traced: tuple[LiveServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    body = run_body("fail", agentId="ops", run_id="r9", thread_id="t9")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        events = parse_sse((await client.post("/io-bridge/run", json=body)).text)
    assert events[-1]["type"] == "RUN_ERROR"
    spans = exporter.get_finished_spans()
    [run] = _by_name(spans, "run ops")
    assert run.attributes is not None
    assert (run.attributes["iobridge.run_id"], run.attributes["iobridge.outcome"]) == (
        "r9", "error"
    )
    assert run.status.status_code is StatusCode.ERROR
    assert [s for s in spans if s.name.startswith("tool ")] == []


async def test_without_the_sdk_tracing_fails_with_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK made unimportable (as when the otel extra is not installed).
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(TracingUnavailable, match=r"pip install 'iobridge\[otel\]'"):
        async with open_tracer(TracingSettings(enabled=True, otlp_endpoint="http://127.0.0.1:9")):
            pass


def test_without_tracing_no_opentelemetry_sdk_is_imported(tmp_path: Any) -> None:
    script = """
import asyncio, sys
from iobridge.app import Backend
from iobridge.config import Settings

async def main():
    async with Backend(Settings(database_url="memory://")) as backend:
        run = await backend.start_run(backend.authenticator.authenticate({}), {
            "threadId": "t", "runId": "r", "tools": [], "context": [],
            "messages": [{"id": "m", "role": "user", "content": "What time is it?"}]})
        await run.task
        assert run.log.closed
    loaded = sorted(m for m in sys.modules
                    if m.startswith(("opentelemetry.sdk", "iobridge.observability.tracing")))
    print(loaded)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_tracing_fastapi_does_not_look_for_providers_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tracing off: FastAPI's own telemetry is off too, so a request never asks the global
    OpenTelemetry providers whether someone configured them (environment lookups on the
    run path); a run still streams to its end."""
    from opentelemetry import _logs, metrics, trace

    from iobridge.http.app import create_app

    asked: list[str] = []
    for module, name in ((trace, "get_tracer_provider"), (metrics, "get_meter_provider"),
                         (_logs, "get_logger_provider")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda real=real, name=name: asked.append(name) or real())
    app = create_app(Backend(Settings(database_url="memory://", playground=False)))
    with LiveServer(app) as server:
        asked.clear()  # startup may look once
        response = httpx.post(f"{server.url}/io-bridge/run", json=run_body("hello"), timeout=10)
    assert response.status_code == 200
    assert [e["type"] for e in parse_sse(response.text)][-1] == "RUN_FINISHED"
    assert asked == []
