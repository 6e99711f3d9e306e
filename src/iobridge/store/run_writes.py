"""A run's write as data, so that group commit can merge a batch of them into few statements.

Each SQL dialect has its own ``WriteRuns`` (``pg_run_sql.write_runs``,
``sqlite_run_sql.write_runs``): it takes the run writes of distinct threads and writes them all
with a fixed number of statements, however many runs the batch holds. On PostgreSQL each
statement is a round trip; on SQLite each costs the writer thread SQLAlchemy's Python per
execute (about as much as the query itself), and the writer thread's CPU competes with the
event loop for the one interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

__all__ = ["RunWrite", "WriteRuns", "write_batch"]

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

    def __call__(self, conn: Connection) -> None:
        (outcome,) = self.write_runs(conn, [self])
        if not outcome[0]:
            raise outcome[1]


def write_batch(conn: Connection, jobs: list[Any]) -> list[tuple[bool, Any]]:
    """A write batch's jobs in order (a ``Combine`` of ``GroupWriter``): consecutive run
    writes of distinct threads go to their ``write_runs`` together (a thread at most once per
    group, so each thread's writes stay in order), any other job runs alone."""
    outcomes: list[tuple[bool, Any]] = []
    group: list[RunWrite] = []
    for job in jobs:
        if isinstance(job, RunWrite) and all(
            w.claim_row["id"] != job.claim_row["id"] and w.write_runs is job.write_runs
            for w in group
        ):
            group.append(job)
            continue
        outcomes += _flush(conn, group)
        group = []
        if isinstance(job, RunWrite):
            group.append(job)
        else:
            outcomes.append((True, job(conn)))
    outcomes += _flush(conn, group)
    return outcomes


def _flush(conn: Connection, group: list[RunWrite]) -> list[tuple[bool, Any]]:
    return group[0].write_runs(conn, group) if group else []
