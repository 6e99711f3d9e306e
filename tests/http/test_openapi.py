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

DOCUMENT = create_app(Backend(Settings(database_url="memory://"))).openapi()
PATHS = DOCUMENT["paths"]


def _body_schema(path: str) -> dict[str, Any]:
    return dict(PATHS[path]["post"]["requestBody"]["content"]["application/json"]["schema"])


def test_the_run_example_is_valid_and_runs_on_a_fresh_server(serve: Any) -> None:
    run = PATHS["/io-bridge/run"]["post"]["requestBody"]["content"]["application/json"]
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
    operation = next(iter(PATHS[path].values()))
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
    def schema_of(path: str, method: str, status: str = "200") -> dict[str, Any]:
        content = PATHS[path][method]["responses"][status]["content"]["application/json"]
        return dict(content["schema"])

    assert schema_of("/io-bridge/agents", "get")["$ref"].endswith("/AgentList")
    assert schema_of("/io-bridge/agents/{agentId}", "get")["$ref"].endswith("/Agent")
    assert schema_of("/io-bridge/threads", "post", "201")["$ref"].endswith("/Thread")
    assert schema_of("/io-bridge/threads", "get")["$ref"].endswith("/ThreadPage")
    messages = schema_of("/io-bridge/threads/{threadId}/messages", "get")
    assert messages["$ref"].endswith("/MessagePage")
    items = DOCUMENT["components"]["schemas"]["MessagePage"]["properties"]["messages"]["items"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in items["anyOf"]} == {
        "MastraMessage", "AguiMessage"
    }
