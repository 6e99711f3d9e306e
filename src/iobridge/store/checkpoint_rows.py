"""Durable runs in SQL: checkpoint rows and posted tool results.

One row per durable run (``iobridge_run_checkpoints``) holds what does not change (``base``:
the run's input and its thread view) and what its last durable point says (``point``: the
messages so far, the calls it waits on, its state and usage; ``phase``, ``last_seq``). The
row is inserted with the run's start write and deleted with its end write, in the same
transaction and the same statements as the other runs of that batch (``run_batches``): a run
that never reaches a durable point between its start and its end costs a row in two
executemany statements. A point between is one ``UPDATE`` of the row.

A result the client posts is one ``iobridge_run_tool_results`` row, inserted once: a second
post finds it and is refused, and a continued run never asks for it again.

Writes are compare-and-set on ``epoch``: a process that took the run over (epoch + 1) makes
the previous holder's later points and its end write fail (``CheckpointSuperseded``), so
exactly one process continues a run and stores its reply. The statements are built once
(bound parameters).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, insert, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from iobridge.store.base import (
    Checkpoint,
    CheckpointDrop,
    CheckpointRow,
    CheckpointSuperseded,
    PointWrite,
)
from iobridge.store.records import checkpoints, run_tool_results

__all__ = [
    "apply_ops",
    "claim_checkpoint",
    "drop_checkpoint",
    "drop_checkpoints",
    "insert_checkpoints",
    "list_checkpoints",
    "load_checkpoint",
    "record_tool_result",
    "superseded",
    "write_points",
]

#: Most checkpoints ``list_checkpoints`` returns at once.
LIST_LIMIT = 10_000
#: Most keys in one ``IN`` (SQLite's bound on bound parameters is 32,766).
_CHUNK = 500

_c = checkpoints.c
_KEY = (_c.owner == bindparam("b_owner")) & (_c.run_id == bindparam("b_run"))
_UPDATE_POINT = update(checkpoints).where(_KEY & (_c.epoch == bindparam("b_epoch"))).values(
    phase=bindparam("b_phase"), last_seq=bindparam("b_last"), nbytes=bindparam("b_nbytes"),
    point=bindparam("b_point"), holder=bindparam("b_holder"), updated_at=bindparam("b_now"),
)
_INSERT = insert(checkpoints)
_ROW = select(checkpoints).where(_KEY)
_CLAIM = update(checkpoints).where(_KEY & (_c.epoch == bindparam("b_epoch"))).values(
    epoch=_c.epoch + 1, holder=bindparam("b_holder")
)
_DROP_ANY = delete(checkpoints).where(_KEY)
_DROP_AT = delete(checkpoints).where(_KEY & (_c.epoch == bindparam("b_epoch")))
_r = run_tool_results.c
_RESULT_KEY = (_r.owner == bindparam("b_owner")) & (_r.run_id == bindparam("b_run"))
_RESULTS = select(_r.tool_call_id, _r.content, _r.is_error).where(_RESULT_KEY).order_by(
    _r.posted_at, _r.tool_call_id
)
_DROP_RESULTS = delete(run_tool_results).where(_RESULT_KEY)
_LIST = select(_c.owner, _c.run_id, _c.phase).order_by(_c.updated_at).limit(
    bindparam("b_limit")
)


def insert_checkpoints(conn: Connection, rows: list[CheckpointRow], now: datetime) -> None:
    """Store the first points of runs (one statement for all of them)."""
    if not rows:
        return
    conn.execute(_INSERT, [
        {"owner": r.owner, "run_id": r.run_id, "thread_id": r.thread_id,
         "resource_id": r.resource_id, "agent_id": r.agent_id, "epoch": 0, "phase": "running",
         "last_seq": r.last_seq, "nbytes": len(r.base) + len(r.point), "base": r.base.decode(),
         "point": r.point.decode(), "holder": r.holder, "updated_at": now}
        for r in rows
    ])


def drop_checkpoints(conn: Connection, drops: list[CheckpointDrop]) -> None:
    """Forget concluded runs' checkpoints and results (a superseded holder's drop removes
    nothing of its successor's)."""
    if not drops:
        return
    conn.execute(_DROP_AT, [
        {"b_owner": d.owner, "b_run": d.run_id, "b_epoch": d.epoch} for d in drops
    ])
    posted = [{"b_owner": d.owner, "b_run": d.run_id} for d in drops if d.results]
    if posted:
        conn.execute(_DROP_RESULTS, posted)


def apply_ops(conn: Connection, ops: list[CheckpointRow | CheckpointDrop], now: datetime) -> None:
    """The checkpoint parts of a batch of run writes: inserts, then drops."""
    insert_checkpoints(conn, [op for op in ops if isinstance(op, CheckpointRow)], now)
    drop_checkpoints(conn, [op for op in ops if isinstance(op, CheckpointDrop)])


class PointJob:
    """A later point as a write job: the write batch stores all of its points together
    (``write_points``), after its run writes."""

    def __init__(self, job: PointWrite, now: datetime) -> None:
        self.job, self.now = job, now

    def __call__(self, conn: Connection) -> bool:
        ((ok, result),) = write_points(conn, [self])
        if not ok:
            raise result
        return bool(result)


