"""The coordination seam between replicas: what one process must ask the others.

A single process needs nobody: :class:`LocalCluster` answers every question at no cost, and
the engine keeps its runs, logs, pending calls and busy marks in memory as before. With
``redis_url`` set, :mod:`iobridge.cluster.redis` implements the same :class:`Cluster` so
that replicas behave as one backend: runIds and thread busy marks are claimed cluster-wide,
each run's log is mirrored for followers on other replicas, and tool results or cancels that
land on a replica that does not own the run are forwarded to its owner.

The engine calls only the :class:`Coordinator` part (claim, started, release, forgotten);
the Backend uses the rest (find a run elsewhere, follow it, send a command to its owner).
What replicas send each other is typed in :mod:`iobridge.runtime.replica_messages`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

from iobridge.protocol.options import MultitaskStrategy
from iobridge.runtime.replica_messages import Answer, RunCommand
from iobridge.runtime.run import Run

#: How the owner of a run acts on a command another replica sent (``Runtime.act``).
CommandHandler = Callable[[RunCommand], Answer]


@dataclass(frozen=True, kw_only=True)
class RemoteRun:
    """A run another replica owns, as its shared record describes it."""

    run_id: str
    thread_id: str
    owner: str
    #: The resource the run acts for (who else of its owner may see it).
    resource_id: str
    #: The replica that drives the run (where commands go).
    replica: str
    #: Sequence numbers of the first retained and the last mirrored event.
    first_seq: int
    last_seq: int
    #: True once the terminal event is mirrored (or the run was declared lost).
    ended: bool
    #: A durable run's takeover epoch (``protocol.event_ids``: its events' ids); ``None``:
    #: the run is not durable.
    epoch: int | None = None


@dataclass(frozen=True, kw_only=True)
class QueuedClaim:
    """A run's place in the shared queue of a thread another run holds."""

    owner: str
    run_id: str
    resource_id: str
    thread_id: str
    #: The claim's token (what the thread lock will hold once the run has it).
    token: bytes
    #: A durable run's takeover epoch (``claim``'s), ``None`` for others.
    epoch: int | None = None


class Coordinator(Protocol):
    """What the engine asks before, while and after it drives a run."""

    #: False when nothing is shared: the engine skips the steps that would cost a task.
    distributed: bool

    async def claim(
        self, owner: str, run_id: str, resource_id: str, thread_id: str,
        *, strategy: MultitaskStrategy = "reject", epoch: int | None = None,
    ) -> QueuedClaim | None:
        """Claim the runId and the thread for a run about to start; ``None``: claimed
        (``epoch``: a durable run's takeover epoch, in its record for followers elsewhere;
        ``None``: the run is not durable).

        A busy thread queues a run whose strategy does not reject (its place is returned;
        ``wait_claim`` waits for it), and with ``interrupt``/``rollback`` the run that holds
        it is told to stop.

        Raises:
            ConflictError: ``RUN_ALREADY_RUNNING``, or ``THREAD_BUSY`` elsewhere.
            TooManyRequests: the thread's queue is full (``TOO_MANY_QUEUED_RUNS``).
        """

    async def wait_claim(self, place: QueuedClaim) -> None:
        """Until the queued run has its thread claimed (it leaves the queue if cancelled)."""

    async def abandon(self, owner: str, run_id: str, resource_id: str, thread_id: str) -> None:
        """Undo a claim whose run did not start (its thread could not be read)."""

    def started(self, run: Run) -> None:
        """The run's first event is in its log: share the log from here."""

    async def release(self, run: Run) -> None:
        """The run's messages are stored: free its runId and thread (before the terminal)."""

    def forgotten(self, run: Run) -> None:
        """The run is no longer retained here: drop its shared copy too."""

    async def peers(self) -> list[str]:
        """The other replicas that are alive (a draining one hands its runs to them)."""

    async def alive(self, replica: str) -> bool:
        """Whether ``replica`` is alive (its heartbeat has not expired)."""

    async def send(self, replica: str, command: RunCommand) -> None:
        """Send ``command`` to ``replica``, wanting no answer.

        Raises:
            ServiceUnavailable: nobody got it.
        """


