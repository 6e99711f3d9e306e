"""The ``ThreadStore`` interface: threads owned by a resourceId, and their AG-UI messages.

A thread keeps its messages as the AG-UI message JSON exactly as received or produced
(camelCase, assistant ``toolCalls`` and tool ``toolCallId`` intact, unknown keys kept), in
insertion order. Message ids are unique per thread: appending an id that is already stored is
a no-op, which is what lets a client send either its whole history or only the new message.

Thread listings are newest ``updated_at`` first, paged by an opaque keyset cursor over
``(updated_at, id)`` so that pages stay stable when timestamps are equal.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from iobridge.errors import ConflictError, InputError, NotFoundError, ServiceUnavailable
from iobridge.protocol.messages import answered_call, window
from iobridge.protocol.text import MAX_ID_LENGTH, reject_nul, validate_id

__all__ = [
    "MAX_ID_LENGTH",
    "Carryover",
    "Checkpoint",
    "CheckpointDrop",
    "CheckpointOp",
    "CheckpointRow",
    "CheckpointSuperseded",
    "Clock",
    "PointWrite",
    "RunRead",
    "StoreUnavailable",
    "StoredMessage",
    "Thread",
    "ThreadStore",
    "check_limit",
    "check_thread_ids",
    "check_thread_text",
    "decode_cursor",
    "encode_cursor",
    "encode_messages",
    "format_timestamp",
    "is_outage",
    "normalize_messages",
    "outage_refusal",
    "utc_now",
    "validate_id",
]

Clock = Callable[[], datetime]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_now() -> datetime:
    """The default store clock: now, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class Thread:
    """One conversation, owned by ``resource_id``."""

    id: str
    #: The owner: authorization scopes every access by it.
    resource_id: str
    #: The agent the thread was created for, if any.
    agent_id: str | None = None
    #: Empty until set by the client or by a generated title.
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    #: The shared state the thread's last run ended with (``None``: none yet). Not shown
    #: by ``to_json``: it reaches the next run, not thread listings.
    state: Any = None
    #: The interrupt record of the thread (see ``Carryover``), ``None`` when there is none.
    interrupts: Mapping[str, Any] | None = None
    #: The branch the thread's messages are (``None``: it never branched, ``MAIN_BRANCH``).
    current_branch: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The API shape: camelCase, ISO-8601 UTC with ``Z``, absent ``agentId`` omitted."""
        data: dict[str, Any] = {"id": self.id, "resourceId": self.resource_id}
        if self.agent_id is not None:
            data["agentId"] = self.agent_id
        data["title"] = self.title
        data["metadata"] = dict(self.metadata)
        data["createdAt"] = format_timestamp(self.created_at)
        data["updatedAt"] = format_timestamp(self.updated_at)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Carryover:
    """What a run leaves in its thread for the next run, written with its messages.

    ``interrupts`` is ``{"open": [Interrupt, …], "answered": [ResumeEntry, …]}``: the
    interrupts the run ended with (AG-UI objects, camelCase) and the answers of the series
    of resumed runs that led to them (``None``: no interrupts pending or answered).
    """

    state: Any = None
    interrupts: Mapping[str, Any] | None = None


#: The id of a thread's first branch (the one it has before any ``replaceFrom``).
MAIN_BRANCH = "main"


@dataclass(frozen=True, slots=True, kw_only=True)
class Branch:
    """One version of a thread's conversation: the current one is the thread's messages; an
    earlier one was replaced from ``from_message_id`` on (a regenerate or an edit)."""

    id: str
    #: The message the branch was started at (``None``: the thread's first branch).
    from_message_id: str | None
    created_at: datetime
    current: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "fromMessageId": self.from_message_id,
                "createdAt": format_timestamp(self.created_at), "current": self.current}


def common_prefix(current: Sequence[str], target: Sequence[str]) -> int:
    """How many leading message ids two branches share (what a switch keeps in place)."""
    shared = 0
    for a, b in zip(current, target, strict=False):
        if a != b:
            break
        shared += 1
    return shared


def replace_from_error(message_id: str) -> InputError:
    return InputError(
        f"replaceFrom {message_id!r} is not a message of the thread's current branch",
        code="INVALID_REPLACE_FROM",
    )


def too_many_branches(limit: int) -> InputError:
    return InputError(f"the thread has {limit} branches already", code="TOO_MANY_BRANCHES")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored message with the time it was appended (for formats that show it)."""

    message: dict[str, Any]
    created_at: datetime


