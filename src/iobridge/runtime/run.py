"""A live (or retained) run: its identity, agent, log and task."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iobridge.runtime.runlog import RunLog

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.runtime.engine import Runtime
    from iobridge.runtime.session import Session


class RunStatus(enum.Enum):
    """Where a run is in its life."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(eq=False, kw_only=True)
class Run:
    """One run. The transports only read ``log`` and ask the runtime to act on the run."""

    run_id: str
    thread_id: str
    parent_run_id: str | None
    resource_id: str
    agent: Agent
    runtime: Runtime
    frontend_tools: list[dict[str, Any]]
    forwarded_props: dict[str, Any] = field(default_factory=dict)
    #: Next-run tool mode: frontend calls end the run; results come in the next run.
    defer_frontend_tools: bool = False
    log: RunLog = field(default_factory=RunLog)
    status: RunStatus = RunStatus.RUNNING
    session: Session | None = None
    task: asyncio.Task[None] | None = None
    #: Transports currently following the log (SSE responses, N-PAMP streams).
    subscribers: int = 0
    #: When set, the run has been asked to stop and why ("cancelled", "disconnected").
    stop_reason: str | None = None

    @property
    def done(self) -> bool:
        """True once the terminal event is in the log."""
        return self.log.closed
