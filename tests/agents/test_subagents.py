"""Subagents (AG-UI 1.0) end to end: a model agent's subagent tools, ``ctx.subagent``, an
AG-UI upstream as a subagent, over real HTTP on loopback with the fake OpenAI-compatible
server; the streams checked with the real ``ag_ui.core`` models, the independent checker and
``iobridge check``'s attribution rule; the stored thread read back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pydantic
import pytest
from ag_ui.core import AgentCapabilities, Event
from tests.agents.fake_openai import FakeOpenAI, calls, error, text
from tests.agents.upstream_apps import pydantic_upstream
from tests.helpers import LiveServer, parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import (
    AgentOutput,
    FinalResult,
    RawEvent,
    ReasoningDelta,
    ReasoningEnd,
    TextEnd,
)
from iobridge.agents.upstream import AgUiUpstreamAgent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.conformance.check.agui10 import subagent_problem
from iobridge.http.app import create_app

EVENT = pydantic.TypeAdapter(Event)


@pytest.fixture
def server_for(tmp_path: Any) -> Iterator[Any]:
    started: list[LiveServer] = []

    def start(definitions: list[dict[str, Any]] = (), agents: list[Agent] = (),  # type: ignore[assignment]
              **overrides: Any) -> LiveServer:
        settings = Settings(agents=definitions, database_url=f"sqlite+aiosqlite:///{tmp_path}/s.db",
                            **overrides)
        server = LiveServer(create_app(Backend(settings, agents=list(agents))))
        started.append(server.__enter__())
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


def model_agents(fake: FakeOpenAI, **lead: Any) -> list[dict[str, Any]]:
    common = {"model": "openai:gpt-4o-mini", "base_url": fake.base_url, "api_key_env": "HOME"}
    return [
        {"id": "lead", "instructions": "You lead.", "subagents": ["helper"], **common, **lead},
        {"id": "helper", "description": "Finds facts.", "instructions": "You help.", **common},
    ]


async def run(server: Any, agent_id: str, run_id: str, say: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        response = await client.post("/io-bridge/run", json=run_body(
            say, run_id=run_id, agentId=agent_id))
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    verify_events(events, thread_id="t1", run_id=run_id)
    for event in events:
        EVENT.validate_python(event)  # the 1.0 models themselves
    assert subagent_problem(events) is None
    return events


async def stored(server: Any) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.get("/io-bridge/threads/t1/messages", params={"format": "agui"})
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def strip(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("timestamp",)}


async def test_a_subagent_tool_streams_attributed_events_and_answers_the_parent(
    server_for: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(
        calls(("c1", "helper", '{"task": "find x"}')),
        text("x is ", "42"),
        text("The helper says 42."),
    )
    server = server_for(model_agents(fake_openai))
    events = await run(server, "lead", "r1", "what is x?")

    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    sub = started["subagentRunId"]
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert call["toolCallName"] == "helper"
    assert strip(started) == {"type": "SUBAGENT_STARTED", "subagentRunId": sub, "name": "helper",
                              "description": "Finds facts.",
                              "parentToolCallId": call["toolCallId"]}
    kinds = [e["type"] for e in events]
    first, last = kinds.index("SUBAGENT_STARTED"), kinds.index("SUBAGENT_FINISHED")
    inside = events[first + 1:last]
    assert [e["type"] for e in inside] == [
        "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END", "STEP_FINISHED"]
    assert all(e["subagentRunId"] == sub for e in inside)
    assert strip(events[last]) == {"type": "SUBAGENT_FINISHED", "subagentRunId": sub,
                                   "outcome": {"type": "success"}}
    # The call ends before the subagent starts; its result (the answer) after it finished.
    assert kinds.index("TOOL_CALL_END") < first
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert kinds.index("TOOL_CALL_RESULT") > last
    assert (result["toolCallId"], result["content"]) == (call["toolCallId"], "x is 42")
    assert "subagentRunId" not in result
    # Nothing of the parent's own carries the attribution.
    outside = events[:first] + events[last + 1:]
    assert not any("subagentRunId" in e for e in outside)

    helper_request, lead_followup = fake_openai.requests[1], fake_openai.requests[2]
    assert [m["role"] for m in helper_request["messages"]] == ["system", "user"]
    assert helper_request["messages"][1]["content"] == "find x"
    assert "tools" not in helper_request  # no frontend tools, no subagents of its own
    assert lead_followup["messages"][-1] == {"role": "tool", "tool_call_id": "c1",
                                             "content": "x is 42"}
    [tool] = fake_openai.requests[0]["tools"]
    assert tool["function"]["name"] == "helper"
    assert tool["function"]["description"] == "Finds facts."

    # Usage of all three model requests (two of the lead, one of the helper) summed.
    assert events[-1]["usage"] == [{"provider": "openai", "model": "fake-model",
                                    "inputTokens": 9, "outputTokens": 15, "totalTokens": 24}]

    thread = await stored(server)
    helper_text = next(e for e in inside if e["type"] == "TEXT_MESSAGE_START")["messageId"]
    assert [(m["role"], m.get("subagentRunId"), m.get("content")) for m in thread] == [
        ("user", None, "what is x?"),
        ("assistant", None, None),
        ("assistant", sub, "x is 42"),
        ("tool", None, "x is 42"),
        ("assistant", None, "The helper says 42."),
    ]
    assert thread[2]["id"] == helper_text
    assert thread[1]["toolCalls"][0]["function"] == {"name": "helper",
                                                     "arguments": '{"task":"find x"}'}

    # The next run: the lead's model sees the call and its result, not the helper's words.
    fake_openai.reset()
    fake_openai.push(text("Still 42."))
    await run(server, "lead", "r2", "sure?")
    history = fake_openai.requests[0]["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant",
                                            "user"]
    assert sum(1 for m in history if m.get("content") == "x is 42") == 1  # the tool result


async def test_a_failing_subagent_ends_with_subagent_error_and_the_parent_goes_on(
    server_for: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(
        calls(("c1", "helper", '{"task": "find x"}')),
        error(400),
        text("The helper failed."),
    )
    server = server_for(model_agents(fake_openai))
    events = await run(server, "lead", "r1", "what is x?")
    [failed] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert failed["code"] == "MODEL_ERROR"
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "MODEL_ERROR" in result["content"]
    assert events[-1]["type"] == "RUN_FINISHED"
    [tool_message] = [m for m in await stored(server) if m["role"] == "tool"]
    assert "error" in tool_message


async def test_a_bad_task_is_a_failed_result_and_no_subagent_starts(
    server_for: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(calls(("c1", "helper", '{"task": ""}')), text("ok"))
    server = server_for(model_agents(fake_openai))
    events = await run(server, "lead", "r1", "go")
    assert not any(e["type"].startswith("SUBAGENT_") for e in events)
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "task" in result["content"]
    assert len(fake_openai.requests) == 2  # the helper's model was never asked


async def test_discovery_declares_the_subagents(server_for: Any, fake_openai: FakeOpenAI) -> None:
    server = server_for(model_agents(fake_openai))
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        agents = {a["id"]: a for a in (await client.get("/io-bridge/agents")).json()["agents"]}
    lead, helper = agents["lead"]["capabilities"], agents["helper"]["capabilities"]
    AgentCapabilities.model_validate(lead, strict=True)
    assert lead["multiAgent"] == {"supported": True, "delegation": True,
                                  "subagents": [{"name": "helper",
                                                 "description": "Finds facts."}]}
    assert helper["multiAgent"] == {"supported": False}
    assert "helper" in [t["name"] for t in lead["tools"]["items"]]


async def test_an_unknown_subagent_makes_the_agent_unavailable(
    server_for: Any, fake_openai: FakeOpenAI
) -> None:
    definitions = model_agents(fake_openai, subagents=["nobody"])
    server = server_for(definitions)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        lead = (await client.get("/io-bridge/agents/lead")).json()
        response = await client.post("/io-bridge/run", json=run_body("hi", agentId="lead"))
    assert lead["status"] == "unavailable"
    assert "subagent 'nobody' is not an agent of this server" in lead["reason"]
    assert response.status_code == 503


def recursive(*, answer: str = "done") -> FunctionAgent:
    """An agent that asks itself again, one level deeper, until it is refused."""

    async def delve(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        result = await ctx.subagent("delver", "deeper")
        yield f"{'refused' if result.is_error else 'got'}: {result.content}"

    return FunctionAgent(delve, id="delver", description="Goes deeper.")


async def test_nesting_is_bounded_and_nested_invocations_name_their_parent(
    server_for: Any,
) -> None:
    server = server_for(agents=[recursive()], max_subagent_depth=2)
    events = await run(server, "delver", "r1", "go")
    starts = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert len(starts) == 2
    assert "parentSubagentRunId" not in starts[0]
    assert starts[1]["parentSubagentRunId"] == starts[0]["subagentRunId"]
    # The innermost call was refused; each level answered its caller.
    texts = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"
                    and e.get("subagentRunId") == starts[1]["subagentRunId"])
    assert texts.startswith("refused:") and "SUBAGENT_TOO_DEEP" in texts
    [own] = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e]
    assert own["delta"].startswith("got: got: refused:")


async def test_a_python_agent_delegates_to_an_agui_upstream(server_for: Any) -> None:
    with pydantic_upstream() as upstream:
        remote = AgUiUpstreamAgent(upstream.url, id="remote", description="Knows the time.")

        async def ask(ctx: RunContext) -> AsyncIterator[AgentOutput]:
            result = await ctx.subagent("remote", "what time is it?")
            yield f"Remote said: {result.content}"

        server = server_for(agents=[FunctionAgent(ask, id="asker"), remote])
        events = await run(server, "asker", "r1", "go")
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    sub = started["subagentRunId"]
    kinds = [e["type"] for e in events]
    inside = events[kinds.index("SUBAGENT_STARTED") + 1:kinds.index("SUBAGENT_FINISHED")]
    # The upstream's own tool call and its text, all attributed; its run events kept out.
    assert {"TOOL_CALL_START", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"} <= {
        e["type"] for e in inside}
    assert all(e.get("subagentRunId") == sub for e in inside)
    assert not any(e["type"].startswith("RUN_") for e in inside)
    final = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e]
    assert final and final[0]["delta"].startswith("Remote said: ")
    assert len(upstream.bodies) == 1


async def test_a_subagent_that_breaks_a_run_bound_ends_the_run_with_its_terminal_event(
    server_for: Any,
) -> None:
    async def broken(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "working"
        yield RawEvent(event={"type": "TOOL_CALL_START", "toolCallId": "b1",
                              "toolCallName": "x"})
        yield RawEvent(event={"type": "TOOL_CALL_ARGS", "toolCallId": "b1", "delta": "{oops"})
        yield RawEvent(event={"type": "TOOL_CALL_END", "toolCallId": "b1"})
        yield "never shown"

    async def ask(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.subagent("broken", "go")
        yield "never shown either"

    server = server_for(agents=[FunctionAgent(ask, id="asker"),
                                FunctionAgent(broken, id="broken")])
    events = await run(server, "asker", "r1", "go")
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "INVALID_TOOL_ARGS"
    kinds = [e["type"] for e in events]
    assert kinds.count("SUBAGENT_STARTED") == 1 and "SUBAGENT_ERROR" in kinds
    assert "never shown" not in str(events)
    thread = await stored(server)
    assert [m["role"] for m in thread] == ["user"]  # the cut-short text is not stored


async def test_a_subagent_s_reasoning_reaches_the_client_attributed(server_for: Any) -> None:
    """A delegated agent's reasoning is streamed under its subagentRunId (the guard used to
    drop every reasoning event that named a subagent)."""

    async def ponder(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield ReasoningDelta(delta="hmm")
        yield ReasoningEnd()
        yield "42"

    async def lead(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield f"it says {(await ctx.subagent('ponder', 'think')).content}"

    server = server_for(agents=[FunctionAgent(lead, id="lead"),
                                FunctionAgent(ponder, id="ponder", description="Thinks.")])
    events = await run(server, "lead", "r1", "go")
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    sub = started["subagentRunId"]
    reasoning = [e for e in events if e["type"].startswith("REASONING")]
    assert [(e["type"], e.get("delta")) for e in reasoning] == [
        ("REASONING_START", None), ("REASONING_MESSAGE_START", None),
        ("REASONING_MESSAGE_CONTENT", "hmm"), ("REASONING_MESSAGE_END", None),
        ("REASONING_END", None)]
    assert all(e["subagentRunId"] == sub for e in reasoning)


# -- how a subagent's own run ends: what the caller gets, what the stream shows -----------


def delegating(sub: FunctionAgent) -> list[Agent]:
    """``lead`` asks ``sub`` and says what it got, as JSON, in its own text."""

    async def lead(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        got = await ctx.subagent(sub.id, "go")
        yield json.dumps({"content": got.content, "value": got.value, "error": got.is_error})

    return [FunctionAgent(lead, id="lead"), sub]


def own_text(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The lead's answer (its text outside any subagent), parsed."""
    text = "".join(e["delta"] for e in events
                   if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e)
    parsed: dict[str, Any] = json.loads(text)
    return parsed


