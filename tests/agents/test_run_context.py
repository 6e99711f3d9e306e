"""What an agent does through its ``RunContext``, seen in the run's events, through a Backend:
interrupts (what is asked, and the answers a resumed run replays), token usage on the
terminal event, tool calls it announces itself, and subagents given a plain string."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from iobridge.agents.context import MAX_INTERRUPT_SERIES, Interrupted, RunContext, ToolResult
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings

AgentFunc = Callable[[RunContext], Any]


@pytest.fixture
def serve() -> Callable[..., Any]:
    def open_backend(*funcs: tuple[str, AgentFunc]) -> Backend:
        agents = [FunctionAgent(func, id=agent_id) for agent_id, func in funcs]
        return Backend(Settings(database_url="memory://"), agents=agents)

    return open_backend


async def _run(backend: Backend, agent_id: str, run_id: str, *, thread: str = "t",
               resume: list[dict[str, Any]] | None = None,
               **extra: Any) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "threadId": thread, "runId": run_id, "agentId": agent_id, "forwardedProps": {},
        "messages": [] if resume else [{"id": f"u-{run_id}", "role": "user", "content": "go"}],
        **extra,
    }
    if resume:
        body["resume"] = resume
    run = await backend.start_run(ANONYMOUS, body)
    assert run.task is not None
    await run.task
    return [json.loads(data) for _, data in run.log.entries(0)]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _interrupts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED", finished
    assert finished["outcome"]["type"] == "interrupt"
    return list(finished["outcome"]["interrupts"])


async def test_an_interrupt_carries_each_detail_the_agent_gives(serve: Callable[..., Any]) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt("approval", message="Deploy?", response_schema=schema,
                            tool_call_id="call-1", expires_at="2030-01-01T00:00:00Z",
                            metadata={"env": "prod"}, id="ask-1")
        yield "unreachable"

    async with serve(("asks", asks)) as backend:
        [interrupt] = _interrupts(await _run(backend, "asks", "r1"))
    assert interrupt == {"id": "ask-1", "reason": "approval", "message": "Deploy?",
                         "toolCallId": "call-1", "responseSchema": schema,
                         "expiresAt": "2030-01-01T00:00:00Z", "metadata": {"env": "prod"}}


async def test_an_interrupt_with_only_a_reason_has_a_generated_id_and_nothing_else(
    serve: Callable[..., Any],
) -> None:
    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt("input")
        yield "unreachable"

    async with serve(("asks", asks)) as backend:
        [interrupt] = _interrupts(await _run(backend, "asks", "r1"))
    assert set(interrupt) == {"id", "reason"} and interrupt["reason"] == "input"
    assert len(interrupt["id"]) == 32


@pytest.mark.parametrize("reason", ["", None])
async def test_an_interrupt_without_a_reason_fails_the_run(
    serve: Callable[..., Any], reason: Any
) -> None:
    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt(reason)
        yield "unreachable"

    async with serve(("asks", asks)) as backend:
        events = await _run(backend, "asks", "r1")
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "AGENT_ERROR"


async def test_an_interrupt_id_that_is_not_a_valid_id_fails_the_run(
    serve: Callable[..., Any],
) -> None:
    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt("approval", id="bad id\n")
        yield "unreachable"

    async with serve(("asks", asks)) as backend:
        events = await _run(backend, "asks", "r1")
    assert events[-1]["type"] == "RUN_ERROR"


async def test_successive_interrupts_are_answered_in_order_on_each_resumed_run(
    serve: Callable[..., Any],
) -> None:
    """The n-th ``interrupt`` call of a re-run gets the n-th answer of the series, with the
    answer's payload and metadata."""

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        first = await ctx.interrupt("first")
        second = await ctx.interrupt("second")
        third = await ctx.interrupt("third")
        yield (f"{first.interrupt_id == ctx.answered[0].interrupt_id} "
               f"{first.payload} {first.metadata} {second.status} {second.cancelled} "
               f"{third.payload}")

    async with serve(("asks", asks)) as backend:
        [one] = _interrupts(await _run(backend, "asks", "r1"))
        assert one["reason"] == "first"
        [two] = _interrupts(await _run(backend, "asks", "r2", resume=[{
            "interruptId": one["id"], "status": "resolved", "payload": 1,
            "metadata": {"by": "ann"}}]))
        assert two["reason"] == "second"
        [three] = _interrupts(await _run(backend, "asks", "r3", resume=[
            {"interruptId": two["id"], "status": "cancelled"}]))
        assert three["reason"] == "third"
        events = await _run(backend, "asks", "r4", resume=[
            {"interruptId": three["id"], "status": "resolved", "payload": 3}])
    assert _text(events) == "True 1 {'by': 'ann'} cancelled True 3"


