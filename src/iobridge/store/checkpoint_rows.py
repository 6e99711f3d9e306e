"""Durable runs in SQL: checkpoint rows and posted tool results.

One row per durable run (``iobridge_run_checkpoints``) holds what does not change
(``base``: the run's input, its thread view, the agent's history), what each durable point
changes (``point``: pending calls, error marks, usage; ``phase``, ``last_seq``) and the
events up to the point (``events``, each ended by a newline), appended at each point with
``events || :segment`` in the same statement: a point costs one statement and what happened
since the last one. A result the client posts is one ``iobridge_run_tool_results`` row,
inserted once: a second post finds it and is refused, and a revived run never asks for it
again.

Writes are compare-and-set on ``epoch`` and ``last_seq``: a process that revived the run
(epoch + 1) makes the previous holder's later writes fail (``CheckpointSuperseded``), so
exactly one process continues a run; a point that does not follow the stored one (an earlier
write failed) is refused (``CheckpointGap``). The statements are built once (bound
parameters), so a point does not pay for building and caching SQL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from iobridge.store.base import Checkpoint, CheckpointGap, CheckpointSuperseded, PointWrite
from iobridge.store.records import checkpoints, run_tool_results

__all__ = [
    "claim_checkpoint",
    "drop_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "record_tool_result",
    "write_point",
]

#: Most checkpoints ``list_checkpoints`` returns at once.
LIST_LIMIT = 10_000

_c = checkpoints.c
_KEY = (_c.owner == bindparam("b_owner")) & (_c.run_id == bindparam("b_run"))
_POINT_VALUES = {
    "phase": bindparam("b_phase"), "last_seq": bindparam("b_last"),
    "nbytes": bindparam("b_nbytes"), "point": bindparam("b_point"),
    "updated_at": bindparam("b_now"), "events": _c.events + bindparam("b_segment"),
}
_UPDATE_POINT = update(checkpoints).where(
    _KEY & (_c.epoch == bindparam("b_epoch")) & (_c.last_seq == bindparam("b_prev"))
).values(**_POINT_VALUES)
_INSERT = insert(checkpoints)
_EPOCH = select(_c.epoch).where(_KEY)
_ROW = select(checkpoints).where(_KEY)
_CLAIM = update(checkpoints).where(_KEY & (_c.epoch == bindparam("b_epoch"))).values(
    epoch=_c.epoch + 1
)
_DROP_ANY = delete(checkpoints).where(_KEY)
_DROP_AT = delete(checkpoints).where(_KEY & (_c.epoch == bindparam("b_epoch")))
_r = run_tool_results.c
_RESULT_KEY = (_r.owner == bindparam("b_owner")) & (_r.run_id == bindparam("b_run"))
_RESULTS = select(_r.tool_call_id, _r.content, _r.is_error).where(_RESULT_KEY)
_DROP_RESULTS = delete(run_tool_results).where(_RESULT_KEY)
_LIST = select(_c.owner, _c.run_id, _c.phase).order_by(_c.updated_at).limit(
    bindparam("b_limit")
)


def _segment(job: PointWrite) -> str:
    return "".join(data.decode() + "\n" for data in job.segment)


def write_point(conn: Connection, job: PointWrite, now: datetime) -> None:
    """Store one durable point (compare-and-set on the epoch and the last stored event).

    Raises:
        CheckpointSuperseded: another process holds a newer epoch of the run.
        CheckpointGap: the stored point is not the one this point follows.
    """
    key = {"b_owner": job.owner, "b_run": job.run_id}
    segment = _segment(job)
    changed = conn.execute(_UPDATE_POINT, {
        **key, "b_epoch": job.epoch, "b_prev": job.first_seq - 1, "b_phase": job.phase,
        "b_last": job.last_seq, "b_nbytes": job.nbytes, "b_point": job.point.decode(),
        "b_now": now, "b_segment": segment,
    }).rowcount
    if changed:
        return
    held = conn.execute(_EPOCH, key).scalar()
    if held == job.epoch:
        raise CheckpointGap(job.run_id)
    if held is not None or job.epoch != 0 or job.base is None or job.first_seq != 1:
        raise CheckpointSuperseded(job.run_id)
    conn.execute(_INSERT, {
        "owner": job.owner, "run_id": job.run_id, "thread_id": job.thread_id,
        "resource_id": job.resource_id, "agent_id": job.agent_id, "epoch": job.epoch,
        "phase": job.phase, "last_seq": job.last_seq, "nbytes": job.nbytes,
        "base": job.base.decode(), "point": job.point.decode(), "events": segment,
        "updated_at": now,
    })


def load_checkpoint(conn: Connection, owner: str, run_id: str) -> Checkpoint | None:
    """The run's checkpoint with its events and posted results (``None``: none)."""
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
        events=row.events.encode().split(b"\n")[:-1], results=results,
    )


def claim_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int) -> bool:
    """Move the run to ``epoch + 1`` if it is still at ``epoch``: True for the one winner."""
    return bool(
        conn.execute(_CLAIM, {"b_owner": owner, "b_run": run_id, "b_epoch": epoch}).rowcount
        == 1
    )


def drop_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int | None) -> None:
    """Forget the run's checkpoint and results (the run concluded).

    With ``epoch``, only while the run is still at that epoch (a superseded holder drops
    nothing of its successor's).
    """
    key = {"b_owner": owner, "b_run": run_id}
    if epoch is None:
        conn.execute(_DROP_ANY, key)
    elif not conn.execute(_DROP_AT, {**key, "b_epoch": epoch}).rowcount:
        return
    conn.execute(_DROP_RESULTS, key)


def record_tool_result(
    conn: Connection, owner: str, run_id: str, tool_call_id: str, content: str, is_error: bool
) -> bool:
    """Keep a posted result once: True if this call stored it, False if one was stored."""
    values = {"owner": owner, "run_id": run_id, "tool_call_id": tool_call_id,
              "content": content, "is_error": is_error}
    dialect = conn.dialect.name
    statement: Any
    if dialect == "postgresql":
        statement = postgresql.insert(run_tool_results).values(**values).on_conflict_do_nothing()
    else:
        statement = sqlite.insert(run_tool_results).values(**values).on_conflict_do_nothing()
    return bool(conn.execute(statement).rowcount == 1)


def list_checkpoints(conn: Connection, limit: int = LIST_LIMIT) -> list[tuple[str, str, str]]:
    """``(owner, run_id, phase)`` of stored checkpoints, oldest point first."""
    return [(r.owner, r.run_id, r.phase) for r in conn.execute(_LIST, {"b_limit": limit})]
