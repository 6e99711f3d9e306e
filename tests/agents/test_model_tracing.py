"""pydantic-ai's own spans nest under iobridge's run span (tracing on, a model agent from
``[[agents]]`` against the local OpenAI-compatible fake, over real HTTP)."""

from __future__ import annotations

import httpx
from fake_openai import FakeOpenAI, text
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent as PydanticAgent
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import mount

QUESTION = "Which fjord is the longest in Norway?"


def _ancestors(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in spans:
        span = spans[span.parent.span_id]
        names.append(span.name)
    return names


async def test_model_spans_are_children_of_the_run_span(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text("The Sognefjord", "."))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(
        database_url="memory://",
        agents=[{"id": "assistant", "model": "openai:gpt-4o", "base_url": fake_openai.base_url}],
    )
    before = PydanticAgent._instrument_default
    app = FastAPI()
    mount(app, Backend(settings, tracer_provider=provider))
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            response = await client.post(
                "/io-bridge/run", json=run_body(QUESTION, agentId="assistant")
            )
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    # Closing the backend gives pydantic-ai its previous default back.
    assert PydanticAgent._instrument_default is before
    spans = {s.context.span_id: s for s in exporter.get_finished_spans()}
    model_spans = [
        s for s in spans.values()
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == "pydantic-ai"
    ]
    assert model_spans, [s.name for s in spans.values()]
    for span in model_spans:
        assert _ancestors(span, spans)[-1] == "run assistant"
    assert any(s.name.startswith("chat ") for s in model_spans)
    # include_content is off by default: no prompt or reply text in any span.
    for span in spans.values():
        for attribute in (span.attributes or {}).values():
            assert QUESTION not in str(attribute) and "Sognefjord" not in str(attribute)