async def test_an_interrupt_with_an_id_gets_its_own_answer_whatever_the_order(
    serve: Callable[..., Any],
) -> None:
    """A re-run that asks in another order still gets each answer by id."""

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if ctx.resuming:
            later = await ctx.interrupt("b", id="b")
            sooner = await ctx.interrupt("a", id="a")
            yield f"{sooner.payload}{later.payload}"
            return
        await ctx.interrupt("a", id="a")
        yield "unreachable"

    async with serve(("asks", asks)) as backend:
        _interrupts(await _run(backend, "asks", "r1"))
        [asked] = _interrupts(await _run(backend, "asks", "r2", resume=[
            {"interruptId": "a", "status": "resolved", "payload": "A"}]))
        assert asked["id"] == "b"
        events = await _run(backend, "asks", "r3", resume=[
            {"interruptId": "b", "status": "resolved", "payload": "B"}])
    assert _text(events) == "AB"


async def test_a_series_of_interrupts_is_bounded(serve: Callable[..., Any]) -> None:
    """The agent may ask ``MAX_INTERRUPT_SERIES`` times in a row; asking once more fails."""

    async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        while True:
            await ctx.interrupt("again")
            yield "."

    async with serve(("asks", asks)) as backend:
        [asked] = _interrupts(await _run(backend, "asks", "r0"))
        for n in range(1, MAX_INTERRUPT_SERIES):
            [asked] = _interrupts(await _run(backend, "asks", f"r{n}", resume=[
                {"interruptId": asked["id"], "status": "resolved"}]))
        events = await _run(backend, "asks", "last", resume=[
            {"interruptId": asked["id"], "status": "resolved"}])
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "TOO_MANY_INTERRUPTS"
    assert events[-1]["message"] == (
        f"the agent asked more than {MAX_INTERRUPT_SERIES} times in a row")


async def test_token_usage_is_summed_per_provider_and_model_on_the_terminal_event(
    serve: Callable[..., Any],
) -> None:
    """Counts that are not non-negative integers, and unknown keys, are left out; a request
    with nothing valid adds no entry."""

    async def counts(ctx: RunContext) -> str:
        ctx.add_usage("openai", "gpt", {"inputTokens": 10, "outputTokens": 0})
        ctx.add_usage("openai", "gpt", {"inputTokens": 5, "outputTokens": 3, "bogus": 9})
        ctx.add_usage("openai", "mini", {"inputTokens": -1, "outputTokens": 2.0,
                                         "totalTokens": True})
        ctx.add_usage(None, "", {"totalTokens": 7})
        ctx.add_usage("anthropic", None, {"inputTokens": 2**60})
        ctx.add_usage("anthropic", None, {"inputTokens": 2**60})
        ctx.add_usage("local", "tiny", {"outputTokens": 0})
        return "done"

    async with serve(("counts", counts)) as backend:
        events = await _run(backend, "counts", "r1")
    assert events[-1]["usage"] == [
        {"provider": "openai", "model": "gpt", "inputTokens": 15, "outputTokens": 3},
        {"totalTokens": 7},
        {"provider": "anthropic", "inputTokens": 2**53 - 1},
        {"provider": "local", "model": "tiny", "outputTokens": 0},
    ]


