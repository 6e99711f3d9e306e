"""A bounded Server-Sent Events reader (sans-IO: bytes in, ``(id, data)`` frames out).

Accepts LF, CRLF and CR line ends (a client must read any server, not only iobridge),
ignores comments (``: ping``) and fields other than ``id`` and ``data``, and refuses an event
larger than its limit before buffering more of it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EventTooLarge", "SseFrame", "SseReader"]


class EventTooLarge(ValueError):
    """One event exceeds the reader's byte limit."""


@dataclass(frozen=True, slots=True)
class SseFrame:
    """One dispatched event: its ``id`` (``None`` when the server sent none) and ``data``."""

    id: str | None
    data: str


class SseReader:
    """Feed bytes, get the complete events they finish."""

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = b""
        self._data: list[str] = []
        self._size = 0
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseFrame]:
        """The events completed by ``chunk``.

        Raises:
            EventTooLarge: the event being read (or an unterminated line) is over the limit.
        """
        self._buffer += chunk
        frames: list[SseFrame] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                break
            end, skip = cut
            line = self._buffer[:end]
            self._buffer = self._buffer[end + skip :]
            frame = self._line(line.decode("utf-8", errors="replace"))
            if frame is not None:
                frames.append(frame)
        if len(self._buffer) + self._size > self.max_event_bytes:
            raise EventTooLarge(f"an event exceeds {self.max_event_bytes} bytes")
        return frames

    def end(self) -> list[SseFrame]:
        """The events completed by the end of the stream (a CR held back as a possible
        first half of CRLF ends its line)."""
        if self._buffer.endswith(b"\r"):
            return self.feed(b"\n")
        return []

    def _line(self, line: str) -> SseFrame | None:
        if not line:
            if not self._data:
                return None
            frame = SseFrame(self._id, "\n".join(self._data))
            self._data, self._size, self._id = [], 0, None
            return frame
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise EventTooLarge(f"an event exceeds {self.max_event_bytes} bytes")
        elif name == "id":
            self._id = value
        return None


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first line ends and how many bytes its terminator takes."""
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, 1)
    if cr == len(buffer) - 1:
        return None  # a CR at the end may be the first half of CRLF
    return cr, 2 if buffer[cr + 1 : cr + 2] == b"\n" else 1
