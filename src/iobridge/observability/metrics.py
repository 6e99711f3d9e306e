"""Prometheus metrics of one Backend, in a registry of its own (never the global one).

Counters and histograms move once per run, tool call or store operation, never per event:
the per-event figures (events emitted, runs active, frontend calls pending) are read from the
engine when the registry is scraped, so the streaming path pays nothing for them. The names
and labels are listed in ``docs/observability.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["EngineSample", "Metrics"]

#: Seconds: from a request's admission to RUN_STARTED, and whole runs (chat turns to tool waits).
FIRST_EVENT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
#: Seconds a scrape on the ``metrics.port`` listener waits for the event loop's figures.
SAMPLE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class EngineSample:
    """What the engine reports at scrape time."""

    active_runs: int
    retained_runs: int
    pending_tool_calls: int
    #: Events appended to run logs so far, per agent id.
    events: Mapping[str, int]


class _EngineCollector(Collector):
    """The live figures; read on the event loop's thread even when scraped from another."""

    def __init__(self, sample: Callable[[], EngineSample]) -> None:
        self._sample = sample
        #: Set while a listener thread scrapes: the engine's state belongs to this loop.
        self.loop: asyncio.AbstractEventLoop | None = None

    def _read(self) -> EngineSample:
        loop = self.loop
        try:
            on_loop = loop is None or asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop or loop is None:
            return self._sample()

        async def read() -> EngineSample:
            return self._sample()

        return asyncio.run_coroutine_threadsafe(read(), loop).result(SAMPLE_TIMEOUT)

    def collect(self) -> Iterable[Metric]:
        sample = self._read()
        yield GaugeMetricFamily(
            "iobridge_active_runs", "Runs admitted and not yet concluded.", sample.active_runs
        )
        yield GaugeMetricFamily(
            "iobridge_retained_runs", "Finished runs kept for resume.", sample.retained_runs
        )
        yield GaugeMetricFamily(
            "iobridge_pending_frontend_tool_calls",
            "In-run frontend tool calls waiting for the client's result.",
            sample.pending_tool_calls,
        )
        events = CounterMetricFamily(
            "iobridge_events", "AG-UI events appended to run logs.", labels=["agent"]
        )
        for agent, count in sorted(sample.events.items()):
            events.add_metric([agent], count)
        yield events

    def describe(self) -> Iterable[Metric]:
        return ()


#: Label combinations whose child a metric keeps at hand; past it ``labels()`` is called as is.
MAX_CACHED_CHILDREN = 1024


class _Children:
    """A labelled metric's children by label values, each looked up once: ``labels()``
    validates its arguments and takes a lock on every call, several times per run."""

    __slots__ = ("_cache", "_metric")

    def __init__(self, metric: Counter | Histogram) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._metric.labels(*values)
            if len(self._cache) < MAX_CACHED_CHILDREN:
                self._cache[values] = child
        return child


class Metrics:
    """The Backend's metrics; ``registry`` is what ``GET /metrics`` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.runs_started = Counter(
            "iobridge_runs_started", "Runs that emitted RUN_STARTED.", ["agent"],
            registry=registry,
        )
        self.runs_finished = Counter(
            "iobridge_runs_finished",
            "Runs concluded, by outcome (success, interrupt, cancelled, error).",
            ["agent", "outcome"], registry=registry,
        )
        self.run_errors = Counter(
            "iobridge_run_errors", "Runs that ended with RUN_ERROR, by its code.",
            ["agent", "code"], registry=registry,
        )
        self.first_event = Histogram(
            "iobridge_run_first_event_seconds",
            "Seconds from a run's admission to RUN_STARTED in its log (the thread read).",
            ["agent"], buckets=FIRST_EVENT_BUCKETS, registry=registry,
        )
        self.run_duration = Histogram(
            "iobridge_run_duration_seconds",
            "Seconds from RUN_STARTED to the terminal event (messages stored).",
            ["agent", "outcome"], buckets=RUN_BUCKETS, registry=registry,
        )
        self.tool_calls = Counter(
            "iobridge_tool_calls",
            "Tool calls an agent awaited, by kind (server, frontend, deferred, unknown).",
            ["agent", "kind"], registry=registry,
        )
        self.store_seconds = Histogram(
            "iobridge_store_operation_seconds",
            "Seconds of thread-store operations (run reads and writes, readiness probes).",
            ["operation"], buckets=STORE_BUCKETS, registry=registry,
        )
        self._runs_started = _Children(self.runs_started)
        self._runs_finished = _Children(self.runs_finished)
        self._run_errors = _Children(self.run_errors)
        self._first_event = _Children(self.first_event)
        self._run_duration = _Children(self.run_duration)
        self._tool_calls = _Children(self.tool_calls)
        self._store_seconds = _Children(self.store_seconds)

    def watch(self, sample: Callable[[], EngineSample]) -> None:
        """Report the engine's live figures (read at scrape time) from ``sample``."""
        self._engine = _EngineCollector(sample)
        self.registry.register(self._engine)

    def serve(self, host: str, port: int) -> Any:
        """Serve the registry on its own port (``metrics.port``) with prometheus_client's
        standard-library server, in a thread; call from the event loop. Returns the server
        (``shutdown()`` and ``server_close()`` it)."""
        self._engine.loop = asyncio.get_running_loop()
        server, _thread = start_http_server(port, host, registry=self.registry)
        return server

    def run_started(self, agent: str, seconds_to_start: float) -> None:
        self._runs_started(agent).inc()
        self._first_event(agent).observe(seconds_to_start)

    def run_finished(self, agent: str, outcome: str, code: str | None, seconds: float) -> None:
        self._runs_finished(agent, outcome).inc()
        self._run_duration(agent, outcome).observe(seconds)
        if code is not None:
            self._run_errors(agent, code).inc()

    def tool_call(self, agent: str, kind: str) -> None:
        self._tool_calls(agent, kind).inc()

    def store_operation(self, operation: str, seconds: float) -> None:
        self._store_seconds(operation).observe(seconds)
