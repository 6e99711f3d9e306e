"""The run log: the ordered, encoded events of one run, readable from any retained point.

Both transports read this log: the SSE route frames each entry, the N-PAMP server puts each
entry in one BRIDGE_STREAM_DATA frame. Entries are the encoded event bytes, so every
subscriber carries the very same octets. Sequence numbers start at 1 and are the SSE
``id`` and the N-PAMP ``event_id``.

Memory is bounded in bytes: the log keeps at most ``max_bytes`` of entries (the newest; the
terminal event is always kept). A follower asking for entries that were dropped gets
:class:`~iobridge.errors.EventsNotRetained`; followers get ready entries in batches of at
most ``batch_bytes``, so a replay of a long log is sent in bounded chunks under the
transport's backpressure.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import AsyncGenerator

from iobridge.errors import EventsNotRetained

#: Default per-run replay window and follower batch size.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_BATCH_BYTES = 256 * 1024
#: What one retained entry costs beyond its octets (the bytes object and the list slot),
#: counted so the byte bounds bound memory, not only payload.
ENTRY_OVERHEAD = sys.getsizeof(b"") + 8


class RunLog:
    """Append-only event log with any number of followers and a byte-bounded window."""

    def __init__(
        self, *, max_bytes: int = DEFAULT_MAX_BYTES, batch_bytes: int = DEFAULT_BATCH_BYTES,
        after: int = 0,
    ) -> None:
        #: Entries from index ``_head`` on are retained; dropped ones are compacted lazily.
        self._entries: list[bytes] = []
        self._head = 0
        #: Sequence number of the first retained entry, minus one, and of the last entry
        #: (``after``: a run continued from a durable point numbers its events from there).
        self._base = after
        self._last = after
        self._bytes = 0
        #: The largest entry appended: a batch that cannot exceed the limit is sliced whole.
        self._largest = 0
        self._max_bytes = max_bytes
        self._batch_bytes = batch_bytes
        self._closed = False
        #: One future per waiting follower (its own, so a follower's timeout or cancel
        #: touches no other follower; a shared one would need ``shield``, which costs each
        #: idle follower two more futures and their callbacks).
        self._waiters: list[asyncio.Future[bool]] = []

    def __len__(self) -> int:
        return len(self._entries) - self._head

    @property
    def closed(self) -> bool:
        """True once the terminal event was appended; the log never grows again."""
        return self._closed

    @property
    def last_seq(self) -> int:
        """Sequence number of the last entry (0 when empty)."""
        return self._last

    @property
    def first_seq(self) -> int:
        """Sequence number of the first retained entry (``last_seq + 1`` when empty)."""
        return self._base + 1

    @property
    def nbytes(self) -> int:
        """Memory of the retained entries: their octets plus ``ENTRY_OVERHEAD`` each."""
        return self._bytes

    def append(self, data: bytes) -> int:
        """Append one encoded event; returns its sequence number."""
        if self._closed:
            raise RuntimeError("run log is closed")
        self._entries.append(data)
        size = len(data)
        if size > self._largest:
            self._largest = size
        self._bytes += size + ENTRY_OVERHEAD
        if self._bytes > self._max_bytes:
            self._trim()
        self._last += 1
        if self._waiters:
            self._wake()
        return self._last

    def _trim(self) -> None:
        entries = self._entries
        while self._bytes > self._max_bytes and len(entries) - self._head > 1:
            self._bytes -= len(entries[self._head]) + ENTRY_OVERHEAD
            self._head += 1
            self._base += 1
        if self._head > len(entries) // 2:  # pragma: no mutate  (when to compact: memory only)
            del entries[: self._head]
            self._head = 0

    def close(self) -> None:
        """Mark the log complete and wake every follower."""
        self._closed = True
        self._wake()

    def entries(self, after: int = 0, *, max_bytes: int | None = None) -> list[tuple[int, bytes]]:
        """The retained entries after sequence number ``after`` (at most ``max_bytes``,
        but always at least one entry when there is one).

        Raises:
            EventsNotRetained: entries right after ``after`` were dropped.
        """
        if after < self._base:
            raise EventsNotRetained(self.first_seq)
        start = self._head + after - self._base
        if max_bytes is None or (len(self._entries) - start) * self._largest <= max_bytes:
            return [(after + i + 1, data) for i, data in enumerate(self._entries[start:])]
        entries = self._entries
        out: list[tuple[int, bytes]] = []
        size = 0
        for index in range(start, len(entries)):
            data = entries[index]
            size += len(data)
            if out and size > max_bytes:
                break
            out.append((after + len(out) + 1, data))
        return out

    async def follow(
        self, after: int = 0, *, idle: float | None = None
    ) -> AsyncGenerator[list[tuple[int, bytes]]]:
        """Yield batches of entries after ``after`` until the log is closed.

        What is ready is yielded in batches of at most ``batch_bytes`` (one write for the
        transport each); then the follower waits for more. With ``idle`` set, an empty batch
        is yielded after that many idle seconds so the transport can send a keep-alive.

        Raises:
            EventsNotRetained: the follower fell behind the retained window.
        """
        position = after
        while True:
            if position < self.last_seq:
                batch = self.entries(position, max_bytes=self._batch_bytes)
                position = batch[-1][0]
                yield batch
                continue
            if self._closed:
                return
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
            timer = None if idle is None else loop.call_later(
                idle, _time_out, waiter, context=_NO_CONTEXT
            )
            try:
                woken = await waiter
            except BaseException:
                self._unlist(waiter)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if not woken:
                self._unlist(waiter)
                yield []

    def _unlist(self, waiter: asyncio.Future[bool]) -> None:
        """Drop a waiter that was not woken (unless a wake swapped the list meanwhile)."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)


#: The context of the idle timers: they only resolve a future, so they need no copy of the
#: caller's (``call_later`` copies the current context for each timer otherwise).
_NO_CONTEXT = contextvars.Context()


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
