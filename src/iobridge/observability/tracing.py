"""OpenTelemetry traces: one span per run, a child span per awaited tool call, and
pydantic-ai's own model spans beneath them.

Imported only when tracing is on (``tracing.enabled`` or a ``tracer_provider`` given to the
Backend); it needs the ``otel`` extra (``pip install 'iobridge[otel]'``) unless a provider is
given. pydantic-ai is pointed at the same provider with ``Agent.instrument_all`` for as long as
the Backend is open; its spans nest under the run span because the run's task carries the
run span as the current context.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from iobridge import __version__

if TYPE_CHECKING:
    from iobridge.config import TracingSettings

__all__ = ["RunTracer", "TracingUnavailable", "open_tracer"]

#: ``finish(outcome)`` of a run span; ``finish(kind, is_error)`` of a tool span.
RunFinish = Callable[[str], None]
ToolFinish = Callable[[str, bool], None]


class TracingUnavailable(RuntimeError):
    """Tracing is on but the OpenTelemetry SDK is not installed."""


class RunTracer:
    """Makes the run and tool-call spans (see the module docstring)."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        self._tracer = provider.get_tracer("iobridge", __version__)

    @contextlib.contextmanager
    def run(
        self, *, thread_id: str, run_id: str, agent_id: str, resource_id: str
    ) -> Iterator[RunFinish]:
        """The run's span, current for the block; call the yielded ``finish(outcome)``."""
        attributes = {
            "iobridge.thread_id": thread_id,
            "iobridge.run_id": run_id,
            "iobridge.agent_id": agent_id,
            "iobridge.resource_id": resource_id,
        }
        with self._tracer.start_as_current_span(
            f"run {agent_id}", kind=SpanKind.SERVER, attributes=attributes
        ) as span:
            yield lambda outcome: _finish_run(span, outcome)

    @contextlib.contextmanager
    def tool_call(self, name: str, tool_call_id: str) -> Iterator[ToolFinish]:
        """A tool call's span, current for the block; call ``finish(kind, is_error)``."""
        attributes = {"gen_ai.tool.name": name, "gen_ai.tool.call.id": tool_call_id}
        with self._tracer.start_as_current_span(
            f"tool {name}", attributes=attributes
        ) as span:
            yield lambda kind, is_error: _finish_tool(span, kind, is_error)


def _finish_run(span: Span, outcome: str) -> None:
    span.set_attribute("iobridge.outcome", outcome)
    if outcome == "error":
        span.set_status(Status(StatusCode.ERROR))


def _finish_tool(span: Span, kind: str, is_error: bool) -> None:
    span.set_attribute("iobridge.tool.kind", kind)
    if is_error:
        span.set_status(Status(StatusCode.ERROR))


@contextlib.asynccontextmanager
async def open_tracer(
    settings: TracingSettings, provider: trace.TracerProvider | None = None
) -> AsyncIterator[RunTracer]:
    """A ``RunTracer`` for the Backend's lifetime, with pydantic-ai instrumented alike.

    ``provider`` wins; otherwise ``settings.otlp_endpoint`` gets a provider of our own that
    exports there (flushed on exit); otherwise the process's global provider if one was set
    (``opentelemetry-instrument``, the embedding app), else our own exporting to the
    ``OTEL_EXPORTER_OTLP_*`` environment's endpoint.
    """
    owned = None
    if provider is None:
        provider = trace.get_tracer_provider()
        if settings.otlp_endpoint is not None or isinstance(provider, trace.ProxyTracerProvider):
            provider = owned = _otlp_provider(settings)
    restore = _instrument_pydantic_ai(provider, settings.include_content)
    try:
        yield RunTracer(provider)
    finally:
        restore()
        if owned is not None:
            owned.shutdown()


def _otlp_provider(settings: TracingSettings) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing needs the OpenTelemetry SDK and OTLP exporter: "
            "pip install 'iobridge[otel]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(settings.otlp_endpoint)))
    return provider


def _instrument_pydantic_ai(
    provider: trace.TracerProvider, include_content: bool
) -> Callable[[], None]:
    """Point pydantic-ai agents without their own ``instrument`` at ``provider``."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    before = Agent._instrument_default
    Agent.instrument_all(
        InstrumentationSettings(tracer_provider=provider, include_content=include_content)
    )
    return lambda: Agent.instrument_all(before)