class Cluster(Coordinator, Protocol):
    """The coordinator plus what the Backend needs for runs other replicas own."""

    async def open(self, handler: CommandHandler) -> None:
        """Start serving commands for this replica's runs with ``handler`` (called for one
        command at a time as they arrive)."""

    async def aclose(self) -> None:
        """Stop heartbeats and command serving; close connections."""

    async def problem(self) -> str | None:
        """Why the shared state cannot be reached now (``None``: it can)."""

    async def find(self, owner: str, run_id: str) -> RemoteRun | None:
        """The record of ``owner``'s run on another replica, if there is one."""

    def follow(
        self, run: RemoteRun, after: int, *, idle: float | None, durable: bool = False
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        """The mirrored log after ``after``, in batches, until its terminal event. A run
        whose replica stopped ends with RUN_ERROR ``RUN_LOST``, unless ``durable`` (durable
        runs are on here): then the batches just end, and the caller decides.

        Raises:
            EventsNotRetained: the entries after ``after`` are no longer retained.
        """

    async def lost(self, run: RemoteRun) -> bool:
        """Whether the run's replica stopped (its heartbeat expired or it left)."""

    async def lost_replicas(self) -> list[str]:
        """Replicas that joined and stopped without leaving (their heartbeat expired)."""

    async def forget_replica(self, replica: str) -> None:
        """A lost replica's runs are seen to: stop listing it."""

    async def tell(self, run: RemoteRun, command: RunCommand) -> None:
        """Send ``command`` to the run's owner, wanting no answer.

        Raises:
            ServiceUnavailable: no replica took it.
        """

    async def ask(self, command: RunCommand) -> Answer | None:
        """Send ``command`` to the replica that runs its run and return the answer; ``None``
        if no other replica has the run (finding the owner and sending it the command is
        one step: a tool result crosses replicas in one round trip each way).

        Raises:
            ServiceUnavailable: the owner does not answer.
        """

    async def thread_busy(self, resource_id: str, thread_id: str) -> bool:
        """Whether a run on another replica holds the thread (or runs wait for it)."""

    async def remember_alias(self, owner: str, alias: bytes, run_id: str) -> None:
        """Share a transport's name for a run (an N-PAMP stream id), so any replica finds it."""

    async def recall_alias(self, owner: str, alias: bytes) -> str | None:
        """The runId another replica shared under ``alias``, if any."""


class LocalCluster:
    """One process: nothing to claim, nothing elsewhere; every call is a no-op."""

    distributed = False

    async def claim(
        self, owner: str, run_id: str, resource_id: str, thread_id: str,
        *, strategy: MultitaskStrategy = "reject", epoch: int | None = None,
    ) -> QueuedClaim | None:
        return None

    async def wait_claim(self, place: QueuedClaim) -> None:
        raise RuntimeError("a single process queues runs in its admission")

    async def abandon(self, owner: str, run_id: str, resource_id: str, thread_id: str) -> None:
        return None

    def started(self, run: Run) -> None:
        return None

    async def release(self, run: Run) -> None:
        return None

    def forgotten(self, run: Run) -> None:
        return None

    async def open(self, handler: CommandHandler) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def problem(self) -> str | None:
        return None

    async def find(self, owner: str, run_id: str) -> RemoteRun | None:
        return None

    async def follow(
        self, run: RemoteRun, after: int, *, idle: float | None, durable: bool = False
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        raise RuntimeError("a single process has no remote runs")
        yield []  # pragma: no cover  (makes this an async generator)

    async def lost(self, run: RemoteRun) -> bool:
        raise RuntimeError("a single process has no remote runs")

    async def peers(self) -> list[str]:
        return []

    async def alive(self, replica: str) -> bool:
        return False

    async def lost_replicas(self) -> list[str]:
        return []

    async def forget_replica(self, replica: str) -> None:
        return None

    async def send(self, replica: str, command: RunCommand) -> None:
        raise RuntimeError("a single process has no peers")

    async def tell(self, run: RemoteRun, command: RunCommand) -> None:
        raise RuntimeError("a single process has no remote runs")

    async def ask(self, command: RunCommand) -> Answer | None:
        return None

    async def thread_busy(self, resource_id: str, thread_id: str) -> bool:
        return False

    async def remember_alias(self, owner: str, alias: bytes, run_id: str) -> None:
        return None

    async def recall_alias(self, owner: str, alias: bytes) -> str | None:
        return None
