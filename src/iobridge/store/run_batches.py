"""A run's read and write of its thread as data, so that a batch of them shares statements.

A burst of runs reads and writes many threads at once; the executors batch them (reads on a
few connections, writes by group commit). With the read or write as data instead of a
closure, each SQL dialect answers a whole batch with a fixed number of statements, however
many runs it holds (``SqlThreadStore``: PostgreSQL through ``pg_run_sql``, SQLite through
Core statements). On PostgreSQL each statement is a round trip, and on the server's event
loop a loop iteration per round trip; on SQLite each costs SQLAlchemy's Python per execute
(about as much as the query itself) on a worker thread that competes with the event loop for
the one interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from iobridge.store.base import CheckpointDrop, CheckpointOp, CheckpointSuperseded
from iobridge.store.checkpoint_rows import PointJob, apply_ops, superseded, write_points
from iobridge.store.sql_executor import ReadMany

__all__ = ["RunReadJob", "RunWrite", "WriteRuns", "write_batch"]

#: Writes run writes of distinct threads; each one's ``(ok, result or error)``, in order. A
#: foreign thread's write fails alone with nothing written; any other error raises.
WriteRuns = Callable[[Connection, list["RunWrite"]], list[tuple[bool, Any]]]


@dataclass(frozen=True, slots=True)
class RunWrite:
    """One ``write_for_run``.

    Attributes:
        claim_row: The thread's ``id``, ``resource_id``, ``agent_id``, ``title`` (``""``:
            none), ``carry`` (whether ``state``/``interrupts`` are to be set), ``state`` (as
            stored, wrapped), ``interrupts`` and ``now``.
        rows: Its messages in order: ``thread_id``, ``message_id``, ``role``,
            ``tool_call_id``, ``data``, ``now`` (their ``created_at``); those whose ids the
            thread holds are skipped.
        write_runs: The dialect's writer.
    """

    claim_row: dict[str, Any]
    rows: list[dict[str, Any]]
    write_runs: WriteRuns
    #: The run's checkpoint: its first point (a start write) or its drop (an end write),
    #: written in the same transaction, with the batch's others in one statement.
    checkpoint: CheckpointOp | None = None

    def __call__(self, conn: Connection) -> None:
        (outcome,) = _flush(conn, [self])
        if not outcome[0]:
            raise outcome[1]


def write_batch(conn: Connection, jobs: list[Any]) -> list[tuple[bool, Any]]:
    """A write batch's jobs in order (a ``Combine`` of ``GroupWriter``): consecutive run
    writes of distinct threads go to their ``write_runs`` together (a thread at most once per
    group, so each thread's writes stay in order), any other job runs alone."""
    outcomes: list[tuple[bool, Any]] = []
    group: list[RunWrite] = []
    in_group: set[str] = set()  # the group's threads
    # Durable points go last, together: a point of a run whose end write is in this batch
    # finds its row gone, which is what it should (the run concluded).
    points = [(index, job) for index, job in enumerate(jobs) if isinstance(job, PointJob)]
    jobs = [job for job in jobs if not isinstance(job, PointJob)]
    for job in jobs:
        if isinstance(job, RunWrite) and job.claim_row["id"] not in in_group and (
            not group or group[0].write_runs is job.write_runs
        ):
            group.append(job)
            in_group.add(job.claim_row["id"])
            continue
        outcomes += _flush(conn, group)
        group, in_group = [], set()
        if isinstance(job, RunWrite):
            group.append(job)
            in_group.add(job.claim_row["id"])
        else:
            outcomes.append((True, job(conn)))
    outcomes += _flush(conn, group)
    for (index, _), outcome in zip(points, write_points(conn, [p for _, p in points]),
                                   strict=True):
        outcomes.insert(index, outcome)
    return outcomes


def _flush(conn: Connection, group: list[RunWrite]) -> list[tuple[bool, Any]]:
    if not group:
        return []
    # End writes of runs another process took over store nothing (their drops are fenced).
    drops = {i: w.checkpoint for i, w in enumerate(group)
             if isinstance(w.checkpoint, CheckpointDrop)}
    taken = superseded(conn, list(drops.values())) if drops else set()
    fenced = {i: d.run_id for i, d in drops.items() if (d.owner, d.run_id) in taken}
    writes = [w for i, w in enumerate(group) if i not in fenced]
    written = iter(writes[0].write_runs(conn, writes) if writes else [])
    outcomes: list[tuple[bool, Any]] = [
        (False, CheckpointSuperseded(fenced[i])) if i in fenced else next(written)
        for i in range(len(group))
    ]
    ops = [w.checkpoint for w, (ok, _) in zip(group, outcomes, strict=True)
           if ok and w.checkpoint is not None]
    if ops:
        apply_ops(conn, ops, group[0].claim_row["now"])
    return outcomes


@dataclass(frozen=True, slots=True)
class RunReadJob:
    """One ``read_for_run`` (its arguments); the executor answers the ones it batches
    together with one call of ``read_many``, each one's ``RunRead``."""

    thread_id: str
    message_ids: list[str]
    tool_call_ids: list[str]
    last_n: int
    first_user: bool
    read_many: ReadMany

    def __call__(self, conn: Connection) -> Any:
        ((ok, value),) = self.read_many(conn, [self])
        if not ok:
            raise value
        return value
