"""Durable runs in SQL: checkpoint rows, their event segments and posted tool results.

One row per durable run (``iobridge_run_checkpoints``) holds what does not change within an
epoch (``base``: the run's input, its thread view, the agent's history) and what each durable
point changes (``point``: pending calls, error marks, usage; ``phase``, ``last_seq``). The
events up to each point are appended as one ``iobridge_run_events`` row per point, so a
point costs what happened since the last one, not the whole run. A result the client posts
is one ``iobridge_run_tool_results`` row, inserted once: a second post finds it and is
refused, and a revived run never asks for it again.

Writes are compare-and-set on ``epoch``: a process that revived the run (epoch + 1) makes the
previous holder's later writes fail (``CheckpointSuperseded``), so exactly one process
continues a run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from iobridge.store.base import Checkpoint, CheckpointGap, CheckpointSuperseded, PointWrite
from iobridge.store.records import checkpoints, run_events, run_tool_results

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


def write_point(conn: Connection, job: PointWrite, now: datetime) -> None:
    """Store one durable point (compare-and-set on the epoch and on the last stored event,
    so a point after one that failed is refused rather than leaving a hole in the events).

    Raises:
        CheckpointSuperseded: another process holds a newer epoch of the run.
        CheckpointGap: the stored point is not the one this point follows.
    """
    key = (checkpoints.c.owner == job.owner) & (checkpoints.c.run_id == job.run_id)
    values: dict[str, Any] = {
        "phase": job.phase, "last_seq": job.last_seq, "nbytes": job.nbytes,
        "point": job.point.decode(), "updated_at": now,
    }
    if job.base is not None:
        values["base"] = job.base.decode()
    changed = conn.execute(
        update(checkpoints).where(
            key & (checkpoints.c.epoch == job.epoch)
            & (checkpoints.c.last_seq == job.first_seq - 1)
        ).values(**values)
    ).rowcount
    if not changed:
        held = conn.execute(select(checkpoints.c.epoch).where(key)).scalar()
        if held == job.epoch:
            raise CheckpointGap(job.run_id)
        if held is not None or job.epoch != 0 or job.base is None or job.first_seq != 1:
            raise CheckpointSuperseded(job.run_id)
        conn.execute(insert(checkpoints).values(
            owner=job.owner, run_id=job.run_id, thread_id=job.thread_id,
            resource_id=job.resource_id, agent_id=job.agent_id, epoch=job.epoch, **values,
        ))
    if job.segment:
        conn.execute(insert(run_events).values(
            owner=job.owner, run_id=job.run_id, first_seq=job.first_seq,
            data=b"\n".join(job.segment).decode(),
        ))


def load_checkpoint(conn: Connection, owner: str, run_id: str) -> Checkpoint | None:
    """The run's checkpoint with its events and posted results (``None``: none)."""
    row = conn.execute(
        select(checkpoints).where(
            (checkpoints.c.owner == owner) & (checkpoints.c.run_id == run_id)
        )
    ).first()
    if row is None:
        return None
    events: list[bytes] = []
    segments = conn.execute(
        select(run_events.c.first_seq, run_events.c.data)
        .where((run_events.c.owner == owner) & (run_events.c.run_id == run_id))
        .order_by(run_events.c.first_seq)
    )
    for _, data in segments:
        events.extend(data.encode().split(b"\n"))
    results = {
        r.tool_call_id: (r.content, bool(r.is_error))
        for r in conn.execute(
            select(run_tool_results).where(
                (run_tool_results.c.owner == owner) & (run_tool_results.c.run_id == run_id)
            )
        )
    }
    return Checkpoint(
        owner=owner, run_id=run_id, thread_id=row.thread_id, resource_id=row.resource_id,
        agent_id=row.agent_id, epoch=row.epoch, phase=row.phase, last_seq=row.last_seq,
        nbytes=row.nbytes, base=orjson.loads(row.base), point=orjson.loads(row.point),
        events=events, results=results,
    )


def claim_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int) -> bool:
    """Move the run to ``epoch + 1`` if it is still at ``epoch``: True for the one winner."""
    key = (checkpoints.c.owner == owner) & (checkpoints.c.run_id == run_id)
    return bool(conn.execute(
        update(checkpoints).where(key & (checkpoints.c.epoch == epoch))
        .values(epoch=epoch + 1)
    ).rowcount == 1)


def drop_checkpoint(conn: Connection, owner: str, run_id: str, epoch: int | None) -> None:
    """Forget the run's checkpoint, events and results (the run concluded).

    With ``epoch``, only while the run is still at that epoch (a superseded holder drops
    nothing of its successor's).
    """
    key = (checkpoints.c.owner == owner) & (checkpoints.c.run_id == run_id)
    if epoch is not None:
        held = conn.execute(select(checkpoints.c.epoch).where(key)).scalar()
        if held is not None and held != epoch:
            return
    conn.execute(delete(checkpoints).where(key))
    conn.execute(delete(run_events).where(
        (run_events.c.owner == owner) & (run_events.c.run_id == run_id)
    ))
    conn.execute(delete(run_tool_results).where(
        (run_tool_results.c.owner == owner) & (run_tool_results.c.run_id == run_id)
    ))


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
    rows = conn.execute(
        select(checkpoints.c.owner, checkpoints.c.run_id, checkpoints.c.phase)
        .order_by(checkpoints.c.updated_at).limit(limit)
    )
    return [(r.owner, r.run_id, r.phase) for r in rows]