def format_timestamp(value: datetime) -> str:
    """ISO-8601 in UTC with millisecond precision and a ``Z`` suffix (JavaScript's format)."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def normalize_messages(messages: Iterable[object]) -> list[dict[str, Any]]:
    """Check messages for storage and drop repeated ids within the batch (first one wins).

    Each message must be a JSON object with a valid string ``id`` and a printable string
    ``role``, and no text in it may hold U+0000; the rest is stored untouched.

    Raises:
        InputError: a message is not storable (code ``INVALID_MESSAGE``); nothing is stored.
    """
    return [message for message, _ in encode_messages(messages)]


def encode_messages(messages: Iterable[object]) -> list[tuple[dict[str, Any], bytes]]:
    """:func:`normalize_messages`, each message with its JSON octets (checking encodes it)."""
    seen: set[str] = set()
    out: list[tuple[dict[str, Any], bytes]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InputError(f"message {index} is not an object", code="INVALID_MESSAGE")
        try:
            message_id = validate_id(message.get("id"), f"message {index} id")
        except InputError as exc:
            raise InputError(exc.message, code="INVALID_MESSAGE") from None
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InputError(f"message {index} has no role", code="INVALID_MESSAGE")
        try:
            validate_id(role, f"message {index} role")
        except InputError as exc:
            raise InputError(exc.message, code="INVALID_MESSAGE") from None
        if message_id in seen:
            continue
        try:
            encoded = orjson.dumps(message)
        except TypeError as exc:
            raise InputError(f"message {index} is not JSON", code="INVALID_MESSAGE") from exc
        reject_nul(message, encoded, code="INVALID_MESSAGE")
        seen.add(message_id)
        out.append((message, encoded))
    return out


def encode_cursor(updated_at: datetime, thread_id: str) -> str:
    """The opaque cursor that resumes a listing after ``(updated_at, thread_id)``."""
    micros = (updated_at - _EPOCH) // timedelta(microseconds=1)
    raw = orjson.dumps([micros, thread_id])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Parse a cursor made by ``encode_cursor``.

    Raises:
        InputError: the cursor is not one of ours (code ``INVALID_CURSOR``).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        micros, thread_id = orjson.loads(raw)
        if type(micros) is not int or not isinstance(thread_id, str):
            raise ValueError("bad cursor fields")
        validate_id(thread_id)
        when = _EPOCH + timedelta(microseconds=micros)
    except (binascii.Error, ValueError, TypeError, OverflowError, OSError, InputError):
        raise InputError("cursor is not valid", code="INVALID_CURSOR") from None
    return when, thread_id


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRead:
    """What a run needs to know about its thread before it starts (one read)."""

    thread: Thread | None
    #: Of the run's incoming message ids, those already stored in the thread.
    stored_ids: frozenset[str] = frozenset()
    #: Of the run's incoming tool results' call ids, those the thread already answered.
    answered: frozenset[str] = frozenset()
    #: The newest ``last_n`` stored messages, oldest first, reaching back far enough that no
    #: tool result in it is separated from the assistant message that issued its call.
    window: list[dict[str, Any]] = field(default_factory=list)
    #: The thread's first stored user message, when asked for (titles).
    first_user: dict[str, Any] | None = None


class CheckpointSuperseded(Exception):
    """The run was taken over by another process (its epoch moved on): stop writing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """A durable run as stored at its last durable point."""

    owner: str
    run_id: str
    thread_id: str
    resource_id: str
    agent_id: str
    #: Takeovers so far: the process that continues the run moves it to ``epoch + 1``.
    epoch: int
    #: ``running`` (between model steps) or ``parked`` (waiting on frontend tool results).
    phase: str
    #: Sequence number of the run's last event at the point.
    last_seq: int
    #: Bytes the checkpoint holds (base and point), against ``max_checkpoint_bytes``.
    nbytes: int
    #: What does not change: the run's input and its thread view.
    base: dict[str, Any]
    #: What the point changed: the messages so far, the calls it waits on, state, usage…
    point: dict[str, Any]
    #: The replica that holds the run (``""``: none; a drained process let it go).
    holder: str = ""
    #: Posted results by call id, in the order they were posted: ``(content, is_error)``.
    results: dict[str, tuple[str, bool]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointRow:
    """A durable run's first point, written with its start write (``write_for_run``) or
    alone (``insert_checkpoint``) when it has none."""

    owner: str
    run_id: str
    thread_id: str
    resource_id: str
    agent_id: str
    last_seq: int
    base: bytes
    point: bytes
    holder: str


@dataclass(kw_only=True, slots=True)
class PointWrite:
    """A later point of a run: the row's new values, compare-and-set on ``epoch``. While it
    waits in the write queue, a newer point of the run replaces its values (``replace``):
    only the last point matters, and each costs a statement only if it reaches the store."""

    owner: str
    run_id: str
    epoch: int
    phase: str
    last_seq: int
    nbytes: int
    point: bytes
    holder: str
    #: Taken by the store's writer: no longer replaceable.
    taken: bool = False
    #: The run concluded before the write was taken: nothing to write.
    withdrawn: bool = False

    def replace(self, newer: PointWrite) -> bool:
        """Take ``newer``'s values if not taken yet (True), else leave it to be written."""
        with _POINT_LOCK:
            if self.taken:
                return False
            self.phase, self.last_seq = newer.phase, newer.last_seq
            self.nbytes, self.point = newer.nbytes, newer.point
            return True

    def withdraw(self) -> None:
        with _POINT_LOCK:
            if not self.taken:
                self.withdrawn = True

    def take(self) -> bool:
        """Called by the writer (another thread on SQLite): False if withdrawn."""
        with _POINT_LOCK:
            self.taken = True
            return not self.withdrawn


@dataclass(frozen=True, slots=True)
class CheckpointDrop:
    """Forget a concluded run's checkpoint (at ``epoch``: not a successor's), with its end
    write, which it fences: a run another process took over (its row at a later epoch, or
    gone after being ``stored``) stores nothing (``CheckpointSuperseded``)."""

    owner: str
    run_id: str
    epoch: int
    #: Whether results were posted for it (their rows go too; none: no statement).
    results: bool = True
    #: Its row was stored (with the start write, or claimed to continue it): gone at the end
    #: write, another process concluded the run.
    stored: bool = False


#: What a run's write may carry for its checkpoint: its first point, or its drop.
CheckpointOp = CheckpointRow | CheckpointDrop

#: Guards ``PointWrite`` values between the event loop and the store's writer thread.
_POINT_LOCK = threading.Lock()


class ThreadStore(ABC):
    """Threads and their messages. Every method is safe to call concurrently.

    Ownership is the caller's job: the store records ``resource_id`` and filters listings by
    it, while the HTTP layer and the run engine decide who may see which resource.
    """

    @abstractmethod
    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread called ``thread_id``, or ``None``."""

    @abstractmethod
    async def create_thread(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None = None,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Create an empty thread.

        Raises:
            ConflictError: a thread with this id exists (code ``THREAD_EXISTS``).
            InputError: an id is empty, too long or not printable (code ``INVALID_ID``).
        """

    async def get_or_create_thread(
        self, thread_id: str, *, resource_id: str, agent_id: str | None = None
    ) -> tuple[Thread, bool]:
        """The thread, created if missing; ``True`` when this call created it.

        The run engine uses this for client-minted thread ids; checking that an existing
        thread belongs to the caller's resource stays with the caller.
        """
        # Create first: callers use this for ids they just found missing, so the insert
        # usually succeeds in one round trip; a conflict means it exists (or just appeared).
        try:
            return (
                await self.create_thread(thread_id, resource_id=resource_id, agent_id=agent_id),
                True,
            )
        except ConflictError:
            thread = await self.get_thread(thread_id)
            if thread is None:
                raise
            return thread, False

    @abstractmethod
    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Replace the title and/or metadata and touch ``updated_at``.

        Raises:
            NotFoundError: no such thread.
        """

    @abstractmethod
    async def set_title_if_empty(self, thread_id: str, title: str) -> bool:
        """Set the title unless one is already set; ``True`` if it was set.

        Used for generated titles, which must never overwrite one the user chose.
        """

    @abstractmethod
    async def delete_thread(self, thread_id: str) -> bool:
        """Delete the thread and its messages; ``False`` if there was no such thread."""

    @abstractmethod
    async def list_threads(
        self,
        resource_ids: Collection[str] | None,
        agent_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> tuple[list[Thread], str | None]:
        """A page of threads, newest ``updated_at`` first, and the cursor of the next page.

        Args:
            resource_ids: owners to include; ``None`` means every owner.
            agent_id: only threads created for this agent.
            limit: page size, at least 1.
            cursor: ``next_cursor`` of the previous page.

        Returns:
            The page, and ``None`` as cursor on the last page.

        Raises:
            InputError: the cursor is not valid (code ``INVALID_CURSOR``) or limit < 1.
        """

    @abstractmethod
    async def list_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The thread's messages, oldest first.

        Args:
            thread_id: the thread; an unknown thread has no messages.
            limit: keep only the last ``limit`` messages (of those selected by ``before``).
            before: a message id: only messages stored before it.

        Raises:
            InputError: ``before`` names no message of this thread (code ``INVALID_CURSOR``).
        """

    @abstractmethod
    async def list_stored_messages(
        self, thread_id: str, limit: int | None = None, before: str | None = None
    ) -> list[StoredMessage]:
        """Like ``list_messages``, each message with the time it was appended."""

    @abstractmethod
    async def append_messages(
        self, thread_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Append messages in order, skipping ids already stored; all or nothing.

        Touches ``updated_at`` when anything was appended.

        Returns:
            The messages actually appended.

        Raises:
            NotFoundError: no such thread.
            InputError: a message lacks a valid ``id`` or ``role``; nothing is stored.
        """

    @abstractmethod
    async def fork_branch(
        self, thread_id: str, from_message_id: str, branch_id: str, *, max_branches: int
    ) -> Branch:
        """Start a new current branch at ``from_message_id``: the current branch (whole)
        becomes an earlier branch, and the thread keeps only the messages before that one.
        One transaction.

        Raises:
            NotFoundError: no such thread.
            InputError: the message is not in the current branch (``INVALID_REPLACE_FROM``),
                or the thread has ``max_branches`` already (``TOO_MANY_BRANCHES``).
        """

    @abstractmethod
    async def list_branches(self, thread_id: str) -> list[Branch]:
        """The thread's branches, oldest first (one, ``MAIN_BRANCH``, if it never branched)."""

    @abstractmethod
    async def branch_messages(self, thread_id: str, branch_id: str) -> list[StoredMessage] | None:
        """A branch's messages, oldest first (``None``: no such branch)."""

    @abstractmethod
    async def switch_branch(self, thread_id: str, branch_id: str) -> bool:
        """Make ``branch_id`` the current branch (its messages the thread's); one
        transaction. False: no such branch."""

    @abstractmethod
    async def delete_messages(self, thread_id: str, message_ids: Collection[str]) -> int:
        """Remove these messages from the thread (a rolled-back run's); how many were.

        Touches ``updated_at`` when anything was removed. Unknown ids are skipped.
        """

    async def read_for_run(
        self,
        thread_id: str,
        *,
        message_ids: Collection[str],
        tool_call_ids: Collection[str],
        last_n: int,
        first_user: bool = False,
    ) -> RunRead:
        """Everything a run needs before it starts, without loading the whole thread.

        This default reads the whole thread; stores override it with indexed queries.
        """
        thread = await self.get_thread(thread_id)
        if thread is None:
            return RunRead(thread=None)
        stored = await self.list_messages(thread_id)
        ids = {m["id"] for m in stored}
        answered = {c for m in stored if (c := answered_call(m)) is not None}
        return RunRead(
            thread=thread,
            stored_ids=frozenset(i for i in message_ids if i in ids),
            answered=frozenset(c for c in tool_call_ids if c in answered),
            window=[dict(m) for m in window(stored, last_n)],
            first_user=next((m for m in stored if m.get("role") == "user"), None)
            if first_user
            else None,
        )

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
        """A run's write: create the thread if missing, append ``messages`` (ids already
        stored are skipped), set ``title`` unless the thread has one, and replace the
        thread's state and interrupts with ``carryover`` when given; with ``checkpoint``,
        store or drop the run's checkpoint too (stores that ``keeps_checkpoints``). Stores
        make this one transaction; this default is four calls.

        Raises:
            NotFoundError: the thread exists but belongs to another resource.
            InputError: a message is not storable (nothing is stored).
        """
        if checkpoint is not None:
            raise NotImplementedError("this store keeps no checkpoints")
        normalize_messages(messages)
        thread, _ = await self.get_or_create_thread(
            thread_id, resource_id=resource_id, agent_id=agent_id
        )
        if thread.resource_id != resource_id:
            raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
        if messages:
            await self.append_messages(thread_id, messages)
        if title:
            await self.set_title_if_empty(thread_id, title)
        if carryover is not None:
            await self.set_carryover(thread_id, carryover)

    def start_write_for_run(
        self,
        thread_id: str,
        *,
        resource_id: str,
        agent_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        title: str | None = None,
        carryover: Carryover | None = None,
        checkpoint: CheckpointOp | None = None,
    ) -> asyncio.Future[None]:
        """Begin :meth:`write_for_run` in a task; the future settles when it committed or
        failed. The run engine starts its writes this way and waits only where it must
        (before the terminal event)."""
        # Named only when given: a store written before checkpoints keeps working.
        extra = {} if checkpoint is None else {"checkpoint": checkpoint}
        return asyncio.ensure_future(self.write_for_run(
            thread_id, resource_id=resource_id, agent_id=agent_id, messages=messages,
            title=title, carryover=carryover, **extra,
        ))

    async def set_carryover(self, thread_id: str, carryover: Carryover) -> None:
        """Replace the thread's state and interrupt record (stores that use the default
        ``write_for_run`` implement this)."""
        raise NotImplementedError

    # -- durable runs (``store.checkpoint_rows``); a store without them says so ----------

    #: Whether this store keeps run checkpoints across processes (durable runs need it).
    keeps_checkpoints = False

    def insert_checkpoint(self, row: CheckpointRow) -> asyncio.Future[None]:
        """Begin storing a run's first point when it has no start write to go with."""
        raise NotImplementedError

    def write_point(self, job: PointWrite) -> asyncio.Future[bool]:
        """Begin storing a later point; the future is True once stored, False if the run's
        checkpoint is gone (dropped, or never stored), and fails with
        ``CheckpointSuperseded`` if another process took the run over meanwhile."""
        raise NotImplementedError

    async def load_checkpoint(self, owner: str, run_id: str) -> Checkpoint | None:
        """A run's checkpoint and the results posted for it."""
        raise NotImplementedError

    async def claim_checkpoint(self, owner: str, run_id: str, epoch: int, holder: str) -> bool:
        """Take the run over from ``epoch`` for ``holder`` (True for exactly one caller)."""
        raise NotImplementedError

    def drop_checkpoint(
        self, owner: str, run_id: str, epoch: int | None = None
    ) -> asyncio.Future[None]:
        """Begin forgetting the run's checkpoint (it concluded) when it has no end write to
        go with; with ``epoch``, only at that epoch."""
        raise NotImplementedError

    async def record_tool_result(
        self, owner: str, run_id: str, tool_call_id: str, content: str, is_error: bool
    ) -> bool:
        """Keep a posted frontend result once; False if the call already had one."""
        raise NotImplementedError

    async def list_checkpoints(
        self, *, holder: str | None = None, phase: str | None = None
    ) -> list[tuple[str, str, str]]:
        """``(owner, run_id, phase)`` of the stored checkpoints (of ``holder``, in ``phase``
        when given), oldest point first."""
        raise NotImplementedError

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""

    async def __aenter__(self) -> ThreadStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class StoreUnavailable(ConnectionError):
    """The database is down, unreachable or too slow: what a store raises from its driver's
    error (answered 503, not a bug's 500)."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be reached (rather than a bug or bad input):
    :class:`StoreUnavailable`, or a socket's ``OSError`` or ``TimeoutError``."""
    return isinstance(exc, OSError | TimeoutError)


#: Seconds a refused client is told to wait (``Retry-After``) when the store does not answer.
STORE_RETRY_AFTER = 5.0


def outage_refusal() -> ServiceUnavailable:
    """What a request answers when the store did not (:func:`is_outage`): 503
    ``STORE_UNAVAILABLE``, the same on every route, before any stream."""
    return ServiceUnavailable(
        "the thread store does not answer", code="STORE_UNAVAILABLE",
        retry_after=STORE_RETRY_AFTER,
    )


def check_thread_ids(thread_id: str, resource_id: str, agent_id: str | None) -> None:
    """Validate the ids of a new thread (the columns hold at most 256 characters)."""
    validate_id(thread_id, "threadId")
    validate_id(resource_id, "resourceId")
    if agent_id is not None:
        validate_id(agent_id, "agentId")


def check_thread_text(title: str | None, metadata: Mapping[str, Any] | None = None) -> None:
    """Refuse U+0000 in a title or metadata (``INVALID_TEXT``) on every store alike."""
    reject_nul(title)
    reject_nul(metadata)


def check_limit(limit: int) -> None:
    """Raise ``InputError`` unless ``limit`` is a positive page size."""
    if limit < 1:
        raise InputError("limit must be at least 1", code="INVALID_REQUEST")
