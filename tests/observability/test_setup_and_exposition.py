"""What the serving process sets up around the engine, judged in process: the log handlers
``configure_logging`` installs and the lines they write, the exposition's help texts and
``_created`` samples, the ``metrics.port`` listener reading the figures on the event loop's
thread, the run spans' instrumentation scope, and pydantic-ai pointed at the Backend's tracer
provider only while it is open."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import PurePosixPath

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from iobridge import __version__
from iobridge.config import TracingSettings
from iobridge.observability.logs import JsonFormatter, RunFilter, configure_logging, current_run
from iobridge.observability.metrics import EngineSample, Metrics
from iobridge.observability.tracing import RunTracer, TracingUnavailable, open_tracer


@pytest.fixture
def logging_restored() -> Iterator[None]:
    root, ours = logging.getLogger(), logging.getLogger("iobridge")
    saved = (root.handlers[:], root.level, ours.handlers[:], ours.level)
    yield
    root.handlers, ours.handlers = saved[0], saved[2]
    root.setLevel(saved[1])
    ours.setLevel(saved[3])


def test_json_logs_send_every_logger_through_one_root_handler(logging_restored: None) -> None:
    handler = configure_logging("debug", "json")
    out = io.StringIO()
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    assert logging.getLogger().handlers == [handler]
    assert logging.getLogger("iobridge").handlers == []
    assert logging.getLogger().level == logging.getLogger("iobridge").level == logging.DEBUG
    token = current_run.set(("t-1", "r-1"))
    try:
        logging.getLogger("somelib.client").debug("fetched %d", 3)
    finally:
        current_run.reset(token)
    logging.getLogger("iobridge.app").info("outside")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert (first["level"], first["logger"], first["message"]) == ("debug", "somelib.client",
                                                                   "fetched 3")
    assert (first["threadId"], first["runId"]) == ("t-1", "r-1")
    assert first["time"].endswith("Z")
    assert second["logger"] == "iobridge.app"
    assert "runId" not in second and "threadId" not in second


def test_text_logs_are_iobridge_s_own_at_its_level(logging_restored: None) -> None:
    root_before = logging.getLogger().handlers[:]
    handler = configure_logging("warning", "text")
    out = io.StringIO()
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    assert logging.getLogger("iobridge").handlers == [handler]
    assert logging.getLogger().handlers == root_before
    assert any(isinstance(f, RunFilter) for f in handler.filters)
    logging.getLogger("iobridge.app").info("not shown")
    logging.getLogger("iobridge.app").warning("store slow")
    assert out.getvalue() == "WARNING:     iobridge.app: store slow\n"


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("iobridge.x", logging.INFO, __file__, 1, "hello", None, None)
    record.__dict__.update(extra)
    return record


def test_the_json_formatter_takes_records_no_filter_stamped() -> None:
    formatter = JsonFormatter()
    bare = json.loads(formatter.format(_record()))
    assert bare["message"] == "hello" and "runId" not in bare
    # A run id without a thread id (a handler of the embedding app stamping only one).
    assert json.loads(formatter.format(_record(run_id="r")))["threadId"] is None
    # Ids of a type JSON does not know are written as their text, not dropped or raised.
    odd = json.loads(formatter.format(_record(run_id=PurePosixPath("r/2"), thread_id="t")))
    assert (odd["runId"], odd["threadId"]) == ("r/2", "t")


def _sample() -> EngineSample:
    return EngineSample(active_runs=2, retained_runs=5, pending_tool_calls=1,
                        events={"chat": 7})


def test_the_exposition_names_each_live_figure_and_dates_each_series() -> None:
    metrics = Metrics()
    metrics.watch(_sample)
    before = time.time()
    metrics.run_started("chat", 0.01)
    metrics.store_operation("read", 0.002)
    text = generate_latest(metrics.registry).decode()
    for line in (
        "# HELP iobridge_events_total AG-UI events appended to run logs.",
        "# HELP iobridge_active_runs Runs admitted and not yet concluded.",
        "# HELP iobridge_retained_runs Finished runs kept for resume.",
        "# HELP iobridge_pending_frontend_tool_calls In-run frontend tool calls waiting for"
        " the client's result.",
        'iobridge_events_total{agent="chat"} 7.0',
        "iobridge_active_runs 2.0",
    ):
        assert line in text.splitlines(), line
    created = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if "_created{" in line}
    assert set(created) >= {'iobridge_runs_started_created{agent="chat"}',
                            'iobridge_store_operation_seconds_created{operation="read"}'}
    assert all(before - 1 <= value <= time.time() + 1 for value in created.values())


async def test_the_metrics_port_reads_the_figures_on_the_event_loop_s_thread() -> None:
    loop_thread = threading.get_ident()
    read_on: list[int] = []

    def sample() -> EngineSample:
        read_on.append(threading.get_ident())
        return _sample()

    metrics = Metrics()
    metrics.watch(sample)
    metrics.run_started("chat", 0.01)
    server = metrics.serve("127.0.0.1", 0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"  # the configured interface, not every one
        scraped = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics",
                                          timeout=10)
        assert scraped.status_code == 200
        assert 'iobridge_runs_started_total{agent="chat"} 1.0' in scraped.text
        assert "iobridge_active_runs 2.0" in scraped.text
        # Read on the loop itself (GET /metrics of the HTTP app) it answers at once too.
        assert "iobridge_retained_runs 5.0" in generate_latest(metrics.registry).decode()
    finally:
        server.shutdown()
        server.server_close()
    assert read_on == [loop_thread, loop_thread]


def test_run_spans_carry_iobridge_s_instrumentation_scope() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with RunTracer(provider).run(thread_id="t", run_id="r", agent_id="a",
                                 resource_id="u") as finish:
        finish("success")
    (span,) = exporter.get_finished_spans()
    assert span.instrumentation_scope is not None
    assert (span.instrumentation_scope.name, span.instrumentation_scope.version) == (
        "iobridge", __version__)


async def test_without_the_sdk_the_error_is_the_whole_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(TracingUnavailable) as raised:
        async with open_tracer(TracingSettings(enabled=True, otlp_endpoint="http://127.0.0.1:9")):
            pass
    assert str(raised.value) == ("tracing needs the OpenTelemetry SDK and OTLP exporter: "
                                 "pip install 'iobridge[otel]'")


@pytest.mark.parametrize("include_content", [True, False])
async def test_pydantic_ai_agents_trace_to_the_backend_s_provider_while_it_is_open(
    include_content: bool,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(TestModel(custom_output_text="the secret answer"))
    settings = TracingSettings(enabled=True, include_content=include_content)
    async with open_tracer(settings, provider):
        await agent.run("a secret question")
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} >= {"chat test"}
    written = " ".join(str(dict(s.attributes or {})) + str([dict(e.attributes or {})
                                                           for e in s.events]) for s in spans)
    assert ("secret" in written) is include_content
    exporter.clear()
    await agent.run("after the backend closed")
    assert exporter.get_finished_spans() == ()
