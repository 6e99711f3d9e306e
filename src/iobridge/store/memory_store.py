"""An in-memory ``ThreadStore`` for tests of the layers above the store.

Same semantics as the SQL store (the shared contract tests run against both), nothing
persisted. Messages are copied in and out through JSON, so callers cannot alias stored data
and non-JSON content fails the same way it would against a database.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from iobridge.errors import ConflictError, InputError, NotFoundError
from iobridge.store.base import (
    MAIN_BRANCH,
    Branch,
    Carryover,
    CheckpointOp,
    Clock,
    StoredMessage,
    Thread,
    ThreadStore,
    check_limit,
    check_thread_ids,
    check_thread_text,
    common_prefix,
    decode_cursor,
    encode_cursor,
    encode_messages,
    replace_from_error,
    too_many_branches,
    utc_now,
)

__all__ = ["MemoryThreadStore"]


def _copy(value: Any) -> Any:
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError as exc:
        raise InputError("value is not JSON", code="INVALID_MESSAGE") from exc


def _carried(carryover: Carryover) -> dict[str, Any]:
    """The thread fields a carryover sets, copied."""
    interrupts = carryover.interrupts
    return {
        "state": _copy(carryover.state),
        "interrupts": _copy(dict(interrupts)) if interrupts is not None else None,
    }


class MemoryThreadStore(ThreadStore):
    """Threads in a dict. Operations never await, so each one is atomic on the event loop."""

    def __init__(self, *, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._threads: dict[str, Thread] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        #: Append time of each message, parallel to ``_messages``.
        self._times: dict[str, list[datetime]] = {}
        #: Each thread's branches once it branched: id -> (record, its messages while it is
        #: not the current one).
        self._branches: dict[str, dict[str, tuple[Branch, list[StoredMessage] | None]]] = {}

    async def get_thread(self, thread_id: str) -> Thread | None:
        return self._threads.get(thread_id)

    async def create_thread(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None = None,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        check_thread_ids(thread_id, resource_id, agent_id)
        check_thread_text(title, metadata)
        if thread_id in self._threads:
            raise ConflictError(f"thread {thread_id!r} already exists", code="THREAD_EXISTS")
        now = self._clock()
        thread = Thread(
            id=thread_id,
            resource_id=resource_id,
            agent_id=agent_id,
            title=title,
            metadata=_copy(dict(metadata or {})),
            created_at=now,
            updated_at=now,
        )
        self._threads[thread_id] = thread
        self._messages[thread_id], self._times[thread_id] = [], []
        return thread

    def _require(self, thread_id: str) -> Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
        return thread

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        check_thread_text(title, metadata)
        thread = self._require(thread_id)
        thread = replace(
            thread,
            title=thread.title if title is None else title,
            metadata=thread.metadata if metadata is None else _copy(dict(metadata)),
            updated_at=self._clock(),
        )
        self._threads[thread_id] = thread
        return thread

    async def set_title_if_empty(self, thread_id: str, title: str) -> bool:
        check_thread_text(title)
        thread = self._threads.get(thread_id)
        if thread is None or thread.title:
            return False
        self._threads[thread_id] = replace(thread, title=title)
        return True

    def _live(self, thread_id: str) -> list[StoredMessage]:
        return [StoredMessage(_copy(m), t) for m, t in
                zip(self._messages[thread_id], self._times[thread_id], strict=True)]

    def _set_live(self, thread_id: str, kept: int, added: list[StoredMessage]) -> None:
        self._messages[thread_id][kept:] = [_copy(s.message) for s in added]
        self._times[thread_id][kept:] = [s.created_at for s in added]

    async def fork_branch(
        self, thread_id: str, from_message_id: str, branch_id: str, *, max_branches: int
    ) -> Branch:
        thread = self._require(thread_id)
        at = next((i for i, m in enumerate(self._messages[thread_id])
                   if m["id"] == from_message_id), None)
        if at is None:
            raise replace_from_error(from_message_id)
        known = self._branches.setdefault(thread_id, {})
        if max(len(known), 1) >= max_branches:
            raise too_many_branches(max_branches)
        current = thread.current_branch or MAIN_BRANCH
        record = known[current][0] if current in known else Branch(
            id=MAIN_BRANCH, from_message_id=None, created_at=thread.created_at, current=True)
        known[current] = (replace(record, current=False), self._live(thread_id))
        now = self._clock()
        branch = Branch(id=branch_id, from_message_id=from_message_id, created_at=now,
                        current=True)
        known[branch_id] = (branch, None)
        self._set_live(thread_id, at, [])
        self._threads[thread_id] = replace(thread, current_branch=branch_id, updated_at=now)
        return branch

    async def list_branches(self, thread_id: str) -> list[Branch]:
        thread = self._threads.get(thread_id)
        if thread is None:
            return []
        known = self._branches.get(thread_id)
        if not known:
            return [Branch(id=MAIN_BRANCH, from_message_id=None, created_at=thread.created_at,
                           current=True)]
        return sorted((b for b, _ in known.values()), key=lambda b: (b.created_at, b.id))

    async def branch_messages(self, thread_id: str, branch_id: str) -> list[StoredMessage] | None:
        thread = self._threads.get(thread_id)
        if thread is None:
            return None
        if branch_id == (thread.current_branch or MAIN_BRANCH):
            return self._live(thread_id)
        entry = self._branches.get(thread_id, {}).get(branch_id)
        return None if entry is None else [
            StoredMessage(_copy(s.message), s.created_at) for s in entry[1] or []]

    async def switch_branch(self, thread_id: str, branch_id: str) -> bool:
        thread = self._threads.get(thread_id)
        if thread is None:
            return False
        current = thread.current_branch or MAIN_BRANCH
        known = self._branches.get(thread_id, {})
        if branch_id == current:
            return True
        if branch_id not in known:
            return False
        live = self._live(thread_id)
        target = known[branch_id][1] or []
        shared = common_prefix([s.message["id"] for s in live],
                               [s.message["id"] for s in target])
        known[current] = (replace(known[current][0], current=False), live)
        known[branch_id] = (replace(known[branch_id][0], current=True), None)
        self._set_live(thread_id, shared, target[shared:])
        self._threads[thread_id] = replace(thread, current_branch=branch_id,
                                           updated_at=self._clock())
        return True

    async def delete_messages(self, thread_id: str, message_ids: Collection[str]) -> int:
        stored = self._messages.get(thread_id)
        if not stored or not message_ids:
            return 0
        gone = set(message_ids)
        kept = [(m, t) for m, t in zip(stored, self._times[thread_id], strict=True)
                if m["id"] not in gone]
        removed = len(stored) - len(kept)
        if removed:
            self._messages[thread_id] = [m for m, _ in kept]
            self._times[thread_id] = [t for _, t in kept]
            self._threads[thread_id] = replace(
                self._threads[thread_id], updated_at=self._clock()
            )
        return removed

    async def delete_thread(self, thread_id: str) -> bool:
        self._messages.pop(thread_id, None)
        self._branches.pop(thread_id, None)
        self._times.pop(thread_id, None)
        return self._threads.pop(thread_id, None) is not None

    async def list_threads(
        self,
        resource_ids: Collection[str] | None,
        agent_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> tuple[list[Thread], str | None]:
        check_limit(limit)
        after = decode_cursor(cursor) if cursor is not None else None
        rows = [
            t
            for t in self._threads.values()
            if (resource_ids is None or t.resource_id in resource_ids)
            and (agent_id is None or t.agent_id == agent_id)
            and (after is None or (t.updated_at, t.id) < after)
        ]
        rows.sort(key=lambda t: (t.updated_at, t.id), reverse=True)
        page = rows[:limit]
        more = len(rows) > limit
        return page, encode_cursor(page[-1].updated_at, page[-1].id) if more else None

    async def list_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[dict[str, Any]]:
        return [m.message for m in await self.list_stored_messages(thread_id, limit, before)]

    async def list_stored_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[StoredMessage]:
        messages = self._messages.get(thread_id, [])
        times = self._times.get(thread_id, [])
        end = len(messages)
        if before is not None:
            index = next((i for i, m in enumerate(messages) if m["id"] == before), None)
            if index is None:
                raise InputError(f"no message {before!r} in this thread", code="INVALID_CURSOR")
            end = index
        start = 0
        if limit is not None:
            check_limit(limit)
            start = max(0, end - limit)
        return [
            StoredMessage(_copy(m), t)
            for m, t in zip(messages[start:end], times[start:end], strict=True)
        ]

    async def append_messages(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        thread = self._require(thread_id)
        new = self._new_messages(thread_id, messages)
        if new:
            now = self._clock()
            self._add(thread_id, new, now)
            self._threads[thread_id] = replace(thread, updated_at=now)
        return _copy(new)  # type: ignore[no-any-return]

    def _new_messages(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The checked messages whose ids the thread does not hold yet, copied."""
        # Built per write (a set kept per thread costs every idle run's thread ~200 bytes).
        stored = self._messages.get(thread_id)
        known = {m["id"] for m in stored} if stored else ()
        return [
            orjson.loads(encoded)
            for message, encoded in encode_messages(messages)
            if message["id"] not in known
        ]

    def _add(self, thread_id: str, new: list[dict[str, Any]], now: datetime) -> None:
        self._messages[thread_id].extend(new)
        self._times[thread_id].extend([now] * len(new))

    async def write_for_run(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None = None,
        carryover: Carryover | None = None,
        checkpoint: CheckpointOp | None = None,
    ) -> None:
        """The run's write in one pass (the default is four calls, each checking and copying
        again); atomic like every operation here, since nothing in it awaits. (This store
        keeps no checkpoints: durable runs need a SQL store.)"""
        if checkpoint is not None:
            raise NotImplementedError("the in-memory store keeps no checkpoints")
        self._write_for_run(thread_id, resource_id, agent_id, messages, title, carryover)

    def _write_for_run(
        self,
        thread_id: str,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None,
        carryover: Carryover | None,
    ) -> None:
        check_thread_ids(thread_id, resource_id, agent_id)
        if title:
            check_thread_text(title)
        new = self._new_messages(thread_id, messages)
        # Copied before anything changes: a carryover that is not JSON stores nothing.
        changes = _carried(carryover) if carryover is not None else {}
        thread = self._threads.get(thread_id)
        if thread is not None and thread.resource_id != resource_id:
            raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
        now = self._clock()
        if new:
            changes["updated_at"] = now
        if title and (thread is None or not thread.title):
            changes["title"] = title
        if thread is None:
            self._threads[thread_id] = Thread(
                id=thread_id, resource_id=resource_id, agent_id=agent_id, metadata={},
                created_at=now, **{"updated_at": now, **changes},
            )
            self._messages[thread_id], self._times[thread_id] = [], []
        elif changes:
            self._threads[thread_id] = replace(thread, **changes)
        if new:
            self._add(thread_id, new, now)

    async def set_carryover(self, thread_id: str, carryover: Carryover) -> None:
        thread = self._require(thread_id)
        self._threads[thread_id] = replace(thread, **_carried(carryover))

    async def close(self) -> None:
        return None
