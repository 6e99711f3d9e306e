"""The run path's statements on PostgreSQL: one read at run start, two statements per write.

On asyncpg each statement is a network round trip and, on the server's event loop, about as
much Python (SQLAlchemy, the asyncpg adapter, its protocol) as a whole SQLite query. The
generic path (``sqlalchemy_store``) costs a run on an existing thread 13 statements; here:

* ``read_many``: one ``SELECT`` of the thread rows of a batch of runs' reads with, as JSON
  aggregates of indexed subqueries, each run's incoming ids already stored (merge by id), the
  calls already answered, the newest ``lastMessages`` and, when asked, the first user message.
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

Both take many threads' rows: ``write_runs`` writes the run writes that group commit put in
one transaction (``run_batches.write_batch``: a thread at most once per call, so each thread's
writes stay in order) as one ``claim`` and one ``append`` in all, and the reasoning above
holds for every row: the claim locks them all before the append's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Integer, String, bindparam, text
from sqlalchemy.dialects.postgresql import JSON
from sqlalchemy.engine import Connection

from iobridge.errors import NotFoundError
from iobridge.store.records import threads
from iobridge.store.run_batches import RunReadJob, RunWrite

__all__ = ["append", "claim", "read_many", "write_runs"]

_READ_MANY = (
    text(
        """
SELECT t.id, t.resource_id, t.agent_id, t.title, t.metadata, t.created_at, t.updated_at,
       t.state, t.interrupts, t.current_branch,
       (SELECT json_agg(m.message_id) FROM iobridge_messages m
         WHERE m.thread_id = t.id AND m.message_id = ANY(r.ids)) AS stored_ids,
       (SELECT json_agg(m.tool_call_id) FROM iobridge_messages m
         WHERE m.thread_id = t.id AND m.tool_call_id = ANY(r.calls)
           AND m.role = 'tool') AS answered,
       (SELECT json_agg(w.data ORDER BY w.position)
          FROM (SELECT m.data, m.position FROM iobridge_messages m
                 WHERE m.thread_id = t.id ORDER BY m.position DESC LIMIT r.lim) AS w
       ) AS newest,
       CASE WHEN r.first THEN
         (SELECT m.data FROM iobridge_messages m WHERE m.thread_id = t.id AND m.role = 'user'
           ORDER BY m.position LIMIT 1)
       END AS first_user,
       r.ord
  FROM json_to_recordset(CAST(:b_reads AS json))
         AS r(ord int, thread text, ids text[], calls text[], lim int, first boolean)
  JOIN iobridge_threads t ON t.id = r.thread
"""
    )
    .bindparams(bindparam("b_reads", type_=String))
    .columns(
        *threads.c,
        stored_ids=JSON(none_as_null=True),
        answered=JSON(none_as_null=True),
        newest=JSON(none_as_null=True),
        first_user=JSON(none_as_null=True),
        ord=Integer,
    )
)

_CLAIM = text(
    """
WITH r AS (
  SELECT * FROM json_to_recordset(CAST(:b_rows AS json))
    AS r(id text, resource_id text, agent_id text, title text, carry boolean,
         state json, interrupts json, now timestamptz)
)
INSERT INTO iobridge_threads AS t
       (id, resource_id, agent_id, title, metadata, created_at, updated_at, state, interrupts)
SELECT r.id, r.resource_id, r.agent_id, r.title, CAST('{}' AS json), r.now, r.now,
       r.state, r.interrupts
  FROM r ORDER BY r.id
ON CONFLICT (id) DO UPDATE
   SET title = CASE WHEN t.title = '' THEN excluded.title ELSE t.title END,
       state = CASE WHEN (SELECT r.carry FROM r WHERE r.id = excluded.id)
                    THEN excluded.state ELSE t.state END,
       interrupts = CASE WHEN (SELECT r.carry FROM r WHERE r.id = excluded.id)
                         THEN excluded.interrupts ELSE t.interrupts END
 WHERE t.resource_id = excluded.resource_id
