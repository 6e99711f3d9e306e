"""The run path's statements on PostgreSQL: one read at run start, two statements per write.

On asyncpg each statement is a network round trip and, on the server's event loop, about as
much Python (SQLAlchemy, the asyncpg adapter, its protocol) as a whole SQLite query. The
generic path (``sqlalchemy_store``) costs a run on an existing thread 13 statements; here:

* ``read``: one ``SELECT`` of the thread row with, as JSON aggregates of indexed subqueries,
  the incoming ids already stored (merge by id), the calls already answered, the newest
  ``lastMessages`` and, when asked, the first user message.
* ``claim``: one upsert of the thread row (``INSERT … ON CONFLICT DO UPDATE``). It creates
  a missing thread, sets the title if empty and the carryover, and locks the row like
  ``SELECT … FOR UPDATE`` did; a foreign thread fails its ``WHERE`` and returns no row
  (answered as missing, nothing written). Its own statement, so that the append below takes
  its snapshot after the lock was granted (READ COMMITTED): a writer on another node that
  held the row has committed its messages by then.
* ``append``: one statement for the whole batch, its rows one JSON parameter: insert the
  messages whose ids are not stored, after the last position, and touch ``updated_at`` when
  any was new. "Not stored" is a scalar subquery per incoming row, not ``NOT EXISTS``: the
  planner turned that into a hash anti-join over every message of the thread (73 ms on
  100,000 messages instead of an index probe per row).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Boolean, Integer, String, bindparam, case, text
from sqlalchemy.dialects.postgresql import ARRAY, JSON, insert
from sqlalchemy.engine import Connection

from iobridge.store.records import UTCDateTime, threads

__all__ = ["append", "claim", "read"]

_READ = (
    text(
        """
SELECT t.id, t.resource_id, t.agent_id, t.title, t.metadata, t.created_at, t.updated_at,
       t.state, t.interrupts,
       (SELECT json_agg(m.message_id) FROM iobridge_messages m
         WHERE m.thread_id = t.id AND m.message_id = ANY(:b_ids)) AS stored_ids,
       (SELECT json_agg(m.tool_call_id) FROM iobridge_messages m
         WHERE m.thread_id = t.id AND m.tool_call_id = ANY(:b_calls)
           AND m.role = 'tool') AS answered,
       (SELECT json_agg(w.data ORDER BY w.position)
          FROM (SELECT m.data, m.position FROM iobridge_messages m
                 WHERE m.thread_id = t.id ORDER BY m.position DESC LIMIT :b_limit) AS w
       ) AS newest,
       CASE WHEN :b_first THEN
         (SELECT m.data FROM iobridge_messages m WHERE m.thread_id = t.id AND m.role = 'user'
           ORDER BY m.position LIMIT 1)
       END AS first_user
  FROM iobridge_threads t
 WHERE t.id = :b_thread
"""
    )
    .bindparams(
        bindparam("b_thread", type_=String),
        bindparam("b_ids", type_=ARRAY(String)),
        bindparam("b_calls", type_=ARRAY(String)),
        bindparam("b_limit", type_=Integer),
        bindparam("b_first", type_=Boolean),
    )
    .columns(
        *threads.c,
        stored_ids=JSON(none_as_null=True),
        answered=JSON(none_as_null=True),
        newest=JSON(none_as_null=True),
        first_user=JSON(none_as_null=True),
    )
)

_NEW = insert(threads).values(
    id=bindparam("b_thread"),
    resource_id=bindparam("b_resource"),
    agent_id=bindparam("b_agent"),
    title=bindparam("b_title"),
    metadata=bindparam("b_metadata"),
    created_at=bindparam("b_now"),
    updated_at=bindparam("b_now"),
    state=bindparam("b_state"),
    interrupts=bindparam("b_interrupts"),
)
_CARRY = bindparam("b_carry", type_=Boolean)
_CLAIM = _NEW.on_conflict_do_update(
    index_elements=[threads.c.id],
    set_={
        "title": case((threads.c.title == "", _NEW.excluded.title), else_=threads.c.title),
        "state": case((_CARRY, _NEW.excluded.state), else_=threads.c.state),
        "interrupts": case((_CARRY, _NEW.excluded.interrupts), else_=threads.c.interrupts),
    },
    where=threads.c.resource_id == _NEW.excluded.resource_id,
).returning(threads.c.resource_id)

_APPEND = text(
    """
WITH incoming AS (
  SELECT r.ord, r.message_id, r.role, r.tool_call_id, r.data
    FROM json_to_recordset(CAST(:b_rows AS json))
      AS r(ord int, message_id text, role text, tool_call_id text, data json)
), fresh AS (
  SELECT i.* FROM incoming i
   WHERE (SELECT 1 FROM iobridge_messages m
           WHERE m.thread_id = :b_thread AND m.message_id = i.message_id LIMIT 1) IS NULL
), added AS (
  INSERT INTO iobridge_messages
         (thread_id, position, message_id, role, tool_call_id, data, created_at)
  SELECT :b_thread,
         (SELECT coalesce(max(m.position), -1) FROM iobridge_messages m
           WHERE m.thread_id = :b_thread) + row_number() OVER (ORDER BY f.ord),
         f.message_id, f.role, f.tool_call_id, f.data, :b_now
    FROM fresh f
  RETURNING message_id
), touched AS (
  UPDATE iobridge_threads SET updated_at = :b_now
   WHERE id = :b_thread AND EXISTS (SELECT 1 FROM added)
)
SELECT message_id FROM added
"""
).bindparams(
    bindparam("b_thread", type_=String),
    bindparam("b_rows", type_=String),
    bindparam("b_now", type_=UTCDateTime),
)


def read(
    conn: Connection,
    thread_id: str,
    message_ids: Collection[str],
    tool_call_ids: Collection[str],
    last_n: int,
    first_user: bool,
) -> Any:
    """The thread row with ``stored_ids``, ``answered``, ``newest`` (oldest first; ``None``
    for none) and ``first_user``; ``None`` when there is no thread."""
    return conn.execute(
        _READ,
        {
            "b_thread": thread_id,
            "b_ids": list(message_ids),
            "b_calls": list(tool_call_ids),
            "b_limit": max(last_n, 0),
            "b_first": first_user,
        },
    ).first()


def claim(conn: Connection, values: dict[str, Any], *, carry: bool) -> str | None:
    """Create the thread or lock it, title it if untitled and, with ``carry``, set its
    carryover; the owner, or ``None`` when the thread belongs to another resource."""
    owner: str | None = conn.execute(_CLAIM, {**values, "b_carry": carry}).scalar()
    return owner


def append(
    conn: Connection, thread_id: str, rows: list[dict[str, Any]], now: datetime
) -> set[str]:
    """Insert those of ``rows`` (``message_id``, ``role``, ``tool_call_id``, ``data``) whose
    ids the thread does not hold, in order after its last position; the ids inserted."""
    payload = orjson.dumps([{"ord": i, **row} for i, row in enumerate(rows)]).decode()
    result = conn.execute(_APPEND, {"b_thread": thread_id, "b_rows": payload, "b_now": now})
    return set(result.scalars())
