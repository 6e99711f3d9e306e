"""An AG-UI upstream's outcomes, usage, metadata and reasoning values through iobridge, over
real HTTP: its interrupt becomes the client's (stored, resumed through iobridge), its
``usage`` is summed, its cancellation carried, its event ``metadata`` passed on (without the
``ag-ui`` key), its encrypted reasoning kept for it alone."""

from __future__ import annotations

import json
from typing import Any

import httpx
from ag_ui.core import RunFinishedEvent
from tests.agents.test_upstream import RUN_FINISHED, call_events, run, stored, text, text_events
from tests.agents.upstream_apps import Script, approval_upstream, frames, scripted_upstream
from tests.helpers import parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.upstream import AgUiUpstreamAgent


def agent(url: str) -> AgUiUpstreamAgent:
    return AgUiUpstreamAgent(url, id="up")


async def test_an_upstream_interrupt_is_the_clients_and_resumes_through_iobridge(
    serve: Any
) -> None:
    with approval_upstream() as upstream:
        server = serve(agents=[agent(upstream.url)])
        first = await run(server, run_body("delete v1.txt", agentId="up"))
        finished = first[-1]
        RunFinishedEvent.model_validate(finished)
        assert finished["outcome"]["type"] == "interrupt"
        [interrupt] = finished["outcome"]["interrupts"]
        assert interrupt["toolCallId"] == "call-delete"
        assert interrupt["responseSchema"]["required"] == ["approved"]
        assert [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_END"] == ["call-delete"]
        assert upstream.deleted == []
        # The upstream's usage is the run's.
        assert finished["usage"][0]["model"] == "approver"
        assert finished["usage"][0]["totalTokens"] > 0
        # It declared the protocol version iobridge speaks, and sent no resume.
        assert upstream.bodies[0]["protocolVersion"] == "1.0"
        assert "resume" not in upstream.bodies[0]

        answer = {"interruptId": interrupt["id"], "status": "resolved",
                  "payload": {"approved": True}}
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            # Stored: an answer to an interrupt the thread does not hold is refused.
            wrong = await client.post("/io-bridge/run", json={
                "threadId": "t1", "runId": "r-x", "messages": [],
                "resume": [{**answer, "interruptId": "nope"}],
                "forwardedProps": {"agentId": "up"}})
            assert wrong.status_code == 400, wrong.text
            response = await client.post("/io-bridge/run", json={
                "threadId": "t1", "runId": "r2", "messages": [], "resume": [answer],
                "forwardedProps": {"agentId": "up"}})
        second = parse_sse(response.text)
        verify_events(second, thread_id="t1", run_id="r2", earlier_calls={"call-delete"})
        assert second[-1]["type"] == "RUN_FINISHED" and "outcome" not in second[-1]
        assert upstream.deleted == ["v1.txt"]
        assert upstream.bodies[1]["resume"] == [answer]
        sent = upstream.bodies[1]["messages"]
        assert sent[-1]["toolCalls"][0]["id"] == "call-delete"  # the open call went along
        # The client holds the call since the first run: only its result comes now.
        calls = [e["type"] for e in second if e.get("toolCallId") == "call-delete"]
        assert calls == ["TOOL_CALL_RESULT"]
        assert text(second) == "Result: deleted v1.txt"
        history = await stored(server)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["toolCalls"][0]["id"] == "call-delete"
    assert history[2]["toolCallId"] == "call-delete"


async def test_a_declined_upstream_interrupt(serve: Any) -> None:
    with approval_upstream() as upstream:
        server = serve(agents=[agent(upstream.url)])
        first = await run(server, run_body("delete v1.txt", agentId="up"))
        [interrupt] = first[-1]["outcome"]["interrupts"]
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            response = await client.post("/io-bridge/run", json={
                "threadId": "t1", "runId": "r2", "messages": [],
                "resume": [{"interruptId": interrupt["id"], "status": "cancelled"}],
                "forwardedProps": {"agentId": "up"}})
        second = parse_sse(response.text)
        verify_events(second, thread_id="t1", run_id="r2", earlier_calls={"call-delete"})
    assert upstream.deleted == []
    [denied] = [e for e in second if e["type"] == "TOOL_CALL_RESULT"]
    assert denied["toolCallId"] == "call-delete" and "Cancelled" in denied["content"]
    assert upstream.bodies[1]["resume"] == [{"interruptId": interrupt["id"],
                                             "status": "cancelled"}]
    assert second[-1]["type"] == "RUN_FINISHED"


INTERRUPTS = {"type": "interrupt", "interrupts": [
    {"id": "i1", "reason": "approval", "toolCallId": "up-c1"},
    {"id": "i2", "reason": "question", "message": "Which file?"},
]}


async def test_several_interrupts_and_their_calls_in_the_clients_ids(serve: Any) -> None:
    script = Script(chunks=frames(*call_events("up-c1", "erase", "{}"),
                                  {**RUN_FINISHED, "outcome": INTERRUPTS}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1]["outcome"] == INTERRUPTS
    assert "UNANSWERED" not in json.dumps(await stored(server))
    [assistant] = [m for m in await stored(server) if m["role"] == "assistant"]
    # The interrupted call stays open (the resumed run answers it): no error result stored.
    assert [m["role"] for m in await stored(server)] == ["user", "assistant"]
    assert assistant["toolCalls"][0]["id"] == "up-c1"


async def test_a_malformed_upstream_interrupt_is_a_run_error(serve: Any) -> None:
    script = Script(chunks=frames({**RUN_FINISHED, "outcome": {
        "type": "interrupt", "interrupts": [{"id": "i1"}]}}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "INVALID_INTERRUPT"


async def test_a_cancelled_upstream_run_ends_the_clients_run_cancelled(serve: Any) -> None:
    usage = [{"provider": "openai", "model": "m", "inputTokens": 4, "outputTokens": 2,
              "totalTokens": 6}]
    script = Script(chunks=frames(*text_events("m1", "partial"),
                                  {**RUN_FINISHED, "outcome": {"type": "cancelled"},
                                   "usage": usage}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                          "outcome": {"type": "cancelled"}, "usage": usage}
    assert text(events) == "partial"


async def test_usage_of_every_upstream_round_is_summed(serve: Any) -> None:
    def usage(n: int) -> list[dict[str, Any]]:
        return [{"provider": "openai", "model": "m", "inputTokens": n, "outputTokens": 1},
                {"model": "other", "outputTokens": -5, "inputTokens": "x"}]

    def script(body: dict[str, Any]) -> list[bytes]:
        if body["messages"][-1]["role"] == "tool":
            return frames(*text_events("m2", "done"), {**RUN_FINISHED, "usage": usage(10)})
        return frames(*call_events("c1", "get_weather", "{}"),
                      {**RUN_FINISHED, "usage": usage(3)})

    weather = {"name": "get_weather", "description": "", "parameters": {"type": "object"}}
    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", tools=[weather], agentId="up"),
                           results={"get_weather": {}})
    # Summed per provider and model; counts that are not non-negative integers left out.
    assert events[-1]["usage"] == [{"provider": "openai", "model": "m", "inputTokens": 13,
                                    "outputTokens": 2}]


async def test_event_metadata_passes_through_without_the_reserved_key(serve: Any) -> None:
    tagged = {"trace": "abc", "ag-ui": {"internal": 1}}
    script = Script(chunks=frames(
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi", "metadata": tagged},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "STEP_STARTED", "stepName": "s", "metadata": {"ag-ui": {"only": True}}},
        {"type": "STEP_FINISHED", "stepName": "s", "metadata": {"step": 1}},
        {"type": "CUSTOM", "name": "n", "value": 1, "metadata": {"x": [1, None]}},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "t",
         "metadata": {"call": "meta"}},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c1", "content": "ok",
         "metadata": {"result": "meta"}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "p",
         "content": {}, "metadata": {"act": 1, "ag-ui": 2}},
        {"type": "STEP_STARTED", "stepName": "bad", "metadata": "not an object"},
        {**RUN_FINISHED, "metadata": {"run": "meta"}}))
    with scripted_upstream(script) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", agentId="up"))

    def meta(kind: str, **match: Any) -> Any:
        found = [e for e in events if e["type"] == kind
                 and all(e.get(k) == v for k, v in match.items())]
        return [e.get("metadata") for e in found]

    assert meta("TEXT_MESSAGE_CONTENT") == [{"trace": "abc"}]
    assert meta("STEP_STARTED", stepName="s") == [None]  # nothing left once ag-ui is out
    assert meta("STEP_FINISHED", stepName="s") == [{"step": 1}]
    assert meta("CUSTOM") == [{"x": [1, None]}]
    assert meta("TOOL_CALL_START") == [{"call": "meta"}]
    assert meta("TOOL_CALL_RESULT") == [{"result": "meta"}]
    assert meta("ACTIVITY_SNAPSHOT") == [{"act": 1}]
    assert meta("STEP_STARTED", stepName="bad") == [None]
    # Run-scoped events are iobridge's own.
    assert all("metadata" not in e for e in events if e["type"].startswith("RUN_"))


async def test_an_upstream_encrypted_reasoning_value_is_kept_for_it_alone(serve: Any) -> None:
    def script(body: dict[str, Any]) -> list[bytes]:
        return frames(
            {"type": "REASONING_START", "messageId": "rs"},
            {"type": "REASONING_MESSAGE_START", "messageId": "rm", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm", "delta": "hmm"},
            {"type": "REASONING_MESSAGE_END", "messageId": "rm"},
            {"type": "REASONING_END", "messageId": "rs"},
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "rm",
             "encryptedValue": "opaque-1"},
            *call_events("c1", "t", "{}"),
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c1",
             "encryptedValue": "opaque-2"},
            {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c1", "content": "1"},
            {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "m-unknown",
             "encryptedValue": "dropped"},
            *text_events("m1", "ok"), RUN_FINISHED)

    with scripted_upstream(Script(chunks=script)) as upstream, scripted_upstream(
        Script(chunks=frames(*text_events("x", "other"), RUN_FINISHED))
    ) as other:
        server = serve(agents=[agent(upstream.url), AgUiUpstreamAgent(other.url, id="other")])
        events = await run(server, run_body("go", agentId="up"))
        values = [e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE"]
        reasoning_id = next(e["messageId"] for e in events
                            if e["type"] == "REASONING_MESSAGE_START")
        assert [(v["subtype"], v["entityId"], v["encryptedValue"]) for v in values] == [
            ("message", reasoning_id, "opaque-1"), ("tool-call", "c1", "opaque-2")]
        history = await stored(server)
        [reasoning] = [m for m in history if m["role"] == "reasoning"]
        assert reasoning["encryptedValue"] == "opaque-1"
        assert reasoning["metadata"] == {"iobridge": {"agent": "up"}}
        [assistant] = [m for m in history if m.get("toolCalls")]
        assert assistant["toolCalls"][0]["encryptedValue"] == "opaque-2"

        await run(server, run_body("next", run_id="r2", agentId="up"))
        await run(server, run_body("next", run_id="r3", agentId="other"))
    back = upstream.bodies[1]["messages"]
    assert [m for m in back if m["role"] == "reasoning"] == [reasoning]
    assert "opaque-1" not in json.dumps(other.bodies[0]["messages"])
