"""Nesting and big integers in what a client sends: a clear 4xx before any work, never a 5xx.

Measured on af03d35: ``state`` nested 255 levels answered 500 (orjson encodes at most 254),
a tool result nested ~1,000 answered 500 (``json.dumps`` recursion), a ``structuredOutput``
schema nested 100 answered 500, and integers beyond 64 bits became floats silently. Bodies
are spliced as bytes: the standard ``json`` module could not even write them.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest
from tests.helpers import parse_sse, run_body

from iobridge.config import Settings

from .conftest import Rig

#: ``Settings().max_json_depth`` (a literal, so that this file also runs on the code before
#: the limit, where each test fails; ``test_the_default_depth_limit`` ties the two).
DEFAULT_MAX_JSON_DEPTH = 64

BASE = "/io-bridge"
HOLE = "@@hole@@"
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


def nest(depth: int, *, objects: bool = False) -> bytes:
    """JSON nesting ``depth`` arrays (or objects with key ``k``) around ``0``."""
    if objects:
        return b'{"k":' * depth + b"0" + b"}" * depth
    return b"[" * depth + b"0" + b"]" * depth


def splice(body: dict[str, Any], value: bytes) -> bytes:
    """``body`` encoded, with ``HOLE`` (one string value in it) replaced by ``value``."""
    encoded = json.dumps(body).encode()
    hole = json.dumps(HOLE).encode()
    assert encoded.count(hole) == 1
    return encoded.replace(hole, value)


def post(client: httpx.AsyncClient, path: str, content: bytes) -> Any:
    return client.post(path, content=content, headers={"content-type": "application/json"})


def run_with(field: str) -> dict[str, Any]:
    """A run body whose ``field`` holds ``HOLE``."""
    body = run_body("hi")
    if field == "state":
        body["state"] = HOLE
    elif field == "content":
        body["messages"][0]["content"] = [{"type": "text", "text": "x", "extra": HOLE}]
    elif field == "arguments":
        body["messages"] = [
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": HOLE}}]},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"},
            {"id": "u1", "role": "user", "content": "hi"},
        ]
    elif field == "forwardedProps":
        body["forwardedProps"] = {"custom": HOLE}
    elif field == "structuredOutput":
        body["forwardedProps"] = {"structuredOutput": {"schema": HOLE}}
    elif field == "context":
        body["context"] = [{"description": "d", "value": "v", "extra": HOLE}]
    elif field == "tools":
        body["tools"] = [{"name": "t", "parameters": HOLE}]
    elif field == "resume":
        body["resume"] = [{"interruptId": "i", "status": "resolved", "payload": HOLE}]
    return body


RUN_FIELDS = ["state", "content", "arguments", "forwardedProps", "structuredOutput", "context",
              "tools", "resume"]


def encoded_arguments(value: bytes) -> bytes:
    """``value`` as the JSON string a tool call's ``arguments`` holds."""
    return orjson.dumps(value.decode())


@pytest.mark.parametrize("field", RUN_FIELDS)
@pytest.mark.parametrize("depth", [DEFAULT_MAX_JSON_DEPTH + 1, 255, 1000, 5000])
async def test_a_run_nested_past_the_limit_is_refused_before_anything_runs(
    rig: Rig, field: str, depth: int
) -> None:
    value = nest(depth)
    if field == "arguments":
        value = encoded_arguments(value)
    response = await post(rig.client, f"{BASE}/run", splice(run_with(field), value))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "JSON_TOO_DEEP"
    assert await rig.store.get_thread("t1") is None


@pytest.mark.parametrize("field", ["state", "forwardedProps", "arguments", "content"])
async def test_a_run_at_the_depth_limit_runs(rig: Rig, field: str) -> None:
    body = run_with(field)
    # The body's own levels: the limit counts from the body itself.
    around = {"state": 1, "forwardedProps": 2, "arguments": 0, "content": 5}[field]
    value, over = nest(DEFAULT_MAX_JSON_DEPTH - around), nest(DEFAULT_MAX_JSON_DEPTH - around + 1)
    if field == "arguments":
        value, over = encoded_arguments(value), encoded_arguments(over)
    refused = await post(rig.client, f"{BASE}/run", splice(body, over))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "JSON_TOO_DEEP"
    response = await post(rig.client, f"{BASE}/run", splice(body, value))
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]


