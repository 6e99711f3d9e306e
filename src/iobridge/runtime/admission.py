"""Admission: which runs may start, and what an admitted run holds until it is released.

A run is admitted before anything is claimed or read: within the limits (runs producing
events or waiting, in total and per caller: its owner, or the resource it acts for when every
caller is one principal, auth mode ``none``), its runId not already live or starting for its
owner. Its thread is then either free (the run holds it from now on) or busy with another
run, and the run's ``multitaskStrategy`` decides (this is the one place that does):

* ``reject``: 409 ``THREAD_BUSY``;
* ``enqueue``: the run waits in the thread's queue, behind the runs ahead of it;
* ``interrupt`` / ``rollback``: the run that holds the thread is told to stop
  (``Ticket.stop``: cancelled, and with ``rollback`` its messages removed) and the new run
  waits at the head of the queue, before the runs enqueued.

A thread's queue holds at most ``max_queued_runs_per_thread`` runs (429
``TOO_MANY_QUEUED_RUNS`` beyond). When the holder is released, the thread passes to the
first run in its queue without ever being free, so no other run can slip in between.

With replicas (``redis_url``) the shared thread lock and queue decide instead
(``Coordinator.claim``): a run that finds the thread busy here goes on to claim it
cluster-wide, where it is queued in the same order and bound, without holding it here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from iobridge.config import Settings
from iobridge.errors import ConflictError, TooManyRequests
from iobridge.protocol.options import MultitaskStrategy
from iobridge.runtime.run import RunKey

__all__ = ["Admission", "StopRequest", "ThreadKey", "Ticket", "queue_full", "thread_busy"]

#: A thread as runs lock it: ``(resourceId, threadId)``.
ThreadKey = tuple[str, str]
#: Why a holder is asked to stop: a newer run interrupts it, or rolls it back.
StopRequest = Literal["interrupt", "rollback"]


def thread_busy() -> ConflictError:
    return ConflictError("another run is active on this thread", code="THREAD_BUSY")


def queue_full(limit: int) -> TooManyRequests:
    return TooManyRequests(
        f"{limit} runs already wait on this thread", code="TOO_MANY_QUEUED_RUNS"
    )


@dataclass(eq=False, slots=True)
class Ticket:
    """What an admitted run holds: its place in the counts, and its thread or its place in
    the thread's queue."""

    key: RunKey
    thread: ThreadKey
    strategy: MultitaskStrategy = "reject"
    #: Whom the run counts against (``max_active_runs_per_principal``; default: its owner).
    caller: str = ""
    #: Set while the run waits for its thread here; done once the thread is passed to it.
    turn: asyncio.Future[None] | None = None
    #: The run holds its thread in this process.
    holding: bool = False
    #: A newer run asked this one to stop before it could be told (it is still starting).
    stop: StopRequest | None = None
    released: bool = field(default=False)

    @property
    def owner(self) -> str:
        return self.key[0]


