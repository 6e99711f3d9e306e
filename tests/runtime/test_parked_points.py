"""Where a live durable run waiting on tools takes its points (in one test process, on a real
SQLite file): parked only when every unanswered call is the client's, and a point once the
results are all in (so they are never asked for again)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from tests.durable.streams import parked
from tests.runtime.test_revival import KEY, body, database, events_of, three_calls

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings


async def test_once_every_result_is_in_the_run_takes_a_point_that_asks_nothing_again(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()
    async with Backend(Settings(database_url=await database(tmp_path)),
                       agents=[three_calls([], gate)]) as b:
        run = await b.start_run(ANONYMOUS, body("asks"))
        await parked(b, *KEY)
        for call in ("call-a", "call-b", "call-c"):
            await b.submit_tool_result(ANONYMOUS, "r1", call, {"content": call})
        await events_of(run, "TOOL_CALL_RESULT", times=3)
        async with asyncio.timeout(10):  # a hang guard, not a timing check
            while (point := await b.store.load_checkpoint(*KEY)) is None or (
                point.phase != "running"
            ):
                await asyncio.sleep(0.02)
        assert point.point["pending"] == []
        assert [(m["toolCallId"], m["content"]) for m in point.point["messages"]
                if m["role"] == "tool"] == [(c, c) for c in ("call-a", "call-b", "call-c")]
        gate.set()
        assert (await events_of(run))[-1]["type"] == "RUN_FINISHED"


async def test_a_run_whose_server_tool_still_runs_beside_a_client_call_is_not_parked(
    tmp_path: Path,
) -> None:
    """A server tool in progress cannot be re-executed from a point: neither the client's
    call beside it nor its result makes a point (the run's point stays its start)."""
    slow = asyncio.Event()

    async def lookup(city: str) -> str:
        await slow.wait()
        return f"{city}: fine"

    async def both(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        found, asked = await asyncio.gather(
            ctx.call_tool("lookup", {"city": "Oslo"}, tool_call_id="call-s"),
            ctx.call_tool("get_weather", {"city": "Oslo"}, tool_call_id="call-f"))
        yield f"{found.content} / {asked.content}"

    agent = FunctionAgent(both, id="both", durable=True, tools=[tool(lookup)])
    async with Backend(Settings(database_url=await database(tmp_path)), agents=[agent]) as b:
        run = await b.start_run(ANONYMOUS, body("both"))
        await events_of(run, "TOOL_CALL_END", times=2)
        await asyncio.sleep(0.3)  # a park point would have been written by now
        point = await b.store.load_checkpoint(*KEY)
        assert point is not None and point.phase == "running"
        assert (point.point["messages"], point.point["pending"]) == ([], [])
        # The client's result in first: still no point (the server tool has not returned).
        await b.submit_tool_result(ANONYMOUS, "r1", "call-f", {"content": "sunny"})
        await events_of(run, "TOOL_CALL_RESULT")
        await asyncio.sleep(0.3)
        point = await b.store.load_checkpoint(*KEY)
        assert point is not None and point.phase == "running"
        assert (point.point["messages"], point.point["pending"]) == ([], [])
        slow.set()
        events = await events_of(run)
    assert events[-1]["type"] == "RUN_FINISHED"
    said = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == '"Oslo: fine" / sunny'  # a server tool's result is JSON