@pytest.mark.parametrize("result", [{"answer": 42}, None])
async def test_a_subagent_s_run_events_are_kept_out_and_its_run_finished_ends_it(
    server_for: Any, result: Any,
) -> None:
    """An upstream-like subagent's RUN_STARTED, snapshots and state are the run's business,
    not its: left out. Its RUN_FINISHED ends it there; with a ``result`` that is its answer
    (``value`` and JSON ``content``), without one its last text is."""

    async def calc(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield RawEvent(event={"type": "RUN_STARTED", "threadId": "x", "runId": "y"})
        yield RawEvent(event={"type": "STATE_SNAPSHOT", "snapshot": {"leak": 1}})
        yield RawEvent(event={"type": "STATE_DELTA",
                              "delta": [{"op": "add", "path": "/leak", "value": 2}]})
        yield RawEvent(event={"type": "MESSAGES_SNAPSHOT", "messages": []})
        yield "worked it out"
        finished = {"type": "RUN_FINISHED", "threadId": "x", "runId": "y"}
        yield RawEvent(event=finished if result is None else {**finished, "result": result})
        yield "never shown"

    server = server_for(agents=delegating(FunctionAgent(calc, id="calc")))
    events = await run(server, "lead", "r1", "go")
    kinds = [e["type"] for e in events]
    assert kinds.count("RUN_STARTED") == 1 and kinds.count("RUN_FINISHED") == 1
    assert not {"STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT"} & set(kinds)
    assert "never shown" not in str(events) and "leak" not in str(events)
    [finished] = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert finished["outcome"] == {"type": "success"}
    got = own_text(events)
    assert got["error"] is False
    if result is None:
        assert "result" not in finished
        assert got == {"content": "worked it out", "value": None, "error": False}
    else:
        assert finished["result"] == result
        assert got["value"] == result and json.loads(got["content"]) == result


async def test_a_subagent_s_final_result_is_its_answer(server_for: Any) -> None:
    async def calc(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "computing"
        yield FinalResult(value=[1, 2])

    server = server_for(agents=delegating(FunctionAgent(calc, id="calc")))
    events = await run(server, "lead", "r1", "go")
    [finished] = [e for e in events if e["type"] == "SUBAGENT_FINISHED"]
    assert finished["result"] == [1, 2]
    got = own_text(events)
    assert got["value"] == [1, 2] and json.loads(got["content"]) == [1, 2]


@pytest.mark.parametrize(("error", "message", "code"), [
    ({"message": "quota gone", "code": "UPSTREAM_QUOTA"}, "quota gone", "UPSTREAM_QUOTA"),
    ({"message": 7, "code": ["x"]}, "The subagent failed.", "AGENT_ERROR"),
])
async def test_a_subagent_s_run_error_is_its_failure_and_the_run_goes_on(
    server_for: Any, error: dict[str, Any], message: str, code: str,
) -> None:
    async def failing(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "trying"
        yield RawEvent(event={"type": "RUN_ERROR", **error})
        yield "never shown"

    server = server_for(agents=delegating(FunctionAgent(failing, id="failing")))
    events = await run(server, "lead", "r1", "go")
    [failed] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert (failed["message"], failed["code"]) == (message, code)
    assert [e["type"] for e in events].count("RUN_ERROR") == 0
    assert events[-1]["type"] == "RUN_FINISHED" and "never shown" not in str(events)
    got = own_text(events)
    assert got["error"] is True
    assert json.loads(got["content"]) == {"error": message, "code": code}


async def test_a_subagent_that_interrupts_fails_and_the_run_is_not_interrupted(
    server_for: Any,
) -> None:
    async def asking(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt("approval", message="may I?")
        yield "never shown"

    server = server_for(agents=delegating(FunctionAgent(asking, id="asking")))
    events = await run(server, "lead", "r1", "go")
    [failed] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert failed["code"] == "SUBAGENT_INTERRUPTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1].get("outcome", {"type": "success"})["type"] == "success"
    got = own_text(events)
    assert got["error"] is True and json.loads(got["content"])["code"] == "SUBAGENT_INTERRUPTED"


async def test_a_subagent_that_crashes_fails_without_its_details(
    server_for: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    async def crashing(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "starting"
        raise RuntimeError("secret detail")

    server = server_for(agents=delegating(FunctionAgent(crashing, id="crashing")))
    with caplog.at_level("ERROR", logger="iobridge.runtime"):
        events = await run(server, "lead", "r1", "go")
    [failed] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert (failed["message"], failed["code"]) == ("The subagent failed unexpectedly.",
                                                    "AGENT_ERROR")
    assert "secret detail" not in str(events) and events[-1]["type"] == "RUN_FINISHED"
    assert any("subagent crashing failed in run" in r.getMessage() and r.exc_info
               for r in caplog.records)


async def test_an_unknown_subagent_is_a_failed_result_and_nothing_starts(
    server_for: Any,
) -> None:
    async def lead(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        got = await ctx.subagent("nobody", "go")
        yield json.dumps({"content": got.content, "error": got.is_error})

    server = server_for(agents=[FunctionAgent(lead, id="lead")])
    events = await run(server, "lead", "r1", "go")
    assert not any(e["type"].startswith("SUBAGENT_") for e in events)
    got = own_text(events)
    assert got["error"] is True and json.loads(got["content"])["code"] == "AGENT_NOT_FOUND"


async def test_the_answer_is_the_subagent_s_last_message_and_its_own_subagents_nest(
    server_for: Any,
) -> None:
    """Only the subagent's own last text answers its caller (not an earlier message, not a
    nested invocation's); a subagent an upstream-like subagent reports nests under it."""

    async def inner(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "inner words"

    async def mid(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "first message"
        yield TextEnd()
        yield RawEvent(event={"type": "SUBAGENT_STARTED", "subagentRunId": "u1",
                              "name": "remote-helper"})
        yield RawEvent(event={"type": "SUBAGENT_FINISHED", "subagentRunId": "u1",
                              "outcome": {"type": "success"}})
        yield "second message"
        yield TextEnd()
        await ctx.subagent("inner", "go")

    server = server_for(agents=[*delegating(FunctionAgent(mid, id="mid")),
                                FunctionAgent(inner, id="inner")])
    events = await run(server, "lead", "r1", "go")
    starts = {e["subagentRunId"]: e for e in events if e["type"] == "SUBAGENT_STARTED"}
    [outer] = [s for s in starts.values() if s["name"] == "mid"]
    assert starts["u1"]["parentSubagentRunId"] == outer["subagentRunId"]
    [nested] = [s for s in starts.values() if s["name"] == "inner"]
    assert nested["parentSubagentRunId"] == outer["subagentRunId"]
    assert own_text(events)["content"] == "second message"
