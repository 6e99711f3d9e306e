"""The run log: the ordered, encoded events of one run, readable from any point.

Both transports read this log: the SSE route frames each entry, the N-PAMP server puts each
entry in one BRIDGE_STREAM_DATA frame. Entries are the encoded event bytes, so every
subscriber carries the very same octets. Sequence numbers start at 1 and are the SSE
``id`` and the N-PAMP ``event_id``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class RunLog:
    """Append-only event log with any number of followers."""

    def __init__(self) -> None:
        self._entries: list[bytes] = []
        self._closed = False
        self._changed: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def closed(self) -> bool:
        """True once the terminal event was appended; the log never grows again."""
        return self._closed

    @property
    def last_seq(self) -> int:
        """Sequence number of the last entry (0 when empty)."""
        return len(self._entries)

    def append(self, data: bytes) -> int:
        """Append one encoded event; returns its sequence number."""
        if self._closed:
            raise RuntimeError("run log is closed")
        self._entries.append(data)
        self._wake()
        return len(self._entries)

    def close(self) -> None:
        """Mark the log complete and wake every follower."""
        self._closed = True
        self._wake()

    def entries(self, after: int = 0) -> list[tuple[int, bytes]]:
        """The entries after sequence number ``after``."""
        return [(after + i + 1, data) for i, data in enumerate(self._entries[after:])]

    async def follow(
        self, after: int = 0, *, idle: float | None = None
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Yield batches of entries after ``after`` until the log is closed.

        Everything ready is yielded as one batch (one write for the transport); then the
        follower waits for more. With ``idle`` set, an empty batch is yielded after that many
        idle seconds so the transport can send a keep-alive.
        """
        position = after
        while True:
            if position < len(self._entries):
                batch = self.entries(position)
                position += len(batch)
                yield batch
                continue
            if self._closed:
                return
            waiter = self._waiter()
            try:
                await asyncio.wait_for(asyncio.shield(waiter), idle)
            except TimeoutError:
                yield []

    def _waiter(self) -> asyncio.Future[None]:
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _wake(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
