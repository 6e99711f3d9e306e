"""An AG-UI upstream agent's run outlives its Backend: the process that continues it asks the
upstream (a real pydantic-ai ``AGUIAdapter`` server on loopback) again with the transcript so
far. And what discovery says of durability is what the deployment does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.agents.upstream_apps import WEATHER, Upstream, pydantic_upstream
from tests.durable.streams import assert_valid_stream, follow, parked
from tests.durable.test_durable_backend import answered

from iobridge.agents.upstream import AgUiUpstreamAgent
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.store.migrate import upgrade


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with pydantic_upstream() as served:
        yield served


def body() -> dict[str, object]:
    return {"threadId": "t1", "runId": "r1", "tools": [WEATHER], "context": [], "state": {},
            "messages": [{"id": "u1", "role": "user", "content": "weather in Paris?"}],
            "forwardedProps": {"agentId": "up"}}


async def test_a_parked_upstream_run_goes_on_in_the_next_backend(
    tmp_path: Path, upstream: Upstream
) -> None:
    url = f"sqlite:///{tmp_path / 'up.db'}"
    await upgrade(url)
    settings = Settings(database_url=url)
    async with Backend(settings, agents=[AgUiUpstreamAgent(upstream.url, id="up")]) as first:
        await first.start_run(ANONYMOUS, body())
        head = await follow(first, "r1", until="TOOL_CALL_END")
        call = head[-1][1]["toolCallId"]
        await parked(first, "anonymous", "r1")
    # The first process is gone with the run parked on the client's tool.
    async with Backend(settings, agents=[AgUiUpstreamAgent(upstream.url, id="up")]) as second:
        await second.submit_tool_result(ANONYMOUS, "r1", call, {"content": '{"tempC":21}'})
        tail = await follow(second, "r1", after=head[-1][0], until="RUN_FINISHED")
        assert_valid_stream(head + tail, thread_id="t1", run_id="r1")
        assert tail[-1][1]["type"] == "RUN_FINISHED"
        stored = await second.store.list_messages("t1")
        answered(tail, stored, 'Results: get_weather={"tempC":21}', step_open=False)
        assert stored[3]["content"] == 'Results: get_weather={"tempC":21}'
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[2]["toolCallId"] == call
    # The upstream was asked twice: the run, then the follow-up with the transcript so far
    # (the call and the result the client posted to the second process).
    first_body, follow_up = upstream.bodies
    added = follow_up["messages"][len(first_body["messages"]):]
    assert [m["role"] for m in added] == ["assistant", "tool"]
    assert added[0]["toolCalls"][0]["id"] == call
    assert json.loads(added[1]["content"]) == {"tempC": 21}


@pytest.mark.parametrize(
    ("database", "durable_runs", "declared"),
    [("sqlite", True, True), ("sqlite", False, False), ("memory", True, False)],
)
async def test_discovery_says_a_run_is_durable_only_where_it_is(
    tmp_path: Path, database: str, durable_runs: bool, declared: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}" if database == "sqlite" else "memory://"
    if database == "sqlite":
        await upgrade(url)
    agent = AgUiUpstreamAgent("http://127.0.0.1:9/agui", id="up")
    async with Backend(Settings(database_url=url, durable_runs=durable_runs),
                       agents=[agent]) as b:
        assert b.describe_agent("up")["capabilities"]["custom"] == {
            "durableExecution": declared}
        listed = next(a for a in b.list_agents() if a["id"] == "up")
        assert listed["capabilities"]["custom"] == {"durableExecution": declared}
    # The agent's own declaration is untouched.
    assert agent.capabilities()["custom"] == {"durableExecution": True}