async def test_an_agent_s_own_tool_call_is_reported_as_it_completes_it(
    serve: Callable[..., Any],
) -> None:
    """A local call named like a frontend tool is the agent's: the run does not wait for
    the client and finishes with the agent's result."""

    async def local(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        handle = ctx.start_tool_call("show", tool_call_id="mine-1", local=True)
        handle.add_args('{"x": 1}')
        handle.complete(ToolResult(content="shown"))
        yield "after"

    async with serve(("local", local)) as backend:
        events = await _run(backend, "local", "r1",
                            tools=[{"name": "show", "description": "Show.", "parameters": {}}])
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallId"] == "mine-1"
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert (result["toolCallId"], result["content"]) == ("mine-1", "shown")
    assert events[-1]["type"] == "RUN_FINISHED" and "outcome" not in events[-1]
    assert _text(events) == "after"


async def test_a_tool_call_with_an_id_is_announced_with_it_and_no_args_as_an_empty_object(
    serve: Callable[..., Any],
) -> None:
    async def calls(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        result = await ctx.call_tool("nowhere", tool_call_id="given-1")
        yield "error" if result.is_error else "ok"

    async with serve(("calls", calls)) as backend:
        events = await _run(backend, "calls", "r1")
    [start] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    [args] = [e for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert (start["toolCallId"], args["delta"]) == ("given-1", "{}")
    assert _text(events) == "error"


async def test_a_subagent_given_a_string_gets_it_as_one_user_message(
    serve: Callable[..., Any],
) -> None:
    async def helper(ctx: RunContext) -> str:
        [message] = ctx.messages
        return f"{message['role']}:{message['content']}:{bool(message['id'])}"

    async def lead(ctx: RunContext) -> str:
        answer = await ctx.subagent("helper", "find it")
        return f"helper said {answer.content}"

    async with serve(("lead", lead), ("helper", helper)) as backend:
        events = await _run(backend, "lead", "r1")
    assert _text(events).endswith("helper said user:find it:True")


async def test_emitted_outputs_carry_the_metadata_the_agent_gives_until_it_stops(
    serve: Callable[..., Any],
) -> None:
    async def tags(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        ctx.annotate({"source": "kb"})
        ctx.emit(f"from {ctx.forwarded_props['origin']}")
        ctx.annotate(None)
        yield " untagged"

    async with serve(("tags", tags)) as backend:
        events = await _run(backend, "tags", "r1", forwardedProps={"origin": "web"})
    assert _text(events) == "from web untagged"
    content = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert content[0]["metadata"] == {"source": "kb"}
    assert "metadata" not in content[-1]


async def test_a_resumed_run_answers_the_call_its_interrupt_asked_about(
    serve: Callable[..., Any],
) -> None:
    async def approves(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not ctx.resuming:
            handle = ctx.start_tool_call("deploy", tool_call_id="deploy-1", local=True)
            handle.end()
        answer = await ctx.interrupt("approval", tool_call_id="deploy-1")
        ctx.answer_earlier_call("deploy-1", ToolResult(content=f"approved={answer.payload}"))
        yield "deployed"

    async with serve(("approves", approves)) as backend:
        [asked] = _interrupts(await _run(backend, "approves", "r1"))
        events = await _run(backend, "approves", "r2", resume=[
            {"interruptId": asked["id"], "status": "resolved", "payload": True}])
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert (result["toolCallId"], result["content"]) == ("deploy-1", "approved=True")
    assert not any(e["type"] == "TOOL_CALL_START" for e in events)


async def test_an_agent_fronting_another_ends_its_run_with_all_its_interrupts(
    serve: Callable[..., Any],
) -> None:
    first = {"id": "up-1", "reason": "approval"}
    second = {"id": "up-2", "reason": "input", "message": "Which one?"}
    raised = Interrupted(first, second)
    assert (raised.interrupt, raised.interrupts, str(raised)) == (first, [first, second], "up-1")

    async def fronts(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "asking upstream"
        raise Interrupted(first, second)

    async with serve(("fronts", fronts)) as backend:
        assert _interrupts(await _run(backend, "fronts", "r1")) == [first, second]
