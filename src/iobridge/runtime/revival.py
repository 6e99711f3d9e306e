"""Continuing a durable run another process checkpointed: ``Revival``, an ``Execution`` that
starts from a checkpoint instead of a request.

The run is admitted here as it was when it started, claimed across replicas (after a lost
replica's locks expired), taken over in the store (the checkpoint's epoch compare-and-set:
exactly one process wins), and rebuilt at its last durable point: the messages it produced so
far, its state, the calls it waits on. Its log numbers its events from that point on in the
next epoch (``protocol.event_ids``), so no id the previous holder sent is reused; a client that
resumes with such an id is caught up by ``Backend.follow``. Then its parked calls are answered
(a posted result from the store, or one awaited here) and its agent goes on from the messages.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import orjson

from iobridge.errors import ConflictError, ServiceUnavailable
from iobridge.protocol.event_ids import OpenState
from iobridge.protocol.messages import model_view
from iobridge.protocol.options import parse_run_options
from iobridge.protocol.run_input import RunInput
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.agent_session import error_result
from iobridge.runtime.checkpoints import FORMAT
from iobridge.runtime.execution import Execution, _run_context
from iobridge.runtime.run import Run
from iobridge.runtime.run_events import RunEnded
from iobridge.runtime.runlog import RunLog

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.runtime.engine import Runtime
    from iobridge.store.base import Checkpoint

__all__ = ["Revival", "UnknownFormat"]

logger = logging.getLogger("iobridge.runtime")


class UnknownFormat(Exception):
    """A checkpoint written by a version of iobridge that this one cannot continue."""


class Revival(Execution):
    """The execution that continues ``checkpoint``'s run in this process (``caller``: whom
    it counts against in the admission limits, as when it started)."""

    def __init__(
        self, runtime: Runtime, checkpoint: Checkpoint, agent: Agent, *, caller: str | None = None
    ) -> None:
        base = checkpoint.base
        if base.get("v") != FORMAT or checkpoint.point.get("v") != FORMAT:
            raise UnknownFormat(checkpoint.run_id)
        given = base["input"]
        run_input = RunInput(
            thread_id=checkpoint.thread_id, run_id=checkpoint.run_id, messages=[],
            tools=given["tools"], context=given["context"],
            # The shared state at the point: the agent goes on from it.
            state=checkpoint.point["state"],
            forwarded_props=given["forwardedProps"], parent_run_id=given["parentRunId"],
        )
        super().__init__(
            runtime, run_input, parse_run_options(run_input.forwarded_props), agent,
            owner=checkpoint.owner, resource_id=checkpoint.resource_id,
            caller=caller if caller is not None else base.get("caller"),
        )
        self.mode = base["mode"]
        # The run had its thread: a run begun there since is not stopped for it, nor waited on.
        self.strategy = "reject"
        self.revival = checkpoint
        self.claim_epoch = checkpoint.epoch + 1

    async def revive(self) -> Run:
        """Admit the run, take it over from its checkpoint's epoch, rebuild it and go on.

        Raises:
            TooManyRequests: an admission limit is reached (``TOO_MANY_RUNS``).
            ConflictError: another process took it over first, or its thread is busy.
            TimeoutError: the store did not answer within ``store_timeout_seconds``.
        """
        checkpoint, runtime = self.revival, self.runtime
        assert checkpoint is not None and runtime.checkpoints is not None
        memory = runtime.memory
        assert memory is not None
        await self._holder_gone(checkpoint.holder)
        ticket = self.admit()
        try:
            # The store decides first (exactly one process moves the epoch on); only the
            # winner claims the runId and thread across replicas. A process that came late
            # with an old checkpoint must not take the claims (nor the shared record) of a run
            # another one continued, or even finished, meanwhile.
            if not await runtime.checkpoints.claim_checkpoint(
                checkpoint.owner, checkpoint.run_id, checkpoint.epoch, runtime.holder
            ):
                raise ConflictError("the run was taken over elsewhere", code="RUN_ALREADY_RUNNING")
            await self._claim_when_free()
            self.memory = await memory.revive(
                checkpoint.base["memory"], thread_id=checkpoint.thread_id,
                resource_id=self.resource_id, agent=self.agent, options=self.options,
            )
        except BaseException:
            await self.refuse()
            raise
        finally:
            runtime.admission.started(ticket)
        return self._begin_revived(checkpoint)

    async def _holder_gone(self, holder: str) -> None:
        """Wait until the replica that holds the checkpoint is gone (a killed one's
        heartbeat expires ``owner_lost_seconds`` after its last beat).

        Raises:
            ServiceUnavailable: it is alive (it holds the run, or took it over and has not
                claimed it across replicas yet): the run is that replica's to go on with.
        """
        runtime = self.runtime
        if not holder or holder == runtime.holder:
            return
        settings = runtime.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.owner_lost_seconds + settings.heartbeat_seconds
        while await runtime.cluster.alive(holder):
            if loop.time() > deadline:
                raise ServiceUnavailable("another replica is continuing the run",
                                         code="RUN_OWNER_UNAVAILABLE", retry_after=1.0)
            await asyncio.sleep(settings.heartbeat_seconds / 2)

    async def _claim_when_free(self) -> None:
        """``claim``, waiting out the locks of a replica that stopped without releasing
        them (they expire ``owner_lost_seconds`` after its last heartbeat)."""
        settings = self.runtime.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.owner_lost_seconds + settings.heartbeat_seconds
        while True:
            try:
                place = await self.claim()
                assert place is None  # the strategy rejects: nothing is queued
                return
            except ConflictError:
                if not self.runtime.cluster.distributed or loop.time() > deadline:
                    raise
            await asyncio.sleep(settings.heartbeat_seconds / 2)

    def _begin_revived(self, checkpoint: Checkpoint) -> Run:
        """Step 4 for a continued run: its parts rebuilt at the point, no RUN_STARTED (the
        client has it), its frontend calls registered before anyone can post."""
        runtime, point = self.runtime, checkpoint.point
        epoch, after = checkpoint.epoch + 1, checkpoint.last_seq
        self.run = run = self._new_run()
        run.log = RunLog(max_bytes=runtime.settings.max_run_log_bytes, after=after)
        self._parts()
        events = self.events
        pending = point["pending"]
        steps = tuple((owner, name) for owner, name in point.get("steps", ()))
        events.guard.prime(OpenState(steps=steps))
        events.guard.continue_from(output_bytes=point["outputBytes"],
                                   pending=[c["id"] for c in pending])
        events.transcript.restore(point["messages"])
        run.usage[:] = point["usage"]
        events.result = point["result"]
        # A run re-executed from where its holder was producing counts; one it was let go
        # of exactly at its point (a drain, or parked) does not.
        self.takeovers = point["takeovers"] + (
            checkpoint.phase == "running" and not point.get("clean", False)
        )
        self._checkpointer(base=orjson.dumps(checkpoint.base), epoch=epoch, after=after)
        assert self.checkpoints is not None
        self.checkpoints.last_seq, self.checkpoints.last = after, point
        self.checkpoints.phase = checkpoint.phase
        ids = run.ids
        assert ids is not None
        ids.start_from(OpenState(steps=steps, pending=tuple(c["id"] for c in pending)))
        ids.announced = {c["id"]: c["at"] for c in pending}
        ids.branches = [*point["branches"], after]
        ids.point_seq, ids.point = after, point
        run.results_posted = bool(checkpoint.results)
        for call in pending:
            if call["id"] in checkpoint.results:
                runtime.pending.answered(self.key, call["id"])
            else:
                runtime.pending.register(self.key, call["id"], call["name"])
        runtime.register(run)
        self._live()
        if steps:
            # Parked with its step open: finished first, and the point taken again there, so
            # a client caught up goes on from a point where nothing is open.
            events.close_steps()
            self._point(checkpoint.phase, runtime.pending.waiting(self.key))
        run.task = asyncio.get_running_loop().create_task(
            self.drive(), name=f"run-{run.run_id}", context=_run_context(run)
        )
        logger.info("run %s continued from its %s checkpoint (epoch %d)",
                    run.run_id, checkpoint.phase, epoch)
        return run

    async def _before_agent(self) -> None:
        """Give each call the run parked on its result: posted already (stored), or awaited
        here; then the agent goes on from the messages so far."""
        checkpoint, runtime, events = self.revival, self.runtime, self.events
        assert checkpoint is not None
        if self.takeovers > runtime.settings.max_takeovers:
            events.fail("The run was lost too many times.", "RUN_LOST")
            raise RunEnded()
        waiting = {c.tool_call_id: c for c in runtime.pending.waiting(self.key)}
        unanswered = events.transcript.unanswered_calls()
        # The results posted before the takeover first, in the order they were posted: a
        # client caught up at the point may have seen them (``Backend.follow`` skips those).
        order = list(checkpoint.results)
        stored = sorted((c for c in unanswered if c in checkpoint.results), key=order.index)
        for call_id in stored:
            content, is_error = checkpoint.results[call_id]
            events.tool_result(call_id, ToolResult(content=content, is_error=is_error))
        awaited = [c for c in unanswered if c in waiting]
        answers = await asyncio.gather(
            *(runtime.pending.wait(waiting[c], runtime.settings.tool_timeout) for c in awaited),
            return_exceptions=True,
        )
        for call_id, answer in zip(awaited, answers, strict=True):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            events.tool_result(call_id, answer if isinstance(answer, ToolResult) else error_result(
                "the tool timed out waiting for the client"
            ))
        for call_id in unanswered:
            if call_id not in checkpoint.results and call_id not in waiting:
                events.tool_result(call_id, error_result("the tool's result was lost"))
        if unanswered and events.guard.nothing_open:
            self._point("running")  # the results are in: not asked for again
        assert self.memory is not None
        messages = model_view([*self.memory.history, *events.transcript.messages])
        self.memory.history = [dict(m) for m in messages]
        self.context = self._agent_context(events.guard.shared_state)
