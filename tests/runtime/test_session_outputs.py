"""What an agent's session does with what the agent says besides its outputs (in one test
process, the Backend itself): metadata it gives the events that follow, and the result of a
call of an earlier run that its resumed run gives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.runtime.test_revival import database, events_of

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.protocol.tool_results import ToolResult


async def run_of(b: Backend, agent: str, run_id: str, **more: Any) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "threadId": "t1", "runId": run_id, "tools": [], "context": [], "state": {},
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": "go"}],
        "forwardedProps": {"agentId": agent}, **more}
    return await events_of(await b.start_run(ANONYMOUS, body))


async def test_metadata_given_by_the_agent_marks_what_follows_until_it_stops(
    tmp_path: Path,
) -> None:
    async def tags(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        ctx.annotate({"source": "kb"})
        yield "tagged"
        ctx.annotate(None)
        yield " untagged"

    async with Backend(Settings(database_url=await database(tmp_path)),
                       agents=[FunctionAgent(tags, id="tags")]) as b:
        events = await run_of(b, "tags", "r1")
    content = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert [(e["delta"], e.get("metadata")) for e in content] == [
        ("tagged", {"source": "kb"}), (" untagged", None)]


async def test_a_resumed_run_gives_the_result_of_the_call_its_interrupt_was_about(
    tmp_path: Path,
) -> None:
    async def approves(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        if not ctx.resuming:
            ctx.start_tool_call("deploy", tool_call_id="deploy-1", local=True).end()
        answer = await ctx.interrupt("approval", tool_call_id="deploy-1")
        ctx.answer_earlier_call("deploy-1", ToolResult(content=f"approved={answer.payload}"))
        yield "deployed"

    async with Backend(Settings(database_url=await database(tmp_path)),
                       agents=[FunctionAgent(approves, id="approves")]) as b:
        first = await run_of(b, "approves", "r1")
        [asked] = first[-1]["outcome"]["interrupts"]
        events = await run_of(b, "approves", "r2", messages=[], resume=[
            {"interruptId": asked["id"], "status": "resolved", "payload": True}])
        stored = await b.store.list_messages("t1")
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert (result["toolCallId"], result["content"]) == ("deploy-1", "approved=True")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert [(m["role"], m.get("toolCallId"), m.get("content")) for m in stored][-2:] == [
        ("tool", "deploy-1", "approved=True"), ("assistant", None, "deployed")]
