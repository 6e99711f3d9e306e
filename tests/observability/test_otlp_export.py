"""``tracing.otlp_endpoint``: spans reach an OTLP/HTTP receiver on loopback (protobuf, decoded
with the OpenTelemetry protocol's own messages), flushed when the backend closes."""

from __future__ import annotations

import httpx
from fastapi import FastAPI, Request, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app


def test_run_spans_are_exported_over_otlp_http() -> None:
    received: list[tuple[str, bytes]] = []
    collector = FastAPI()

    @collector.post("/v1/traces")
    async def traces(request: Request) -> Response:
        received.append((request.headers["content-type"], await request.body()))
        return Response(ExportTraceServiceRequest().SerializeToString(),
                        media_type="application/x-protobuf")

    with LiveServer(collector) as receiver:
        settings = Settings(
            database_url="memory://",
            tracing={"enabled": True, "otlp_endpoint": f"{receiver.url}/v1/traces",
                     "service_name": "iobridge-test"},
        )
        with LiveServer(create_app(Backend(settings))) as server:
            ran = httpx.post(f"{server.url}/io-bridge/run",
                             json=run_body("What time is it?", run_id="r-otlp"))
            assert parse_sse(ran.text)[-1]["type"] == "RUN_FINISHED"
        # The server has closed: its provider flushed what was batched.
    assert received, "no OTLP request arrived"
    spans, services = [], set()
    for content_type, body in received:
        assert content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                spans.extend(scope_spans.spans)
    assert services == {"iobridge-test"}
    [run] = [s for s in spans if s.name == "run demo"]
    attributes = {a.key: a.value.string_value for a in run.attributes}
    assert attributes["iobridge.run_id"] == "r-otlp"
    assert attributes["iobridge.outcome"] == "success"
    [tool] = [s for s in spans if s.name == "tool current_time"]
    assert tool.parent_span_id == run.span_id and tool.trace_id == run.trace_id
