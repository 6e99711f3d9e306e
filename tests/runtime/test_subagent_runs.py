"""How a subagent's run ends inside its parent's (in one test process, the Backend itself):
what its caller is told when it asks for input or crashes, and that its generator is closed
at once when it ends the subagent with RUN_FINISHED (its cleanup runs before the parent
goes on)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.test_revival import database, events_of

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, RawEvent
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings


async def lead_run(tmp_path: Path, sub: FunctionAgent, log: list[str]) -> list[dict[str, Any]]:
    """``lead`` asks ``sub`` (noting in ``log`` when it has the answer) and says what it got,
    as JSON; the run's events."""

    async def lead(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        got = await ctx.subagent(sub.id, "go")
        log.append("lead has the answer")
        yield json.dumps({"content": got.content, "error": got.is_error})

    settings = Settings(database_url=await database(tmp_path))
    async with Backend(settings, agents=[FunctionAgent(lead, id="lead"), sub]) as b:
        run = await b.start_run(ANONYMOUS, {
            "threadId": "t1", "runId": "r1", "tools": [], "context": [], "state": {},
            "messages": [{"id": "u1", "role": "user", "content": "go"}],
            "forwardedProps": {"agentId": "lead"}})
        return await events_of(run)


def answer(events: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(e["delta"] for e in events
                   if e["type"] == "TEXT_MESSAGE_CONTENT" and "subagentRunId" not in e)
    parsed: dict[str, Any] = json.loads(text)
    return parsed


async def test_a_subagent_that_asks_for_input_is_told_why_it_failed(tmp_path: Path) -> None:
    async def asking(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await ctx.interrupt("approval", message="may I?")
        yield "never shown"

    events = await lead_run(tmp_path, FunctionAgent(asking, id="asking"), [])
    message = "The subagent asked for input, which a subagent cannot get."
    [failed] = [e for e in events if e["type"] == "SUBAGENT_ERROR"]
    assert (failed["message"], failed["code"]) == (message, "SUBAGENT_INTERRUPTED")
    assert json.loads(answer(events)["content"]) == {"error": message,
                                                     "code": "SUBAGENT_INTERRUPTED"}
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_subagent_that_crashes_is_logged_with_its_invocation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def crashing(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "starting"
        raise RuntimeError("secret detail")

    with caplog.at_level(logging.ERROR, logger="iobridge.runtime"):
        events = await lead_run(tmp_path, FunctionAgent(crashing, id="crashing"), [])
    assert answer(events)["error"] is True and "secret detail" not in str(events)
    logged = [r for r in caplog.records if r.getMessage().startswith("subagent ")]
    # The subagent's own run (its invocation's id), not its caller's.
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert [r.getMessage() for r in logged] == [
        f"subagent crashing failed in run {started['subagentRunId']}"]
    assert logged[0].exc_info is not None


async def test_a_subagent_that_ends_itself_is_closed_before_its_caller_goes_on(
    tmp_path: Path,
) -> None:
    log: list[str] = []

    async def ending(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        try:
            yield "done here"
            yield RawEvent(event={"type": "RUN_FINISHED", "threadId": "t", "runId": "s"})
            yield "never shown"
        finally:
            log.append("subagent closed")

    events = await lead_run(tmp_path, FunctionAgent(ending, id="ending"), log)
    assert log == ["subagent closed", "lead has the answer"]
    assert answer(events) == {"content": "done here", "error": False}
    assert "never shown" not in str(events)
