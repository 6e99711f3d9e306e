"""Admission: which runs may start, and what an admitted run holds until it is released.

A run is admitted before anything is claimed or read: within the limits (runs producing
events in total and per caller: its owner, or the resource it acts for when every caller is
one principal, auth mode ``none``), its runId not already live or starting for its owner, its
thread not busy. From then on it counts against the limits and its thread is busy, until
``release`` (after what it produced is stored). This is the one place that decides what a
busy thread means for a new run (today: 409 ``THREAD_BUSY``) and how runs are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from iobridge.config import Settings
from iobridge.errors import ConflictError, TooManyRequests
from iobridge.runtime.run import RunKey

__all__ = ["Admission", "ThreadKey", "Ticket"]

#: A thread as runs lock it: ``(resourceId, threadId)``.
ThreadKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Ticket:
    """What an admitted run holds: its place in the counts and its thread."""

    key: RunKey
    thread: ThreadKey
    #: Whom the run counts against (``max_active_runs_per_principal``).
    caller: str


class Admission:
    """The admitted runs of one process (starting or live), by owner and thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._busy: set[ThreadKey] = set()
        #: Admitted runs per caller, and in total.
        self._per_caller: dict[str, int] = {}
        self._total = 0
        #: Runs between admission and their first event (their thread is being read).
        self._starting: set[RunKey] = set()

    @property
    def active(self) -> int:
        """Admitted runs not yet released."""
        return self._total

    def admit(
        self, key: RunKey, thread: ThreadKey, *, live: bool, caller: str | None = None
    ) -> Ticket:
        """Admit a run (``live``: a run with its key is live here already) counted against
        ``caller`` (default: its owner).

        Raises:
            TooManyRequests: a limit is reached (``TOO_MANY_RUNS``).
            ConflictError: the runId is live or starting (``RUN_ALREADY_RUNNING``), or the
                thread is busy (``THREAD_BUSY``).
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
        if thread in self._busy:
            raise ConflictError("another run is active on this thread", code="THREAD_BUSY")
        self._busy.add(thread)
        self._starting.add(key)
        self._count(caller, +1)
        return Ticket(key, thread, caller)

    def started(self, ticket: Ticket) -> None:
        """The run got past its start (begun or refused): its runId is no longer starting."""
        self._starting.discard(ticket.key)

    def release(self, ticket: Ticket) -> None:
        """Free the run's thread and its place in the counts."""
        self._busy.discard(ticket.thread)
        self._count(ticket.caller, -1)

    def _count(self, caller: str, delta: int) -> None:
        active = self._per_caller.get(caller, 0) + delta
        if active:
            self._per_caller[caller] = active
        else:
            self._per_caller.pop(caller, None)
        self._total += delta