def _held_epochs(conn: Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The epochs of these runs' rows, locked until the commit (a claim waits for it)."""
    held: dict[tuple[str, str], int] = {}
    for i in range(0, len(keys), _CHUNK):
        query = select(_c.owner, _c.run_id, _c.epoch).where(
            tuple_(_c.owner, _c.run_id).in_(keys[i : i + _CHUNK])
        ).with_for_update()
        held.update({(r.owner, r.run_id): r.epoch for r in conn.execute(query)})
    return held


def superseded(conn: Connection, drops: list[CheckpointDrop]) -> set[tuple[str, str]]:
    """The runs of ``drops`` another process took over: their end writes store nothing (a
    process cut off from its peers, not from the store, would store its copy's reply)."""
    held = _held_epochs(conn, [(d.owner, d.run_id) for d in drops])
    taken = set()
    for drop in drops:
        epoch = held.get((drop.owner, drop.run_id))
        if (epoch is None and drop.stored) or (epoch is not None and epoch != drop.epoch):
            taken.add((drop.owner, drop.run_id))
    return taken


def write_points(conn: Connection, jobs: list[PointJob]) -> list[tuple[bool, Any]]:
    """Store later points of runs, compare-and-set on their epochs, in two statements:
    the epochs held (rows locked until the commit), then one executemany update. Each
    job's outcome: True (stored, or withdrawn: the run concluded first), False (its row is
    gone), or ``CheckpointSuperseded`` (another process holds a newer epoch)."""
    taken = [(j, j.job.take()) for j in jobs]
    held = _held_epochs(conn, [(j.job.owner, j.job.run_id) for j, live in taken if live])
    outcomes: list[tuple[bool, Any]] = []
    rows: list[dict[str, Any]] = []
    for point, live in taken:
        job = point.job
        epoch = held.get((job.owner, job.run_id))
        if not live or epoch is None:
            outcomes.append((True, not live))
        elif epoch != job.epoch:
            outcomes.append((False, CheckpointSuperseded(job.run_id)))
        else:
            outcomes.append((True, True))
            rows.append({"b_owner": job.owner, "b_run": job.run_id, "b_epoch": job.epoch,
                         "b_phase": job.phase, "b_last": job.last_seq, "b_nbytes": job.nbytes,
                         "b_point": job.point.decode(), "b_holder": job.holder,
                         "b_now": point.now})
    if rows:
        conn.execute(_UPDATE_POINT, rows)
    return outcomes


def load_checkpoint(conn: Connection, owner: str, run_id: str) -> Checkpoint | None:
    """The run's checkpoint and its posted results (``None``: none)."""
    key = {"b_owner": owner, "b_run": run_id}
    row = conn.execute(_ROW, key).first()
    if row is None:
        return None
    results = {
        r.tool_call_id: (r.content, bool(r.is_error)) for r in conn.execute(_RESULTS, key)
    }
    return Checkpoint(
        owner=owner, run_id=run_id, thread_id=row.thread_id, resource_id=row.resource_id,
        agent_id=row.agent_id, epoch=row.epoch, phase=row.phase, last_seq=row.last_seq,
        nbytes=row.nbytes, base=orjson.loads(row.base), point=orjson.loads(row.point),
        holder=row.holder, results=results,
    )


def claim_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int, holder: str) -> bool:
    """Move the run to ``epoch + 1`` for ``holder`` if it is still at ``epoch``: True for
    the one winner."""
    params = {"b_owner": owner, "b_run": run_id, "b_epoch": epoch, "b_holder": holder}
    return bool(conn.execute(_CLAIM, params).rowcount == 1)


def drop_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int | None) -> None:
    """Forget the run's checkpoint and results (with ``epoch``: only at that epoch)."""
    key = {"b_owner": owner, "b_run": run_id}
    if epoch is None:
        conn.execute(_DROP_ANY, key)
    elif not conn.execute(_DROP_AT, {**key, "b_epoch": epoch}).rowcount:
        return
    conn.execute(_DROP_RESULTS, key)


def record_tool_result(
    conn: Connection, owner: str, run_id: str, tool_call_id: str, content: str, is_error: bool,
    now: datetime,
) -> bool:
    """Keep a posted result once: True if this call stored it, False if one was stored."""
    values = {"owner": owner, "run_id": run_id, "tool_call_id": tool_call_id,
              "content": content, "is_error": is_error, "posted_at": now}
    statement: Any
    if conn.dialect.name == "postgresql":
        statement = postgresql.insert(run_tool_results).values(**values).on_conflict_do_nothing()
    else:
        statement = sqlite.insert(run_tool_results).values(**values).on_conflict_do_nothing()
    return bool(conn.execute(statement).rowcount == 1)


def list_checkpoints(
    conn: Connection, *, holder: str | None = None, phase: str | None = None,
    limit: int = LIST_LIMIT,
) -> list[tuple[str, str, str]]:
    """``(owner, run_id, phase)`` of stored checkpoints, oldest point first."""
    query = _LIST
    if holder is not None:
        query = query.where(_c.holder == holder)
    if phase is not None:
        query = query.where(_c.phase == phase)
    return [(r.owner, r.run_id, r.phase) for r in conn.execute(query, {"b_limit": limit})]
