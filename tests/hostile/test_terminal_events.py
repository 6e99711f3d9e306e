"""Every run ends with a terminal event, whatever its agent emits (issue 29): a terminal event
that cannot be encoded (a ``result`` nested past the encoder's depth limit) used to end the
log with none, for the live stream, every follower and every resume."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, FinalResult, RawEvent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.runtime.run_events import RunEvents
from iobridge.runtime.runlog import RunLog

#: The guard's answer (``protocol.guard``), before the run's last resort would be needed.
UNENCODABLE = {"type": "RUN_ERROR", "code": "INVALID_RESULT",
               "message": "The agent ended the run with a terminal event that cannot be encoded "
                          "as JSON (or whose result nests deeper than 64 levels)."}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def _result(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield "the reply"
    yield FinalResult(value=_nested(300))


async def _raw(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield "the reply"
    yield RawEvent(event={"type": "RUN_FINISHED", "threadId": ctx.thread_id,
                          "runId": ctx.run_id, "result": _nested(300)})


async def _raw_error(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield "the reply"
    yield RawEvent(event={"type": "RUN_FINISHED", "threadId": ctx.thread_id,
                          "runId": ctx.run_id, "result": {"bad": {1, 2}}})  # a set: not JSON


@pytest.mark.parametrize("func", [_result, _raw, _raw_error], ids=["result", "raw", "not-json"])
async def test_a_terminal_event_that_cannot_be_encoded_still_ends_the_run(
    func: Any, tmp_path: Any
) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/t.db")
    app = create_app(Backend(settings, agents=[FunctionAgent(func, id="deep")]))
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            live = parse_sse((await client.post(
                "/io-bridge/run", json=run_body("go", agentId="deep"))).text)
            replay = parse_sse((await client.get("/io-bridge/runs/r1/events")).text)
            stored = (await client.get("/io-bridge/threads/t1/messages",
                                       params={"format": "agui"})).json()["messages"]
    assert live[-1] == replay[-1] == UNENCODABLE
    assert [e["type"] for e in live].count("RUN_ERROR") == 1
    assert "RUN_FINISHED" not in [e["type"] for e in live]
    # Like any run that ends with RUN_ERROR, the text the guard closed on the way to it
    # was cut short: not stored.
    assert [(m["role"], m["content"]) for m in stored] == [("user", "go")]


def test_a_run_released_without_a_terminal_event_gets_a_last_resort_one() -> None:
    log = RunLog(max_bytes=1 << 20)
    events = RunEvents(log, "t", "r")
    events.start()
    events.release_terminal()  # no finish, no fail: the log still ends with a terminal event
    last = json.loads(log.entries()[-1][1])
    assert last == {"type": "RUN_ERROR", "code": "AGENT_ERROR",
                    "message": "The run ended without a terminal event."}
    assert log.closed and events.failed and events.error_code == "AGENT_ERROR"
