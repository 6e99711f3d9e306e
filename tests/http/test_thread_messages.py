"""``GET /threads/{id}/messages?format=mastra|agui`` over loopback, after real runs.

A test agent produces reasoning, text, parallel server tools (one failing) and a frontend
tool answered in the next run; the stored thread is then read in both formats and re-sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from tests.helpers import parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, ReasoningDelta
from iobridge.agents.tools import tool

NOTICE = {"name": "show_notice", "description": "Show a notice",
          "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}


@tool
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("secret internals")


async def conversational(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    if ctx.messages[-1].get("content") != "go":
        yield "Noted."
        return
    yield ReasoningDelta(delta="Three tools.")
    yield "Working."
    await asyncio.gather(
        ctx.call_tool("add", {"a": 2, "b": 3}),
        ctx.call_tool("explode", {}),
        ctx.call_tool("show_notice", {"text": "hi"}),
    )


AGENT = FunctionAgent(conversational, id="conv", tools=[add, explode])


async def run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/io-bridge/run", json=body)
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


async def read(client: httpx.AsyncClient, fmt: str | None = None, **params: Any) -> Any:
    if fmt is not None:
        params["format"] = fmt
    response = await client.get("/io-bridge/threads/t1/messages", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def to_agui(mastra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a client holding Mastra messages sends back in AG-UI form."""
    out: list[dict[str, Any]] = []
    for message in mastra:
        parts = message["content"]["parts"]
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        if message["role"] != "assistant":
            out.append({"id": message["id"], "role": message["role"], "content": text})
            continue
        invocations = [p["toolInvocation"] for p in parts if p["type"] == "tool-invocation"]
        assistant: dict[str, Any] = {"id": message["id"], "role": "assistant", "content": text}
        if invocations:
            assistant["toolCalls"] = [
                {"id": i["toolCallId"], "type": "function",
                 "function": {"name": i["toolName"], "arguments": json.dumps(i["args"])}}
                for i in invocations
            ]
        out.append(assistant)
        out.extend(
            {"id": f"re-{i['toolCallId']}", "role": "tool", "toolCallId": i["toolCallId"],
             "content": json.dumps(i["result"])}
            for i in invocations if i["state"] == "result"
        )
    return out


async def test_both_formats_after_real_runs_and_resending_duplicates_nothing(
    serve: Any,
) -> None:
    server = serve(agents=[AGENT])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await run(client, run_body("go", run_id="r1", tools=[NOTICE],
                                   toolResultMode="next-run", resourceId="alice"))
        agui = (await read(client, "agui"))["messages"]
        assert [m["role"] for m in agui] == ["user", "reasoning", "assistant", "tool", "tool"]
        user, reasoning, assistant, first, second = agui
        calls = {c["function"]["name"]: c["id"] for c in assistant["toolCalls"]}
        assert set(calls) == {"add", "explode", "show_notice"}
        results = {m["toolCallId"]: m for m in (first, second)}
        assert "error" in results[calls["explode"]] and calls["show_notice"] not in results

        # The frontend answers in the next run, re-sending the whole AG-UI history.
        answer = {"id": "answer-1", "role": "tool", "toolCallId": calls["show_notice"],
                  "content": '{"shown":true}'}
        body = run_body("unused", run_id="r2", tools=[NOTICE], resourceId="alice")
        body["messages"] = [*agui, answer]
        await run(client, body)
        agui = (await read(client, "agui"))["messages"]
        assert [m["role"] for m in agui] == [
            "user", "reasoning", "assistant", "tool", "tool", "tool", "assistant"
        ]
        final = agui[-1]

        mastra_body = await read(client)
        assert mastra_body == await read(client, "mastra")
        assert "nextCursor" not in mastra_body
        mastra = mastra_body["messages"]
        times = [m["createdAt"] for m in mastra]
        assert all(t.endswith("Z") and t[10] == "T" for t in times)
        common = {"threadId": "t1", "resourceId": "alice", "type": "v2"}
        assert mastra == [
            {"id": user["id"], "role": "user", "createdAt": times[0], **common,
             "content": {"format": 2, "parts": [{"type": "text", "text": "go"}],
                         "content": "go"}},
            {"id": assistant["id"], "role": "assistant", "createdAt": times[1], **common,
             "content": {"format": 2, "content": "Working.Noted.", "parts": [
                 {"type": "reasoning", "reasoning": "Three tools.",
                  "details": [{"type": "text", "text": "Three tools."}]},
                 {"type": "text", "text": "Working."},
                 {"type": "tool-invocation", "toolInvocation": {
                     "state": "result", "toolCallId": calls["add"], "toolName": "add",
                     "args": {"a": 2, "b": 3}, "result": {"sum": 5}}},
                 {"type": "tool-invocation", "toolInvocation": {
                     "state": "result", "toolCallId": calls["explode"], "toolName": "explode",
                     "args": {}, "result": {"error": "tool 'explode' failed"},
                     "isError": True}},
                 {"type": "tool-invocation", "toolInvocation": {
                     "state": "result", "toolCallId": calls["show_notice"],
                     "toolName": "show_notice", "args": {"text": "hi"},
                     "result": {"shown": True}}},
                 {"type": "step-start"},
                 {"type": "text", "text": "Noted."},
             ]}},
        ]
        assert final["content"] == "Noted." and reasoning["content"] == "Three tools."

        # Re-sending either form as a run's AG-UI history stores only the new message.
        for run_id, history in (("r3", agui), ("r4", to_agui(mastra))):
            body = run_body("more", run_id=run_id, resourceId="alice")
            body["messages"] = [*history, *body["messages"]]
            await run(client, body)
            grown = (await read(client, "agui"))["messages"]
            assert grown[: len(agui)] == agui
            assert [m["role"] for m in grown[len(agui):]] == ["user", "assistant"]
            agui = grown
        assert len({m["id"] for m in agui}) == len(agui)


