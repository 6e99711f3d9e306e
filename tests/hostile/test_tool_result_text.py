"""A frontend tool result carrying U+0000 is refused, and the call stays answerable."""

from __future__ import annotations

import json
from typing import Any

import httpx
from tests.helpers import run_body

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


async def test_a_tool_result_with_nul_is_refused_and_the_call_still_pending(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather", tools=[WEATHER])
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/io-bridge/run", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] != "TOOL_CALL_END":
                continue
            path = f"/io-bridge/runs/r1/tool-calls/{event['toolCallId']}/result"
            for bad in ({"content": "sunny\x00"}, {"result": {"k\x00": 1}},
                        {"error": "\x00"}):
                refused = await client.post(path, json=bad)
                assert refused.status_code == 400, bad
                assert refused.json()["error"]["code"] == "INVALID_TEXT"
            assert len(server.runtime.pending) == 1
            accepted = await client.post(path, json={"content": "sunny"})
            assert accepted.status_code == 200
        stored = await client.get("/io-bridge/threads/t1/messages", params={"format": "agui"})
    tool_messages = [m for m in stored.json()["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["sunny"]
