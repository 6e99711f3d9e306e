"""Prometheus metrics of one Backend, in a registry of its own (never the global one).

Counters and histograms move once per run, tool call or store operation, never per event:
the per-event figures (events emitted, runs active, frontend calls pending) are read from the
engine when the registry is scraped, so the streaming path pays nothing for them. The names
and labels are listed in ``docs/observability.md``.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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


#: prometheus-client's own spelling of a bucket's ``le`` (the function is untyped there).
_le: Callable[[float], str] = floatToGoString
#: Label combinations one metric keeps; past it, new ones are counted under ``other``
#: (label values such as an upstream agent's error codes are not ours to bound).
MAX_SERIES = 1024
#: The label value that stands for every combination past ``MAX_SERIES``.
OVERFLOW_LABEL = "other"


class _Family:
    """A labelled counter or histogram whose numbers the event loop keeps in plain lists.

    prometheus-client's ``Counter`` and ``Histogram`` take a lock on every update (a
    histogram several), about 5 % of a chat turn's instructions; every update here happens
    on the event loop, and the registry reads the numbers on that loop too
    (:class:`_LoopCollector`), so no lock is needed. What is exposed is the same: the
    families are built with prometheus-client's own metric families at scrape time.
    """

    __slots__ = ("bounds", "created", "doc", "edges", "labelnames", "name", "series")

    def __init__(
        self, name: str, doc: str, labelnames: tuple[str, ...],
        bounds: tuple[float, ...] = (),
    ) -> None:
        self.name, self.doc, self.labelnames, self.bounds = name, doc, labelnames, bounds
        self.edges = [_le(b) for b in bounds] + ["+Inf"]
        #: Per label values: a counter's ``[value]``; a histogram's count per bucket (the
        #: last is +Inf) followed by its sum.
        self.series: dict[tuple[str, ...], list[float]] = {}
        self.created: dict[tuple[str, ...], float] = {}

    def _series(self, labels: tuple[str, ...]) -> list[float]:
        if len(self.series) >= MAX_SERIES:
            labels = (OVERFLOW_LABEL,) * len(labels)
            series = self.series.get(labels)
            if series is not None:
                return series
        series = self.series[labels] = [0.0] * (len(self.bounds) + 2 if self.bounds else 1)
        self.created[labels] = time.time()
        return series

    def inc(self, *labels: str) -> None:
        """Add one to a counter."""
        series = self.series.get(labels)
        if series is None:
            series = self._series(labels)
        series[0] += 1

    def observe(self, value: float, *labels: str) -> None:
        """Count ``value`` in its histogram bucket (``le``: the first bound at or above it)."""
        series = self.series.get(labels)
        if series is None:
            series = self._series(labels)
        series[bisect_left(self.bounds, value)] += 1
        series[-1] += value

    def family(self) -> Metric:
        """The numbers as prometheus-client's metric family (counts cumulative per ``le``)."""
        if not self.bounds:
            counter = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
            for labels, (value,) in self.series.items():
                counter.add_metric(labels, value, created=self.created[labels])
            return counter
        histogram = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for labels, series in self.series.items():
            histogram.add_metric(
                labels, list(zip(self.edges, accumulate(series[:-1]), strict=True)), series[-1]
            )
            histogram.samples.append(
                Sample(f"{self.name}_created", dict(zip(self.labelnames, labels, strict=True)),
                       self.created[labels])
            )
        return histogram


class _LoopCollector(Collector):
    """Everything the Backend counts, read on the event loop's thread even when scraped
    from another (the ``metrics.port`` listener): the engine's live figures and the
    families belong to that loop."""

    def __init__(self, families: list[_Family]) -> None:
        self._families = families
        self._sample: Callable[[], EngineSample] | None = None
        #: Set while a listener thread scrapes.
        self.loop: asyncio.AbstractEventLoop | None = None

    def _read(self) -> list[Metric]:
        loop = self.loop
        try:
            on_loop = loop is None or asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop or loop is None:
            return self._metrics()

        async def read() -> list[Metric]:
            return self._metrics()

        return asyncio.run_coroutine_threadsafe(read(), loop).result(SAMPLE_TIMEOUT)

    def _metrics(self) -> list[Metric]:
        metrics = [family.family() for family in self._families]
        if self._sample is not None:
            metrics += _engine_metrics(self._sample())
        return metrics

    def collect(self) -> Iterable[Metric]:
        return self._read()

    def describe(self) -> Iterable[Metric]:
        return ()


