"""``GET /metrics`` scraped over real HTTP: exact counter deltas after real runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.helpers import LiveServer, free_port, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.errors import AgentError
from iobridge.http.app import create_app

CONFIRM = {
    "name": "confirm",
    "description": "Ask the user to confirm",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@tool
def lookup(order: str) -> dict[str, str]:
    """Look an order up."""
    return {"order": order, "status": "shipped"}


async def ops(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    """Looks an order up, asks the client to confirm, or fails, as the message says."""
    text = str(ctx.messages[-1]["content"])
    if text == "fail":
        raise AgentError("the order system is down", code="ORDERS_DOWN")
    found = await ctx.call_tool("lookup", {"order": "A1"})
    yield f"found {found.content}"
    if text == "confirm":
        answer = await ctx.call_tool("confirm", {"question": "ship it?"})
        yield f" confirmed {answer.content}"


def _agent() -> FunctionAgent:
    return FunctionAgent(ops, id="ops", tools=[lookup])


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a labelled series that has not appeared yet."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def server(tmp_path: Any) -> Any:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/metrics.db")
    with LiveServer(create_app(Backend(settings, agents=[_agent()]))) as live:
        yield live


async def test_counters_move_by_exactly_what_the_runs_did(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        before = await scrape(client)
        assert value(before, "iobridge_active_runs") == 0
        assert value(before, "iobridge_runs_started_total", agent="ops") == 0

        # A run that calls a server tool, then waits for a frontend tool.
        body = run_body("confirm", tools=[CONFIRM], agentId="ops")
        seen: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        waiting: Samples = {}
        seen_then = 0
        async with client.stream("POST", "/io-bridge/run", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                seen.append(event)
                if event["type"] == "TOOL_CALL_START":
                    names[event["toolCallId"]] = event["toolCallName"]
                if event["type"] == "TOOL_CALL_END" and names[event["toolCallId"]] == "confirm":
                    waiting = await scrape(client)
                    seen_then = len(seen)
                    posted = await client.post(
                        f"/io-bridge/runs/r1/tool-calls/{event['toolCallId']}/result",
                        json={"content": "yes"},
                    )
                    assert posted.status_code == 200, posted.text
        assert seen[-1]["type"] == "RUN_FINISHED"
        # While the client was asked: one run active, one frontend call pending.
        assert value(waiting, "iobridge_active_runs") == 1
        assert value(waiting, "iobridge_pending_frontend_tool_calls") == 1
        assert delta(before, waiting, "iobridge_runs_started_total", agent="ops") == 1
        assert delta(before, waiting, "iobridge_runs_finished_total",
                     agent="ops", outcome="success") == 0
        assert delta(before, waiting, "iobridge_tool_calls_total", agent="ops", kind="server") == 1
        # A live run's events count as they are appended (the terminal one is not yet).
        assert delta(before, waiting, "iobridge_events_total", agent="ops") == seen_then

        done = await scrape(client)
        assert value(done, "iobridge_active_runs") == 0
        assert value(done, "iobridge_pending_frontend_tool_calls") == 0
        assert value(done, "iobridge_retained_runs") == 1
        assert delta(before, done, "iobridge_runs_started_total", agent="ops") == 1
        assert delta(before, done, "iobridge_runs_finished_total",
                     agent="ops", outcome="success") == 1
        assert delta(before, done, "iobridge_tool_calls_total", agent="ops", kind="server") == 1
        assert delta(before, done, "iobridge_tool_calls_total",
                     agent="ops", kind="frontend") == 1
        # Every event the client received, counted once.
        assert delta(before, done, "iobridge_events_total", agent="ops") == len(seen)
        assert delta(before, done, "iobridge_run_first_event_seconds_count", agent="ops") == 1
        assert delta(before, done, "iobridge_run_duration_seconds_count",
                     agent="ops", outcome="success") == 1
        # One read before the run; the incoming messages after RUN_STARTED, the rest at the end.
        assert delta(before, done, "iobridge_store_operation_seconds_count",
                     operation="read_for_run") == 1
        assert delta(before, done, "iobridge_store_operation_seconds_count",
                     operation="write_for_run") == 2

        # A failing run: counted under its outcome and its error code.
        failed = await client.post(
            "/io-bridge/run", json=run_body("fail", run_id="r2", thread_id="t2", agentId="ops")
        )
        events = parse_sse(failed.text)
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "ORDERS_DOWN"
        after = await scrape(client)
        assert delta(done, after, "iobridge_runs_started_total", agent="ops") == 1
        assert delta(done, after, "iobridge_runs_finished_total",
                     agent="ops", outcome="error") == 1
        assert delta(done, after, "iobridge_runs_finished_total",
                     agent="ops", outcome="success") == 0
        assert delta(done, after, "iobridge_run_errors_total", agent="ops", code="ORDERS_DOWN") == 1
        assert delta(done, after, "iobridge_events_total", agent="ops") == len(events)
        assert delta(done, after, "iobridge_tool_calls_total", agent="ops", kind="server") == 0


async def test_a_next_run_frontend_call_is_counted_as_deferred(
    server: LiveServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        before = await scrape(client)
        body = run_body(
            "confirm", tools=[CONFIRM], agentId="ops", toolResultMode="next-run"
        )
        events = parse_sse((await client.post("/io-bridge/run", json=body)).text)
        assert events[-1]["type"] == "RUN_FINISHED"
        after = await scrape(client)
    assert delta(before, after, "iobridge_tool_calls_total", agent="ops", kind="deferred") == 1
    assert delta(before, after, "iobridge_tool_calls_total", agent="ops", kind="frontend") == 0
    assert delta(before, after, "iobridge_runs_finished_total", agent="ops", outcome="success") == 1


def test_each_backend_counts_its_own_runs(tmp_path: Any) -> None:
    first = LiveServer(create_app(Backend(Settings(database_url="memory://"), agents=[_agent()])))
    second = LiveServer(create_app(Backend(Settings(database_url="memory://"), agents=[_agent()])))
    with first, second:
        ran = httpx.post(f"{first.url}/io-bridge/run", json=run_body("hi", agentId="ops"))
        assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"
        counts = []
        for live in (first, second):
            text = httpx.get(f"{live.url}/metrics").text
            counts.append(
                [s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "iobridge_runs_started_total"]
            )
    assert counts == [[1.0], []]


async def test_the_token_protects_metrics_and_the_setting_turns_them_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_METRICS_TOKEN", "s3cret-scrape")
    settings = Settings(database_url="memory://", metrics={"token_env": "TEST_METRICS_TOKEN"})
    with LiveServer(create_app(Backend(settings))) as live:
        async with httpx.AsyncClient(base_url=live.url) as client:
            for headers in ({}, {"authorization": "Bearer wrong"}, {"x-api-key": "s3cret-scrape"}):
                refused = await client.get("/metrics", headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "UNAUTHORIZED"
                assert "iobridge_" not in refused.text
            await scrape(client, authorization="Bearer s3cret-scrape")
            # Health stays open: orchestrators probe without credentials.
            assert (await client.get("/readyz")).status_code == 200
    off = Settings(database_url="memory://", metrics={"enabled": False})
    with LiveServer(create_app(Backend(off))) as live:
        assert httpx.get(f"{live.url}/metrics").status_code == 404


def test_a_token_variable_that_is_not_set_is_refused_at_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TEST_METRICS_TOKEN", raising=False)
    settings = Settings(database_url="memory://", metrics={"token_env": "TEST_METRICS_TOKEN"})
    with pytest.raises(ValueError, match="TEST_METRICS_TOKEN is not set"):
        create_app(Backend(settings))


def test_serve_refuses_to_start_without_the_token_variable(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from iobridge.cli import app

    result = CliRunner().invoke(
        app, ["serve", "--port", str(free_port())],
        env={"IOBRIDGE_METRICS__TOKEN_ENV": "UNSET_SCRAPE_TOKEN", "UNSET_SCRAPE_TOKEN": "",
             "IOBRIDGE_DATABASE_URL": "memory://"},
    )
    assert result.exit_code == 2
    assert "metrics.token_env: the environment variable UNSET_SCRAPE_TOKEN is not set" in (
        result.output
    )


def test_the_exposition_is_what_prometheus_client_makes_of_the_same_updates() -> None:
    """The loop-kept families against prometheus-client's own Counter and Histogram (the
    oracle), fed the same updates, values on bucket bounds included: every line but the
    ``_created`` timestamps is the same, in the text and the OpenMetrics format."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_om

    from iobridge.observability import metrics as metrics_module

    ours = metrics_module.Metrics()
    oracle = CollectorRegistry()
    started = Counter("iobridge_runs_started", "Runs that emitted RUN_STARTED.", ["agent"],
                      registry=oracle)
    finished = Counter("iobridge_runs_finished",
                       "Runs concluded, by outcome (success, interrupt, cancelled, error).",
                       ["agent", "outcome"], registry=oracle)
    errors = Counter("iobridge_run_errors", "Runs that ended with RUN_ERROR, by its code.",
                     ["agent", "code"], registry=oracle)
    first = Histogram(
        "iobridge_run_first_event_seconds",
        "Seconds from a run's admission to RUN_STARTED in its log (the thread read).",
        ["agent"], buckets=metrics_module.FIRST_EVENT_BUCKETS, registry=oracle)
    duration = Histogram(
        "iobridge_run_duration_seconds",
        "Seconds from RUN_STARTED to the terminal event (messages stored).",
        ["agent", "outcome"], buckets=metrics_module.RUN_BUCKETS, registry=oracle)
    tools = Counter("iobridge_tool_calls",
                    "Tool calls an agent awaited, by kind (server, frontend, deferred, unknown).",
                    ["agent", "kind"], registry=oracle)
    store = Histogram(
        "iobridge_store_operation_seconds",
        "Seconds of thread-store operations (run reads and writes, readiness probes).",
        ["operation"], buckets=metrics_module.STORE_BUCKETS, registry=oracle)
    seconds = [0.0, 0.0005, 0.0004, 0.001, 0.0100001, 0.05, 2.5, 7.0, 1800, 5000.0]
    for i, value in enumerate(seconds):
        agent = ("a", "b")[i % 2]
        ours.run_started(agent, value)
        started.labels(agent).inc()
        first.labels(agent).observe(value)
        outcome, code = (("error", "ORDERS_DOWN") if i % 3 else ("success", None))
        ours.run_finished(agent, outcome, code, value)
        finished.labels(agent, outcome).inc()
        duration.labels(agent, outcome).observe(value)
        if code is not None:
            errors.labels(agent, code).inc()
        ours.tool_call(agent, "server")
        tools.labels(agent, "server").inc()
        for operation in ("read_for_run", "write_for_run"):
            ours.store_operation(operation, value)
            store.labels(operation).observe(value)

    def lines(text: bytes) -> list[str]:
        return [line for line in text.decode().splitlines() if "_created" not in line]

    assert lines(generate_latest(ours.registry)) == lines(generate_latest(oracle))
    assert lines(generate_om(ours.registry)) == lines(generate_om(oracle))
    created = [line for line in generate_latest(ours.registry).decode().splitlines()
               if line.startswith("iobridge_store_operation_seconds_created")]
    assert len(created) == 2


def test_label_combinations_past_the_bound_are_counted_under_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prometheus_client import generate_latest

    from iobridge.observability import metrics as metrics_module

    monkeypatch.setattr(metrics_module, "MAX_SERIES", 3)
    metrics = metrics_module.Metrics()
    for code in ("A", "B", "C", "D", "E", "A", "E"):
        metrics.run_finished("bench", "error", code, 0.01)
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode())}
    errors = {(s.labels["agent"], s.labels["code"]): s.value
              for s in families["iobridge_run_errors"].samples if s.name.endswith("_total")}
    # Three combinations kept; D, E and E again counted under "other", nothing lost.
    assert errors == {("bench", "A"): 2.0, ("bench", "B"): 1.0, ("bench", "C"): 1.0,
                      ("other", "other"): 3.0}
    finished = [s.value for s in families["iobridge_runs_finished"].samples
                if s.name.endswith("_total")]
    assert finished == [7.0]
