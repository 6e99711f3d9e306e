"""The thread memory of a durable run continued in another Backend (in one test process, on
a real SQLite file): its history read again from the thread, its thread titled by its agent
at its end, and a read-only run that stores nothing before or after."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.durable.streams import parked
from tests.runtime.test_revival import KEY, body, continued, database, events_of

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import NotFoundError


class TitlingAgent(FunctionAgent):
    """A durable agent that asks the client once, then answers; it titles threads with what
    it was shown."""

    def __init__(self, histories: list[list[dict[str, Any]]]) -> None:
        async def asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
            histories.append([dict(m) for m in ctx.messages])
            if not any(m["role"] == "tool" for m in ctx.messages):
                await ctx.call_tool("get_weather", {"city": "Oslo"}, tool_call_id="call-a")
            yield "answered"

        super().__init__(asks, id="asks", durable=True)
        self.shown: list[list[dict[str, Any]]] = []

    async def title(self, messages: Sequence[dict[str, Any]]) -> str | None:
        self.shown.append([dict(m) for m in messages])
        return f"Weather, {len(messages)} messages"


async def continue_parked(url: str, run: dict[str, Any], agent: FunctionAgent) -> list[str]:
    """Park ``run`` in one Backend, answer it in the next, and say what its events were."""
    async with Backend(Settings(database_url=url), agents=[agent]) as first:
        await first.start_run(ANONYMOUS, run)
        await parked(first, *KEY)
    async with Backend(Settings(database_url=url), agents=[agent]) as second:
        again = await continued(second)
        await second.submit_tool_result(ANONYMOUS, "r1", "call-a", {"content": "sun"})
        return [e["type"] for e in await events_of(again)]


async def test_a_continued_run_reads_its_history_again_and_its_agent_titles_the_thread(
    tmp_path: Path,
) -> None:
    url = await database(tmp_path)
    async with Backend(Settings(database_url=url)) as b:  # an earlier run on the thread
        earlier = await b.start_run(ANONYMOUS, {**body("asks"), "runId": "r0",
                                                "forwardedProps": {}})
        await events_of(earlier)
        before = await b.store.list_messages("t1")
        assert (await b.store.get_thread("t1")).title == ""  # type: ignore[union-attr]
    histories: list[list[dict[str, Any]]] = []
    agent = TitlingAgent(histories)
    run = {**body("asks"), "messages": [{"id": "u2", "role": "user", "content": "and now?"}],
           "forwardedProps": {"agentId": "asks",
                              "memoryOptions": {"generateTitle": True, "lastMessages": 1}}}
    kinds = await continue_parked(url, run, agent)
    assert kinds[-1] == "RUN_FINISHED"
    first, again = histories
    # Read again from the thread: the window of the earlier runs' messages it asked for (the
    # last one), the run's own input, what it produced up to its point.
    assert len(before) > 1
    assert [m["id"] for m in again[: len(first)]] == [m["id"] for m in first]
    assert [m.get("content") for m in first] == [before[-1].get("content"), "and now?"]
    assert [m["role"] for m in again[len(first):]] == ["assistant", "tool"]
    async with Backend(Settings(database_url=url)) as b:
        thread = await b.store.get_thread("t1")
        stored = await b.store.list_messages("t1")
    # Titled by the agent at the run's end, from the thread before the run as it was read
    # (the window) and the run.
    (shown,) = agent.shown
    assert [m["id"] for m in shown] == [m["id"] for m in stored[len(before) - 1:]]
    assert thread is not None and thread.title == f"Weather, {len(shown)} messages"


async def test_a_read_only_run_continued_elsewhere_stores_nothing(tmp_path: Path) -> None:
    url = await database(tmp_path)
    histories: list[list[dict[str, Any]]] = []
    run = {**body("asks"),
           "forwardedProps": {"agentId": "asks", "memoryOptions": {"readOnly": True}}}
    kinds = await continue_parked(url, run, TitlingAgent(histories))
    assert kinds[-1] == "RUN_FINISHED"
    # Its input came with its checkpoint (the thread has none of it).
    assert [m.get("content") for m in histories[-1]][:1] == ["weather?"]
    async with Backend(Settings(database_url=url)) as b:
        assert await b.store.list_messages("t1") == []
        assert await b.store.load_checkpoint(*KEY) is None


async def test_an_unknown_run_is_not_found_by_the_runtime(tmp_path: Path) -> None:
    async with Backend(Settings(database_url=await database(tmp_path))) as b:
        with pytest.raises(NotFoundError) as missing:
            b.runtime.get_run("anonymous", "nope")
    assert (missing.value.code, missing.value.message) == ("RUN_NOT_FOUND", "unknown run")
