"""The OpenAPI document says what the server does: its example runs, its forwardedProps keys
are the ones parsed, streaming routes are SSE, and each documented body is the accepted one."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from tests.helpers import parse_sse

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.protocol.options import MODEL_SETTINGS
from iobridge.protocol.resources import MODEL_SETTING_SCHEMAS


def _document() -> dict[str, Any]:
    """The document of a fresh app, built in the test that reads it (one built while pytest
    collects would be built before ``make mutants`` switches a mutant on)."""
    document: dict[str, Any] = create_app(Backend(Settings(database_url="memory://"))).openapi()
    return document


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = _document()["paths"]
    return paths


def _body_schema(path: str) -> dict[str, Any]:
    return dict(_paths()[path]["post"]["requestBody"]["content"]["application/json"]["schema"])


def test_the_run_example_is_valid_and_runs_on_a_fresh_server(serve: Any) -> None:
    run = _paths()["/io-bridge/run"]["post"]["requestBody"]["content"]["application/json"]
    jsonschema.validate(run["example"], run["schema"])
    assert isinstance(run["example"]["forwardedProps"], dict)
    server = serve()
    answer = httpx.post(f"{server.url}/io-bridge/run", json=run["example"], timeout=10)
    assert answer.status_code == 200
    events = parse_sse(answer.text)
    assert events[-1]["type"] == "RUN_FINISHED"
    text = "".join(e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "2 + 3 * 4 = 14." in text


def test_forwarded_props_document_the_keys_the_server_reads() -> None:
    props = _body_schema("/io-bridge/run")["properties"]["forwardedProps"]
    assert set(props["properties"]) == {
        "agentId", "resourceId", "memoryOptions", "modelSettings", "structuredOutput",
        "toolResultMode", "messagesSnapshot", "multitaskStrategy", "replaceFrom",
    }
    assert set(MODEL_SETTING_SCHEMAS) == set(MODEL_SETTINGS)
    assert props["properties"]["toolResultMode"]["enum"] == ["in-run", "next-run"]
    assert props["additionalProperties"] is True


@pytest.mark.parametrize("path", ["/io-bridge/run", "/io-bridge/runs/{run_id}/events"])
def test_streaming_routes_answer_text_event_stream(path: str) -> None:
    operation = next(iter(_paths()[path].values()))
    assert list(operation["responses"]["200"]["content"]) == ["text/event-stream"]


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"result": {"a": 1}}, True),
        ({"content": "text"}, True),
        ({"output": 3}, True),
        ({"error": "boom"}, True),
        ({"isError": True}, False),
        ({}, False),
    ],
)
def test_the_tool_result_schema_matches_what_the_route_accepts(
    body: dict[str, Any], valid: bool
) -> None:
    schema = _body_schema("/io-bridge/runs/{run_id}/tool-calls/{tool_call_id}/result")
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(body))
    assert (not errors) is valid


def test_responses_are_typed() -> None:
    document = _document()
    paths = document["paths"]

    def schema_of(path: str, method: str, status: str = "200") -> dict[str, Any]:
        content = paths[path][method]["responses"][status]["content"]["application/json"]
        return dict(content["schema"])

    assert schema_of("/io-bridge/agents", "get")["$ref"].endswith("/AgentList")
    assert schema_of("/io-bridge/agents/{agentId}", "get")["$ref"].endswith("/Agent")
    assert schema_of("/io-bridge/threads", "post", "201")["$ref"].endswith("/Thread")
    assert schema_of("/io-bridge/threads", "get")["$ref"].endswith("/ThreadPage")
    messages = schema_of("/io-bridge/threads/{threadId}/messages", "get")
    assert messages["$ref"].endswith("/MessagePage")
    items = document["components"]["schemas"]["MessagePage"]["properties"]["messages"]["items"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in items["anyOf"]} == {
        "MastraMessage", "AguiMessage"
    }


def test_the_document_names_the_server_and_groups_its_routes() -> None:
    app = create_app(Backend(Settings(database_url="memory://")))
    document = app.openapi()
    assert app.openapi() is document  # finished once, then served as it is
    assert (document["info"]["title"], document["info"]["summary"]) == (
        "iobridge", "io.Intelligence Agent Protocol backend (AG-UI over SSE)")
    paths = document["paths"]
    tags = {(path, method): operation.get("tags") for path, operations in paths.items()
            for method, operation in operations.items()}
    assert tags[("/io-bridge/run", "post")] == ["runs"]
    assert tags[("/io-bridge/runs/{run_id}/events", "get")] == ["runs"]
    assert tags[("/io-bridge/threads", "get")] == ["threads"]
    assert tags[("/io-bridge/threads/{threadId}", "patch")] == ["threads"]
    assert tags[("/io-bridge/agents", "get")] == ["agents"]
    for health in (("/healthz", "get"), ("/readyz", "get"), ("/metrics", "get"),
                   ("/io-bridge", "get")):
        assert tags[health] == ["health"], health
    assert paths["/io-bridge"]["get"]["summary"] == "What this backend serves"
    metrics = paths["/metrics"]["get"]
    assert metrics["summary"] == "Prometheus metrics (runs, tool calls, events, store latency)"
    assert list(paths["/metrics"]) == ["get"]
    ok = metrics["responses"]["200"]
    assert ok["description"] == "The Prometheus text format (OpenMetrics by Accept)"
    assert ok["content"] == {"text/plain": {"schema": {"type": "string"}},
                             "application/openmetrics-text": {"schema": {"type": "string"}}}


def test_every_prefixed_route_declares_both_credential_schemes() -> None:
    from iobridge.http.security import SECURITY_SCHEMES

    document = _document()
    assert document["components"]["securitySchemes"] == SECURITY_SCHEMES
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            expected = ([{"ApiKey": []}, {"Bearer": []}] if path.startswith("/io-bridge/")
                        else None)
            assert operation.get("security") == expected, (path, method)


def test_every_route_documents_the_guards_answers_and_no_422() -> None:
    from iobridge.http.openapi import STATUS_TEXT

    document = _document()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert schemas["ErrorEnvelope"]["properties"]["error"]["$ref"] == (
        "#/components/schemas/ErrorBody")
    envelope = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (path, method)
            shared = ["400", "431"] + (["415", "408"] if method in ("post", "patch") else [])
            for status in shared:
                assert responses[status]["content"] == envelope, (path, method, status)
            if method == "get":
                assert "415" not in responses and "408" not in responses
            assert responses["431"]["description"] == STATUS_TEXT[431]
    # A route's own description of a status it answers is kept.
    created = document["paths"]["/io-bridge/threads"]["post"]["responses"]
    assert created["409"]["description"] == "The id is taken (THREAD_EXISTS)"
    assert created["415"]["description"] == STATUS_TEXT[415]
