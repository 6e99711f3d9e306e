"""Runs cancelled at once, and a run queued behind its thread's holder (``multitaskStrategy:
enqueue``), in process: a client that follows a queued run is told it waits only while it
does; a run cancelled before its task ever ran still ends, and frees its thread and its
place in the counts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from tests.helpers import CollectingSink

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import ServiceUnavailable


class QueuedSink(CollectingSink):
    """Also counts the "queued" notices (``: queued`` over SSE)."""

    def __init__(self) -> None:
        super().__init__()
        self.queued_notices = 0

    async def queued(self) -> None:
        self.queued_notices += 1


def gated(gate: asyncio.Event) -> FunctionAgent:
    async def waits(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        await gate.wait()
        yield f"done {ctx.run_id}"

    return FunctionAgent(waits, id="gated")


def body(run: str, strategy: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"agentId": "gated"}
    if strategy is not None:
        props["multitaskStrategy"] = strategy
    return {"threadId": "t1", "runId": run, "tools": [], "context": [], "state": {},
            "messages": [{"id": f"u-{run}", "role": "user", "content": "hi"}],
            "forwardedProps": props}


async def followed(backend: Backend, run_id: str) -> QueuedSink:
    """A client that follows the run from its start to its end."""
    run, cursor = await backend.resume(ANONYMOUS, run_id, None)
    sink = QueuedSink()
    async with asyncio.timeout(10):
        await backend.follow(run, sink, after=cursor)
    return sink


def kinds(sink: CollectingSink) -> list[str]:
    return [orjson.loads(data)["type"] for _, data in sink.events]


async def test_a_queued_run_is_said_to_wait_until_it_begins() -> None:
    gate = asyncio.Event()
    async with Backend(Settings(database_url="memory://"), agents=[gated(gate)]) as backend:
        await backend.start_run(ANONYMOUS, body("r1"))
        waiting = await backend.start_run(ANONYMOUS, body("r2", "enqueue"))
        assert waiting.queued
        early = asyncio.create_task(followed(backend, "r2"))
        await asyncio.sleep(0.1)
        gate.set()
        sink = await early
        assert sink.queued_notices == 1
        assert kinds(sink)[0] == "RUN_STARTED" and kinds(sink)[-1] == "RUN_FINISHED"
        # Begun (and ended): a client that follows it now is not told it waits.
        assert not waiting.queued
        late = await followed(backend, "r2")
        assert late.queued_notices == 0 and kinds(late) == kinds(sink)


@pytest.mark.parametrize("at_once", [True, False])
async def test_a_queued_run_cancelled_before_it_begins_ends_and_no_longer_waits(
    at_once: bool,
) -> None:
    """``at_once``: cancelled before its task ever ran (it used to be left open for good: no
    RUN_ERROR, its thread never passed on, its admission slot never freed)."""
    gate = asyncio.Event()
    settings = Settings(database_url="memory://", max_active_runs_per_principal=2)
    async with Backend(settings, agents=[gated(gate)]) as backend:
        holder = await backend.start_run(ANONYMOUS, body("r1"))
        waiting = await backend.start_run(ANONYMOUS, body("r2", "enqueue"))
        if not at_once:
            await asyncio.sleep(0.05)
        assert await backend.cancel_run(ANONYMOUS, "r2") is True
        await asyncio.wait_for(asyncio.shield(waiting.task), 5)
        sink = await followed(backend, "r2")
        assert sink.queued_notices == 0 and not waiting.queued
        [ended] = [orjson.loads(data) for _, data in sink.events]
        assert (ended["type"], ended["code"]) == ("RUN_ERROR", "RUN_CANCELLED")
        gate.set()
        await asyncio.wait_for(asyncio.shield(holder.task), 5)
        assert kinds(await followed(backend, "r1"))[-1] == "RUN_FINISHED"
        assert [m["content"] for m in await backend.store.list_messages("t1")] == [
            "hi", "done r1"]
        # The thread and both places are free: a next run on it runs at once.
        assert backend.runtime.admission.active == 0
        after = await backend.start_run(ANONYMOUS, body("r3", "enqueue"))
        assert not after.queued
        await asyncio.wait_for(asyncio.shield(after.task), 5)
        assert kinds(await followed(backend, "r3"))[-1] == "RUN_FINISHED"


async def test_a_run_cancelled_before_its_task_ran_ends_cancelled_and_frees_its_thread() -> None:
    gate = asyncio.Event()
    settings = Settings(database_url="memory://", max_active_runs_per_principal=1)
    async with Backend(settings, agents=[gated(gate)]) as backend:
        run = await backend.start_run(ANONYMOUS, body("r1"))
        assert await backend.cancel_run(ANONYMOUS, "r1") is True
        sink = await followed(backend, "r1")
        assert kinds(sink) == ["RUN_STARTED", "RUN_FINISHED"]
        assert orjson.loads(sink.events[-1][1])["outcome"] == {"type": "cancelled"}
        assert run.log.closed and backend.runtime.admission.active == 0
        gate.set()
        again = await backend.start_run(ANONYMOUS, body("r2"))  # one run at a time: room
        await asyncio.wait_for(asyncio.shield(again.task), 5)
        assert kinds(await followed(backend, "r2"))[-1] == "RUN_FINISHED"



@pytest.mark.parametrize(("failure", "ended"), [
    (ServiceUnavailable("The thread store did not answer.", code="STORE_UNAVAILABLE"),
     {"message": "The thread store did not answer.", "code": "STORE_UNAVAILABLE"}),
    (RuntimeError("secret detail"), {"message": "The run could not start.",
                                     "code": "AGENT_ERROR"}),
])
async def test_a_queued_run_whose_read_fails_at_its_turn_ends_with_run_error(
    failure: Exception, ended: dict[str, str], caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal keeps its message and code; anything else is a generic error, logged with
    its details, which the client does not see."""
    gate = asyncio.Event()
    async with Backend(Settings(database_url="memory://"), agents=[gated(gate)]) as backend:
        holder = await backend.start_run(ANONYMOUS, body("r1"))
        waiting = await backend.start_run(ANONYMOUS, body("r2", "enqueue"))
        memory = backend.runtime.memory
        assert memory is not None and waiting.queued

        async def broken(*args: object) -> None:
            raise failure

        memory.begin = broken  # type: ignore[method-assign]
        gate.set()
        await asyncio.wait_for(asyncio.shield(waiting.task), 5)
        [entry] = waiting.log.entries()
        assert orjson.loads(entry[1]) == {"type": "RUN_ERROR", **ended}
        assert b"secret" not in entry[1] and waiting.log.closed and not waiting.queued
        logged = [r for r in caplog.records if r.getMessage() == "queued run r2 failed to start"]
        assert bool(logged) == isinstance(failure, RuntimeError)
        await asyncio.wait_for(asyncio.shield(holder.task), 5)
        assert [m["content"] for m in await backend.store.list_messages("t1")] == [
            "hi", "done r1"]
        assert backend.runtime.admission.active == 0 and backend.runtime.retained_runs == 2
        # Its runId is no longer starting: it can be run again.
        del memory.begin
        again = await backend.start_run(ANONYMOUS, body("r2"))
        await asyncio.wait_for(asyncio.shield(again.task), 5)
        assert kinds(await followed(backend, "r2"))[-1] == "RUN_FINISHED"