def _engine_metrics(sample: EngineSample) -> list[Metric]:
    events = CounterMetricFamily(
        "iobridge_events", "AG-UI events appended to run logs.", labels=["agent"]
    )
    for agent, count in sorted(sample.events.items()):
        events.add_metric([agent], count)
    return [
        GaugeMetricFamily(
            "iobridge_active_runs", "Runs admitted and not yet concluded.", sample.active_runs
        ),
        GaugeMetricFamily(
            "iobridge_retained_runs", "Finished runs kept for resume.", sample.retained_runs
        ),
        GaugeMetricFamily(
            "iobridge_pending_frontend_tool_calls",
            "In-run frontend tool calls waiting for the client's result.",
            sample.pending_tool_calls,
        ),
        events,
    ]


class Metrics:
    """The Backend's metrics; ``registry`` is what ``GET /metrics`` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._runs_started = _Family(
            "iobridge_runs_started", "Runs that emitted RUN_STARTED.", ("agent",)
        )
        self._runs_finished = _Family(
            "iobridge_runs_finished",
            "Runs concluded, by outcome (success, interrupt, cancelled, error).",
            ("agent", "outcome"),
        )
        self._run_errors = _Family(
            "iobridge_run_errors", "Runs that ended with RUN_ERROR, by its code.",
            ("agent", "code"),
        )
        self._first_event = _Family(
            "iobridge_run_first_event_seconds",
            "Seconds from a run's admission to RUN_STARTED in its log (the thread read).",
            ("agent",), FIRST_EVENT_BUCKETS,
        )
        self._run_duration = _Family(
            "iobridge_run_duration_seconds",
            "Seconds from RUN_STARTED to the terminal event (messages stored).",
            ("agent", "outcome"), RUN_BUCKETS,
        )
        self._tool_calls = _Family(
            "iobridge_tool_calls",
            "Tool calls an agent awaited, by kind (server, frontend, deferred, unknown).",
            ("agent", "kind"),
        )
        self._store_seconds = _Family(
            "iobridge_store_operation_seconds",
            "Seconds of thread-store operations (run reads and writes, readiness probes).",
            ("operation",), STORE_BUCKETS,
        )
        self._collector = _LoopCollector([
            self._runs_started, self._runs_finished, self._run_errors, self._first_event,
            self._run_duration, self._tool_calls, self._store_seconds,
        ])
        self.registry.register(self._collector)

    def watch(self, sample: Callable[[], EngineSample]) -> None:
        """Report the engine's live figures (read at scrape time) from ``sample``."""
        self._collector._sample = sample

    def serve(self, host: str, port: int) -> Any:
        """Serve the registry on its own port (``metrics.port``) with prometheus_client's
        standard-library server, in a thread; call from the event loop. Returns the server
        (``shutdown()`` and ``server_close()`` it)."""
        self._collector.loop = asyncio.get_running_loop()
        server, _thread = start_http_server(port, host, registry=self.registry)
        return server

    def run_started(self, agent: str, seconds_to_start: float) -> None:
        self._runs_started.inc(agent)
        self._first_event.observe(seconds_to_start, agent)

    def run_finished(self, agent: str, outcome: str, code: str | None, seconds: float) -> None:
        self._runs_finished.inc(agent, outcome)
        self._run_duration.observe(seconds, agent, outcome)
        if code is not None:
            self._run_errors.inc(agent, code)

    def tool_call(self, agent: str, kind: str) -> None:
        self._tool_calls.inc(agent, kind)

    def store_operation(self, operation: str, seconds: float) -> None:
        self._store_seconds.observe(seconds, operation)
