"""A live (or retained) run: its identity, options, log and task.

A plain record: the engine acts on runs, transports read ``log``; nothing here points back
at the engine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from iobridge.protocol.options import RunOptions
from iobridge.runtime.run_ids import RunIds
from iobridge.runtime.runlog import RunLog

#: Runs are keyed by their owner (the principal that started them) and their runId, so
#: another principal's ids can be neither observed nor disturbed.
RunKey = tuple[str, str]


@dataclass(eq=False, kw_only=True)
class Run:
    """One run. The transports only read ``log`` and ask the engine to act on the run."""

    run_id: str
    thread_id: str
    #: The principal that started the run (part of its key).
    owner: str
    #: The resource the run acts for (the thread's owner).
    resource_id: str
    agent_id: str
    options: RunOptions
    log: RunLog = field(default_factory=RunLog)
    task: asyncio.Task[None] | None = None
    #: Transports currently following the log (SSE responses, N-PAMP streams).
    subscribers: int = 0
    #: When set, the run has been asked to stop and why ("cancelled", "disconnected").
    stop_reason: str | None = None
    #: Waiting for the runs ahead of it on its thread (``multitaskStrategy: enqueue``, or
    #: an interrupt waiting for the run it stops): its log is empty until it starts.
    queued: bool = False
    #: A newer run rolls this one back: stopped, what it stored is removed from the thread.
    rollback: bool = False
    #: Token usage of the run's model requests (AG-UI ``TokenUsage`` entries, as on the
    #: terminal event), filled while the run goes.
    usage: list[dict[str, Any]] = field(default_factory=list)
    #: The run is checkpointed (``runtime.checkpoints``): it can go on in another process.
    durable: bool = False
    #: Shutting down: stop at the next durable point (suspended, continued elsewhere).
    suspend_at_point: bool = False
    #: A durable run's event ids (``protocol.event_ids``): epoch, what clients have open.
    ids: RunIds | None = None
    #: Results were posted for this durable run (kept in the store until it concludes).
    results_posted: bool = False

    @property
    def key(self) -> RunKey:
        """``(owner, run_id)``: how the engine and the pending registry know the run."""
        return (self.owner, self.run_id)

    @property
    def done(self) -> bool:
        """True once the terminal event is in the log."""
        return self.log.closed