async def test_limit_returns_the_latest_messages_with_a_cursor_and_never_splits_calls(
    serve: Any,
) -> None:
    server = serve(agents=[AGENT])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await run(client, run_body("go", run_id="r1", tools=[NOTICE], toolResultMode="next-run"))
        agui = (await read(client, "agui"))["messages"]  # user, reasoning, assistant, 2 tools
        ids = [m["id"] for m in agui]

        page = await read(client, "agui", limit=1)
        # The last tool result pulls its call's assistant message (and the tool before it).
        assert [m["id"] for m in page["messages"]] == ids[2:]
        assert page["nextCursor"] == ids[2]
        older = await read(client, "agui", limit=5, cursor=page["nextCursor"])
        assert [m["id"] for m in older["messages"]] == ids[:2]
        assert "nextCursor" not in older
        same = await read(client, "agui", limit=5, before=page["nextCursor"])
        assert same == older

        mastra_page = await read(client, limit=1)
        assert [m["id"] for m in mastra_page["messages"]] == [ids[2]]
        assert mastra_page["nextCursor"] == ids[2]
        parts = mastra_page["messages"][0]["content"]["parts"]
        states = [p["toolInvocation"]["state"] for p in parts if p["type"] == "tool-invocation"]
        assert states == ["result", "result", "call"]


async def test_messages_format_setting_and_bad_queries(serve: Any) -> None:
    server = serve(agents=[AGENT], messages_format="agui")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await run(client, run_body("hello", run_id="r1"))
        assert (await read(client))["messages"][0] == {"id": "u-r1", "role": "user",
                                                       "content": "hello"}
        assert (await read(client, "mastra"))["messages"][0]["content"]["format"] == 2
        bad = [
            ({"format": "v1"}, "INVALID_REQUEST"),
            ({"cursor": "a", "before": "b"}, "INVALID_CURSOR"),
            ({"cursor": "nope"}, "INVALID_CURSOR"),
            ({"cursor": "x\n"}, "INVALID_CURSOR"),
            ({"limit": "0"}, "INVALID_REQUEST"),
        ]
        for params, code in bad:
            response = await client.get("/io-bridge/threads/t1/messages", params=params)
            assert response.status_code == 400, (params, response.text)
            assert response.json()["error"]["code"] == code
