"""A durable run's event ids in process (``RunIds``): the open state after each event of a
batch, where the run goes on from, the calls waiting for a result, and change points that
follow the run log's window instead of growing with the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput, TextEnd
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.protocol.event_ids import EPOCH_SHIFT, OpenState
from iobridge.runtime.run_ids import _SLACK, RunIds
from iobridge.store.migrate import upgrade

TEXT = b"~t::m1"


def start(message: str = "m1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"}


def end(message: str = "m1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_END", "messageId": message}


def batch(*seqs: int) -> list[tuple[int, bytes]]:
    return [(seq, b"{}") for seq in seqs]


def test_each_event_of_a_batch_gets_what_is_open_after_it() -> None:
    ids = RunIds()
    assert ids.tags(batch(1, 2, 3)) == [b"", b"", b""]
    ids.apply(2, start())
    ids.apply(3, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi"})
    ids.apply(4, end())
    assert ids.tags(batch(1, 2, 3, 4, 5)) == [b"", TEXT, TEXT, b"", b""]
    # Batches within one state (the common case) and batches that start inside a change.
    assert ids.tags(batch(2, 3)) == [TEXT, TEXT]
    assert ids.tags(batch(3, 4)) == [TEXT, b""]
    assert ids.tags(batch(5, 6)) == [b"", b""]
    ids.apply(6, start("m2"))
    ids.apply(8, end("m2"))
    assert ids.tags(batch(3, 4, 5, 6, 7, 8)) == [TEXT, b"", b"", b"~t::m2", b"~t::m2", b""]


def test_a_call_waits_for_its_result_from_its_end_on() -> None:
    ids = RunIds()
    ids.apply(3, {"type": "TOOL_CALL_END", "toolCallId": "c1"})
    ids.apply(4, {"type": "TOOL_CALL_END", "toolCallId": "c2"})
    assert ids.announced == {"c1": 3, "c2": 4}
    ids.apply(5, {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "x",
                  "content": "ok"})
    assert ids.announced == {"c2": 4}
    assert ids.tags(batch(2, 3, 4, 5)) == [b"", b"~p:c1", b"~p:c1!p:c2", b"~p:c2"]
    ids.apply(6, {"type": "TOOL_CALL_RESULT", "toolCallId": "unknown", "messageId": "y",
                  "content": "ok"})
    assert ids.announced == {"c2": 4}


def test_a_continued_run_starts_from_what_was_open_at_its_point() -> None:
    ids = RunIds(epoch=2, after=10)
    assert (ids.epoch, ids.after, ids.base, ids.point_seq) == (2, 10, 2 << EPOCH_SHIFT, 10)
    ids.start_from(OpenState(steps=((None, "plan"),), pending=("c1",)))
    assert ids.tags(batch(11)) == [b"~s::plan!p:c1"]
    ids.apply(11, {"type": "STEP_FINISHED", "stepName": "plan"})
    ids.apply(12, {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "x",
                   "content": "ok"})
    assert ids.tags(batch(11, 12, 13)) == [b"~p:c1", b"", b""]
    ids.start_from(OpenState())
    assert ids.tags(batch(11, 12)) == [b"", b""]


def changes(ids: RunIds, count: int) -> None:
    """``count`` change points, at 1, 2, …: a message opens at each odd number, closes at
    each even one."""
    for seq in range(1, count + 1):
        ids.apply(seq, start() if seq % 2 else end())


def test_change_points_before_the_log_s_window_are_dropped_past_the_slack() -> None:
    # Kept while at most _SLACK of them: an old event still gets its own state.
    ids = RunIds()
    changes(ids, _SLACK - 1)  # with the point at 0: _SLACK
    ids.prune(first_retained=_SLACK)
    assert ids.tags(batch(1, 2)) == [TEXT, b""]
    # One more, but the window's start is just before the half-way point: kept too.
    ids.apply(_SLACK, end() if _SLACK % 2 == 0 else start())
    ids.prune(first_retained=_SLACK // 2 - 1)
    assert ids.tags(batch(1, 2)) == [TEXT, b""]
    # At the half-way point: the points before the one in force at the window's start go
    # (an event before the window is never asked for again; it reads as the window's start).
    ids.prune(first_retained=_SLACK // 2)
    assert ids.tags(batch(_SLACK // 2 - 1, _SLACK // 2)) == [b"", b""]
    assert ids.tags(batch(1)) == [b""]
    assert ids.tags(batch(_SLACK // 2 + 1, _SLACK // 2 + 2)) == [TEXT, b""]


async def test_a_long_durable_run_keeps_change_points_only_for_its_log_s_window(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ids.db'}"
    await upgrade(url)

    async def talks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for n in range(300):
            yield f"message {n}"
            yield TextEnd()

    agent = FunctionAgent(talks, id="talks", durable=True)
    settings = Settings(database_url=url, max_run_log_bytes=1024)
    async with Backend(settings, agents=[agent]) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": "t1", "runId": "r1", "tools": [], "context": [], "state": {},
            "messages": [{"id": "u1", "role": "user", "content": "talk"}],
            "forwardedProps": {"agentId": "talks"}})
        await asyncio.wait_for(asyncio.shield(run.task), 20)
        assert run.durable and run.ids is not None
        assert run.log.first_seq > 600  # the log kept only its last kilobyte of 1,800 events
        # 600 open/close changes; the ones kept are the slack and those of the window.
        assert len(run.ids._at) <= _SLACK + 1
        last = run.log.last_seq
        assert run.ids.tags(batch(run.log.first_seq, last)) == [
            run.ids.tags(batch(run.log.first_seq))[0], b""]