async def test_a_schema_nested_100_levels_is_refused(rig: Rig) -> None:
    schema: bytes = b'{"type":"string"}'
    for _ in range(50):  # 100 JSON levels
        schema = b'{"type":"object","properties":{"a":' + schema + b"}}"
    response = await post(rig.client, f"{BASE}/run", splice(run_with("structuredOutput"), schema))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "JSON_TOO_DEEP"


@pytest.mark.parametrize("depth", [255, 1000])
async def test_a_nested_thread_body_is_refused(rig: Rig, depth: int) -> None:
    body = splice({"id": "t", "metadata": {"k": HOLE}}, nest(depth, objects=True))
    response = await post(rig.client, f"{BASE}/threads", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "JSON_TOO_DEEP"
    assert await rig.store.get_thread("t") is None
    created = await rig.client.post(f"{BASE}/threads", json={"id": "t2"})
    assert created.status_code == 201
    patched = await rig.client.patch(
        f"{BASE}/threads/t2", content=splice({"metadata": {"k": HOLE}}, nest(depth)),
        headers={"content-type": "application/json"},
    )
    assert patched.status_code == 400 and patched.json()["error"]["code"] == "JSON_TOO_DEEP"
    assert (await rig.store.get_thread("t2")).metadata == {}  # type: ignore[union-attr]


async def test_a_nested_tool_result_is_refused_and_the_call_stays_pending(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather", tools=[WEATHER])
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        client.stream("POST", f"{BASE}/run", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] != "TOOL_CALL_END":
                continue
            path = f"{BASE}/runs/r1/tool-calls/{event['toolCallId']}/result"
            for depth in (255, 1000, 5000):
                refused = await post(client, path, splice({"result": HOLE}, nest(depth)))
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["code"] == "JSON_TOO_DEEP"
            big = await post(client, path, b'{"result": {"n": 18446744073709551616}}')
            assert big.status_code == 400
            assert big.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE"
            assert len(server.runtime.pending) == 1
            accepted = await post(client, path, splice({"result": HOLE}, nest(60)))
            assert accepted.status_code == 200
        stored = await client.get(f"{BASE}/threads/t1/messages", params={"format": "agui"})
        mastra = await client.get(f"{BASE}/threads/t1/messages")
    assert mastra.status_code == 200
    [tool_message] = [m for m in stored.json()["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == nest(60).decode()


def test_the_default_depth_limit() -> None:
    assert Settings().max_json_depth == DEFAULT_MAX_JSON_DEPTH


# -- integers beyond 64 bits: refused, never rounded -------------------------------------------

@pytest.mark.parametrize(
    "number", ["18446744073709551616", "-9223372036854775809", "1" + "0" * 400],
)
async def test_an_integer_beyond_64_bits_is_refused(rig: Rig, number: str) -> None:
    response = await post(rig.client, f"{BASE}/run",
                          splice(run_with("state"), b'{"n": ' + number.encode() + b"}"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE"
    assert await rig.store.get_thread("t1") is None
    thread = await post(rig.client, f"{BASE}/threads",
                        b'{"id": "t", "metadata": {"n": ' + number.encode() + b"}}")
    assert thread.status_code == 400
    assert thread.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE"


async def test_integers_at_the_64_bit_bounds_are_kept_exactly(rig: Rig) -> None:
    body = b'{"id": "t", "metadata": {"hi": 18446744073709551615, "lo": -9223372036854775808,' \
           b' "digits": "123456789012345678901234567890", "float": 1.8446744073709552e19}}'
    created = await post(rig.client, f"{BASE}/threads", body)
    assert created.status_code == 201, created.text
    stored = await rig.client.get(f"{BASE}/threads/t")
    assert json.loads(stored.content)["metadata"] == {
        "hi": 2**64 - 1, "lo": -(2**63), "digits": "123456789012345678901234567890",
        "float": 1.8446744073709552e19}


async def test_a_long_digit_string_is_not_an_integer(rig: Rig) -> None:
    response = await rig.client.post(f"{BASE}/run", json=run_body("order 123456789012345678901234"))
    assert response.status_code == 200
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