RETURNING t.id
"""
).bindparams(bindparam("b_rows", type_=String))

_APPEND = text(
    """
WITH incoming AS (
  SELECT r.ord, r.thread_id, r.message_id, r.role, r.tool_call_id, r.data, r.now
    FROM json_to_recordset(CAST(:b_rows AS json))
      AS r(ord int, thread_id text, message_id text, role text, tool_call_id text, data json,
           now timestamptz)
), fresh AS (
  SELECT i.* FROM incoming i
   WHERE (SELECT 1 FROM iobridge_messages m
           WHERE m.thread_id = i.thread_id AND m.message_id = i.message_id LIMIT 1) IS NULL
), added AS (
  INSERT INTO iobridge_messages
         (thread_id, position, message_id, role, tool_call_id, data, created_at)
  SELECT f.thread_id,
         (SELECT coalesce(max(m.position), -1) FROM iobridge_messages m
           WHERE m.thread_id = f.thread_id)
           + row_number() OVER (PARTITION BY f.thread_id ORDER BY f.ord),
         f.message_id, f.role, f.tool_call_id, f.data, f.now
    FROM fresh f
  RETURNING thread_id, message_id, created_at
), touched AS (
  UPDATE iobridge_threads t SET updated_at = a.at
    FROM (SELECT thread_id, max(created_at) AS at FROM added GROUP BY thread_id) AS a
   WHERE t.id = a.thread_id
)
SELECT thread_id, message_id FROM added
"""
).bindparams(bindparam("b_rows", type_=String))


def read_many(conn: Connection, reads: Sequence[RunReadJob]) -> dict[int, Any]:
    """For each read whose thread exists, by its index in ``reads``: the thread row with
    ``stored_ids``, ``answered``, ``newest`` (oldest first; ``None`` for none) and
    ``first_user``. One statement however many reads: the reads of a burst of runs are one
    round trip, not one each."""
    payload = orjson.dumps(
        [
            {
                "ord": i,
                "thread": r.thread_id,
                "ids": r.message_ids,
                "calls": r.tool_call_ids,
                "lim": max(r.last_n, 0),
                "first": r.first_user,
            }
            for i, r in enumerate(reads)
        ]
    ).decode()
    return {row.ord: row for row in conn.execute(_READ_MANY, {"b_reads": payload})}


def claim(conn: Connection, rows: list[dict[str, Any]]) -> set[str]:
    """Create each thread of ``rows`` (``id``, ``resource_id``, ``agent_id``, ``title``,
    ``carry``, ``state``, ``interrupts``, ``now``; no id twice) or lock it, title it if
    untitled and, with ``carry``, set its carryover; the ids claimed: a thread of another
    resource is not among them, and nothing was written to it. Rows are locked in id order,
    so two batches on different nodes never deadlock."""
    payload = orjson.dumps(rows).decode()
    return set(conn.execute(_CLAIM, {"b_rows": payload}).scalars())


def append(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Insert those of ``rows`` (``thread_id``, ``message_id``, ``role``, ``tool_call_id``,
    ``data``, ``now``: its ``created_at``) whose ids their thread does not hold, in order
    after its last position; the ``(thread_id, message_id)`` inserted."""
    payload = orjson.dumps([{"ord": i, **row} for i, row in enumerate(rows)]).decode()
    result = conn.execute(_APPEND, {"b_rows": payload})
    return {(row.thread_id, row.message_id) for row in result}


def write_runs(conn: Connection, group: list[RunWrite]) -> list[tuple[bool, Any]]:
    """The run writes of distinct threads as one ``claim`` and one ``append`` (a
    ``run_batches.WriteRuns``)."""
    claimed = claim(conn, [w.claim_row for w in group])
    rows = [row for w in group if w.claim_row["id"] in claimed for row in w.rows]
    if rows:
        append(conn, rows)
    return [
        (True, None)
        if w.claim_row["id"] in claimed
        else (False, NotFoundError("thread not found", code="THREAD_NOT_FOUND"))
        for w in group
    ]