class Admission:
    """The admitted runs of one process (starting, waiting or live), by owner and thread.

    Args:
        settings: The limits.
        stop: How a thread's holder is told to stop (``Runtime.stop_holder``).
    """

    def __init__(
        self, settings: Settings, stop: Callable[[Ticket, StopRequest], None] | None = None
    ) -> None:
        self.settings = settings
        self._stop = stop
        self._holders: dict[ThreadKey, Ticket] = {}
        self._queues: dict[ThreadKey, deque[Ticket]] = {}
        #: Admitted runs per caller, and in total.
        self._per_caller: dict[str, int] = {}
        self._total = 0
        #: Runs between admission and their first event (waiting, or their thread read).
        self._starting: dict[RunKey, Ticket] = {}

    @property
    def active(self) -> int:
        """Admitted runs not yet released."""
        return self._total

    def holder(self, thread: ThreadKey) -> Ticket | None:
        """The ticket of the run that holds ``thread`` here, if one does."""
        return self._holders.get(thread)

    def starting(self, key: RunKey) -> Ticket | None:
        """The ticket of a run admitted and not begun yet (waiting, or reading its thread)."""
        return self._starting.get(key)

    def queued(self, thread: ThreadKey) -> int:
        """Runs waiting for ``thread`` here."""
        return len(self._queues.get(thread, ()))

    def admit(
        self,
        key: RunKey,
        thread: ThreadKey,
        *,
        live: bool,
        strategy: MultitaskStrategy = "reject",
        shared: bool = False,
        caller: str | None = None,
    ) -> Ticket:
        """Admit a run (``live``: a run with its key is live here already) counted against
        ``caller`` (default: its owner).

        ``shared``: threads are locked cluster-wide; a busy thread here is left to the
        cluster's claim (the ticket then holds nothing) unless the strategy rejects.

        Raises:
            TooManyRequests: a limit is reached (``TOO_MANY_RUNS``), or the thread's queue
                is full (``TOO_MANY_QUEUED_RUNS``).
            ConflictError: the runId is live or starting (``RUN_ALREADY_RUNNING``), or the
                thread is busy and the strategy rejects (``THREAD_BUSY``).
        """
        caller = key[0] if caller is None else caller
        if self._total >= self.settings.max_active_runs:
            raise TooManyRequests(
                "the server is running as many runs as it may", code="TOO_MANY_RUNS"
            )
        if self._per_caller.get(caller, 0) >= self.settings.max_active_runs_per_principal:
            raise TooManyRequests("too many runs at once for this caller", code="TOO_MANY_RUNS")
        if live or key in self._starting:
            raise ConflictError("a run with this runId is running", code="RUN_ALREADY_RUNNING")
        ticket = Ticket(key, thread, strategy, caller)
        holder = self._holders.get(thread)
        if holder is None:
            self._holders[thread] = ticket
            ticket.holding = True
        elif strategy == "reject":
            raise thread_busy()
        elif not shared:
            self._enqueue(ticket, holder)
        self._starting[key] = ticket
        self._count(caller, +1)
        return ticket

    def _enqueue(self, ticket: Ticket, holder: Ticket) -> None:
        queue = self._queues.setdefault(ticket.thread, deque())
        if len(queue) >= self.settings.max_queued_runs_per_thread:
            raise queue_full(self.settings.max_queued_runs_per_thread)
        ticket.turn = asyncio.get_running_loop().create_future()
        if ticket.strategy == "enqueue":
            queue.append(ticket)
            return
        # Before the enqueued runs, after the stoppers that came first.
        at = next((i for i, t in enumerate(queue) if t.strategy == "enqueue"), len(queue))
        queue.insert(at, ticket)
        if at == 0:
            self.stop_holder(holder, "rollback" if ticket.strategy == "rollback" else "interrupt")

    def stop_holder(self, holder: Ticket, request: StopRequest) -> None:
        """Ask the run that holds a thread to stop (now if it runs, else once it begins)."""
        holder.stop = holder.stop or request
        if self._stop is not None:
            self._stop(holder, request)

    async def wait(self, ticket: Ticket) -> None:
        """Until the thread is passed to ``ticket`` (it then holds it)."""
        assert ticket.turn is not None
        await asyncio.shield(ticket.turn)

    def hold(self, ticket: Ticket) -> None:
        """``ticket`` won its thread cluster-wide: it holds it here too (a run that took it
        meanwhile is about to find it busy in the cluster)."""
        self._holders[ticket.thread] = ticket
        ticket.holding = True

    def unhold(self, ticket: Ticket) -> None:
        """``ticket`` waits in the cluster's queue: the thread is not its here meanwhile."""
        if ticket.holding and self._holders.get(ticket.thread) is ticket:
            self._pass_on(ticket.thread)
        ticket.holding = False

    def started(self, ticket: Ticket) -> None:
        """The run got past its start (begun or refused): its runId is no longer starting."""
        if self._starting.get(ticket.key) is ticket:
            del self._starting[ticket.key]

    def release(self, ticket: Ticket) -> None:
        """Free the run's place in the counts, and its thread (passed to the next run in the
        thread's queue) or its place in the queue."""
        if ticket.released:
            return
        ticket.released = True
        thread = ticket.thread
        if ticket.holding and self._holders.get(thread) is ticket:
            self._pass_on(thread)
        elif ticket.turn is not None and not ticket.turn.done():
            queue = self._queues.get(thread)
            if queue is not None and ticket in queue:
                queue.remove(ticket)
                if not queue:
                    del self._queues[thread]
            ticket.turn.cancel()
        ticket.holding = False
        self._count(ticket.caller, -1)

    def _pass_on(self, thread: ThreadKey) -> None:
        """The thread's holder is done: the first run waiting gets it, else it is free."""
        queue = self._queues.get(thread)
        if not queue:
            self._holders.pop(thread, None)
            return
        following = queue.popleft()
        if not queue:
            del self._queues[thread]
        self._holders[thread] = following
        following.holding = True
        assert following.turn is not None
        following.turn.set_result(None)
        # A stopper queued behind the one that now holds the thread asks it to stop too.
        if queue and queue[0].strategy != "enqueue":
            self.stop_holder(
                following, "rollback" if queue[0].strategy == "rollback" else "interrupt"
            )

    def _count(self, caller: str, delta: int) -> None:
        active = self._per_caller.get(caller, 0) + delta
        if active:
            self._per_caller[caller] = active
        else:
            self._per_caller.pop(caller, None)
        self._total += delta
