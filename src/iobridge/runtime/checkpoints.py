"""Durable points of one run: what is written, when, and how a run is rebuilt from it.

A durable run (an agent with ``durable`` set, a SQL store, ``durable_runs`` on) is
checkpointed where re-executing it is safe: when it starts producing, after each model step
(a ``StepFinished`` with nothing open and every tool call answered) and when it parks on
frontend tool calls (every unanswered call is one the client is asked for). A checkpoint is

- ``base``, written once: the run's input (tools, context, ``forwardedProps``, the state it
  started from), the history the agent was given, its thread view (``RunMemory.durable_view``);
- ``point``, at each durable point: the frontend calls it waits on, the tool results that
  failed, usage, the takeover count;
- the events up to the point, appended per point (what happened since the previous one).

What clients were told is those events: a process that continues the run puts them back in
its log (so event ids go on from the point) and folds them through a fresh guard and
transcript, so the run's lifecycle state and the messages it will store are as they were.
Writes are chained (one in flight per run, in order) and compare-and-set on the run's epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from iobridge.errors import EventsNotRetained
from iobridge.store.base import CheckpointSuperseded, PointWrite

if TYPE_CHECKING:
    from iobridge.runtime.run_events import RunEvents
    from iobridge.runtime.runlog import RunLog
    from iobridge.store.base import ThreadStore

__all__ = ["CheckpointTooLarge", "Checkpointer", "replay"]

logger = logging.getLogger("iobridge.runtime")

#: Format of ``base`` and ``point`` (a process refuses checkpoints of a newer format).
FORMAT = 1


class CheckpointTooLarge(Exception):
    """The run's checkpoint would exceed ``max_checkpoint_bytes``."""


class Checkpointer:
    """Writes one run's durable points to the store, in order.

    Args:
        store: A store that keeps checkpoints.
        log: The run's log (the events of each point are read from it).
        key: ``owner``, ``run_id``, ``thread_id``, ``resource_id``, ``agent_id`` of the run.
        epoch: The run's epoch in this process (0 for a new run).
        base: The encoded ``base`` for a new run (``None``: the row exists).
        max_bytes: ``max_checkpoint_bytes``.
        written: The last event already stored (a continued run's point).
        nbytes: Bytes already stored.
        superseded: Called when another process took the run over (it must stop here).
    """

    def __init__(
        self,
        store: ThreadStore,
        log: RunLog,
        key: dict[str, str],
        *,
        epoch: int,
        base: bytes | None,
        max_bytes: int,
        written: int = 0,
        nbytes: int = 0,
        superseded: Callable[[], object] = lambda: None,
    ) -> None:
        self.store = store
        self._on_superseded = superseded
        self.log = log
        self.key = key
        self.epoch = epoch
        self._base = base
        self.max_bytes = max_bytes
        self.written = written
        self.nbytes = nbytes + (len(base) if base is not None else 0)
        if self.nbytes > max_bytes:
            raise CheckpointTooLarge()
        #: The last write begun (the next one waits for it).
        self._tail: asyncio.Future[None] | None = None
        #: False once a write failed or was superseded: later points are not written.
        self.working = True
        #: Another process took the run over (its epoch moved on).
        self.superseded = False
        self.phase = "running"

    def point(self, phase: str, point: dict[str, Any]) -> None:
        """Begin writing a durable point (the events since the last one, and ``point``).

        Raises:
            CheckpointTooLarge: the checkpoint would exceed ``max_bytes`` (nothing written).
        """
        if not self.working:
            return
        try:
            segment = [data for _, data in self.log.entries(self.written)]
        except EventsNotRetained:
            # The log's window dropped events of this point: the run cannot be rebuilt
            # from here, so it stops being durable (it is lost with its process).
            logger.warning("run %s: events dropped before its checkpoint; not durable",
                           self.key["run_id"])
            self.working = False
            return
        encoded = orjson.dumps({"v": FORMAT, **point}, default=str)
        size = self.nbytes + sum(len(d) + 1 for d in segment) + len(encoded)
        if size > self.max_bytes:
            raise CheckpointTooLarge()
        job = PointWrite(
            **self.key, epoch=self.epoch, phase=phase, last_seq=self.log.last_seq, nbytes=size,
            base=self._base, point=encoded, first_seq=self.written + 1, segment=segment,
        )
        self.nbytes = size - len(encoded)  # the point is replaced by the next one
        self.written = self.log.last_seq
        self._base = None
        self.phase = phase
        # Begun at once, in order: the store commits a run's points in the order begun.
        self._tail = self.store.write_point(job)
        self._tail.add_done_callback(self._written)

    def _written(self, write: asyncio.Future[None]) -> None:
        error = None if write.cancelled() else write.exception()
        if error is None or not self.working:
            return
        self.working = False
        run_id = self.key["run_id"]
        if isinstance(error, CheckpointSuperseded):
            logger.warning("run %s was taken over by another process", run_id)
            self.superseded = True
            self._on_superseded()
        else:
            logger.error("run %s: its checkpoint could not be stored (%s: %s); not durable",
                         run_id, type(error).__name__, error)

    async def settle(self) -> None:
        """Wait for the writes begun (through cancellation of the waiter)."""
        tail = self._tail
        if tail is not None and not tail.done():
            await asyncio.wait([tail])

    def drop(self) -> None:
        """The run concluded (its end is stored): begin forgetting its checkpoint, after its
        points, unless another process holds it. Not waited for: a process that stops
        before it commits leaves a checkpoint whose run is found concluded (its messages
        are in the thread) and dropped then."""
        if self.superseded:
            return
        drop = self.store.drop_checkpoint(self.key["owner"], self.key["run_id"], epoch=self.epoch)
        drop.add_done_callback(self._dropped)

    def _dropped(self, drop: asyncio.Future[None]) -> None:
        error = None if drop.cancelled() else drop.exception()
        if error is not None:
            logger.error("run %s: its checkpoint could not be dropped (%s: %s)",
                         self.key["run_id"], type(error).__name__, error)


def replay(events: RunEvents, stored: list[bytes]) -> None:
    """Put a checkpoint's events back into a fresh run: into its log as they were (so ids
    go on from the point), and through its guard and transcript (so the lifecycle and the
    messages to store are as they were); nothing is emitted again."""
    guard, transcript, log = events.guard, events.transcript, events.log
    for data in stored:
        log.append(data)
        event = orjson.loads(data)
        guard.feed(event)
        transcript.apply(event)
