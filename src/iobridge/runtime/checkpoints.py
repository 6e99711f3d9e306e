"""Durable points of one run: what is written, when, and at what cost.

A durable run (an agent with ``durable`` set, a SQL store, ``durable_runs`` on) is
checkpointed where re-executing it is safe and nothing is open for clients: when it starts,
after a model step (a ``StepFinished`` with no message, step or subagent open and every tool
call answered), when it parks on frontend tool calls (every unanswered call is one the
client is asked for; its open steps are finished first), and once the results it parked on
are in. A checkpoint is

- ``base``, written once, **with the run's start write** (same transaction, one row more in
  that batch's executemany): the run's input (tools, context, ``forwardedProps``, the state
  it started from), its RUN_STARTED event and its thread view (``RunMemory.durable_view``:
  the ids of its new messages, which the start write stores, so the history is read again
  from the thread, not copied into every checkpoint);
- ``point``, at each later durable point, one ``UPDATE`` that **replaces** the previous
  point while it still waits in the write queue (only the last one matters): the messages
  the run produced so far, the calls it waits on, its state, usage and takeovers;
- nothing per event: what clients were told is what the messages say, and a client that
  resumes after a takeover gets them as a ``MESSAGES_SNAPSHOT`` (``protocol.event_ids``).

The row is dropped **with the run's end write**. A run that reaches no durable point
between its start and its end costs two rows in statements it shares with the other runs of
its batches. Writes are compare-and-set on the run's epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from iobridge.store.base import CheckpointDrop, CheckpointRow, CheckpointSuperseded, PointWrite

if TYPE_CHECKING:
    from iobridge.store.base import ThreadStore

__all__ = ["FORMAT", "CheckpointTooLarge", "Checkpointer"]

logger = logging.getLogger("iobridge.runtime")

#: Format of ``base`` and ``point`` (a process refuses checkpoints of another format).
FORMAT = 2


class CheckpointTooLarge(Exception):
    """The run's checkpoint would exceed ``max_checkpoint_bytes``."""


class Checkpointer:
    """Writes one run's durable points to the store.

    Args:
        store: A store that keeps checkpoints.
        key: ``owner``, ``run_id``, ``thread_id``, ``resource_id``, ``agent_id`` of the run.
        epoch: The run's epoch in this process (0 for a new run).
        holder: This replica's id (``""`` on one process).
        base: The encoded ``base``.
        max_bytes: ``max_checkpoint_bytes``.
        superseded: Called when another process took the run over (it must stop here).
    """

    def __init__(
        self,
        store: ThreadStore,
        key: dict[str, str],
        *,
        epoch: int,
        holder: str,
        base: bytes,
        max_bytes: int,
        superseded: Callable[[], object] = lambda: None,
    ) -> None:
        self.store = store
        self.key = key
        self.epoch = epoch
        self.holder = holder
        self.base = base
        self.max_bytes = max_bytes
        self._on_superseded = superseded
        #: The last point begun: its sequence number and values (a takeover's catch-up).
        self.last_seq = 0
        self.last: dict[str, Any] = {}
        #: A point begun, not yet handed to the store: (phase, encoded point, last_seq).
        self._due: tuple[str, bytes, int] | None = None
        #: The point write waiting in the store's queue (a newer point replaces its values).
        self._queued: PointWrite | None = None
        self._dropped = False
        self._tail: asyncio.Future[bool] | None = None
        #: False once a write failed or was superseded: later points are not written.
        self.working = True
        self.superseded = False
        #: The phase of the last point begun.
        self.phase = "running"

    def _encoded(self, point: dict[str, Any]) -> bytes:
        encoded = orjson.dumps({"v": FORMAT, **point}, default=str)
        if len(self.base) + len(encoded) > self.max_bytes:
            raise CheckpointTooLarge()
        return encoded

    def first(self, point: dict[str, Any], last_seq: int) -> CheckpointRow:
        """The run's first point, for its start write.

        Raises:
            CheckpointTooLarge: over ``max_bytes`` (nothing is written).
        """
        encoded = self._encoded(point)
        self.last_seq, self.last = last_seq, point
        key = self.key
        return CheckpointRow(
            owner=key["owner"], run_id=key["run_id"], thread_id=key["thread_id"],
            resource_id=key["resource_id"], agent_id=key["agent_id"], last_seq=last_seq,
            base=self.base, point=encoded, holder=self.holder,
        )

    def point(self, phase: str, point: dict[str, Any], last_seq: int) -> None:
        """Begin writing a later point: encoded now (its bound is checked here), handed to
        the store once the run's task yields (a run that concludes first, or reaches its
        next point meanwhile, writes no statement for it), or given to the point still
        queued there.

        Raises:
            CheckpointTooLarge: over ``max_bytes`` (nothing is written).
        """
        if not self.working:
            return
        encoded = self._encoded(point)
        self.last_seq, self.last, self.phase = last_seq, point, phase
        if self._due is None:
            asyncio.get_running_loop().call_soon(self._submit)
        self._due = (phase, encoded, last_seq)

    def _submit(self) -> None:
        due, self._due = self._due, None
        if due is None or self._dropped or not self.working:
            return
        phase, encoded, last_seq = due
        key = self.key
        job = PointWrite(
            owner=key["owner"], run_id=key["run_id"], epoch=self.epoch, phase=phase,
            last_seq=last_seq, nbytes=len(self.base) + len(encoded), point=encoded,
            holder=self.holder,
        )
        queued = self._queued
        if queued is not None and queued.replace(job):
            return
        self._queued = job
        self._tail = self.store.write_point(job)
        self._tail.add_done_callback(self._written)

    def _written(self, write: asyncio.Future[bool]) -> None:
        error = None if write.cancelled() else write.exception()
        if error is None and (write.cancelled() or write.result()):
            return
        if not self.working:
            return
        self.working = False
        run_id = self.key["run_id"]
        if isinstance(error, CheckpointSuperseded):
            logger.warning("run %s was taken over by another process", run_id)
            self.superseded = True
            self._on_superseded()
        elif error is None:
            logger.warning("run %s: its checkpoint is gone; not durable", run_id)
        else:
            logger.error("run %s: its checkpoint could not be stored (%s: %s); not durable",
                         run_id, type(error).__name__, error)

    async def settle(self) -> None:
        """Hand the point begun to the store, and wait for the writes begun (through
        cancellation of the waiter)."""
        self._submit()
        tail = self._tail
        if tail is not None and not tail.done():
            await asyncio.wait([tail])

    def drop(self, *, results: bool = True) -> CheckpointDrop | None:
        """The run concluded: the drop for its end write (``None``: another process holds
        it). A point not yet handed to the store, or still queued there, is withdrawn."""
        self._dropped = True
        if self._queued is not None:
            self._queued.withdraw()
        if self.superseded:
            return None
        return CheckpointDrop(self.key["owner"], self.key["run_id"], self.epoch, results)
