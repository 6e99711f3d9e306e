"""Server-Sent Events: framing for AG-UI runs, and a bounded decoder for upstream streams.

LF only: ``@ag-ui/client`` splits frames on ``\\n\\n`` and breaks on CRLF. Each event is
``id: <seq>\\n`` + ``data: <one-line JSON>\\n\\n``; the ``id`` lets a client resume with
``Last-Event-ID``. Comments (``: ping``) keep idle connections alive through proxies.

``SSEDecoder`` reads what other servers send (an upstream AG-UI agent), so it follows the
WHATWG parsing rules rather than our own framing: CRLF, LF or CR line ends, several ``data:``
lines joined by LF, comments, an optional space after the colon. It is sans-IO (bytes in,
events out) and bounded: an event whose data exceeds ``max_event_bytes``, or a line longer
than that plus a few bytes for its field name, is an error, never an ever-growing buffer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

PING = b": ping\n\n"
#: What a stream says while its run waits for the runs ahead of it on the thread.
QUEUED = b": queued\n\n"


def sse_frames(entries: Iterable[tuple[int, bytes]], tags: list[bytes] | None = None) -> bytes:
    """Frame several events into one chunk (one socket write for a batch); ``tags``: what
    follows each event's number in its ``id`` (a durable run's open state,
    ``protocol.event_ids``)."""
    if tags is None:
        return b"".join([b"id: %d\ndata: %b\n\n" % entry for entry in entries])
    if tags.count(tags[0]) == len(tags):  # one open state for the whole batch (most are)
        frame = b"id: %d" + tags[0].replace(b"%", b"%%") + b"\ndata: %b\n\n"
        return b"".join([frame % entry for entry in entries])
    return b"".join([b"id: %d%b\ndata: %b\n\n" % (number, tag, data)
                     for (number, data), tag in zip(entries, tags, strict=True)])


class SSEError(ValueError):
    """The stream is not valid SSE (not UTF-8) or an event exceeds the decoder's bound."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its ``data`` (lines joined by LF) and ``event`` name."""

    data: str
    event: str = "message"


#: Bytes a line may hold beyond ``max_event_bytes``: its field name (``data: ``) and so on.
LINE_ALLOWANCE = 64
#: A line end; a CR at the very end of the buffer may be the first half of a CRLF.
_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Bytes of an ``text/event-stream`` body in, complete events out.

    Args:
        max_event_bytes: Most bytes one event's data (its lines joined by LF) may hold; a
            line may hold ``LINE_ALLOWANCE`` bytes more.
    """

    def __init__(self, *, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self._event = b""
        self._first = True

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``.

        Raises:
            SSEError: a line or an event over the bound, or text that is not UTF-8.
        """
        buffer = self._buffer
        buffer += chunk
        if self._first and len(buffer) >= 3:
            self._first = False
            if buffer.startswith(b"\xef\xbb\xbf"):
                del buffer[:3]
        events: list[SSEEvent] = []
        start = 0
        for match in _EOL.finditer(buffer):
            if match.group() == b"\r" and match.end() == len(buffer):
                break  # wait for the next chunk: it may start with the LF of a CRLF
            self._line(bytes(buffer[start:match.start()]), events)
            start = match.end()
        del buffer[:start]
        if len(buffer) > self.max_event_bytes + LINE_ALLOWANCE:
            raise SSEError(f"an SSE line is longer than {self.max_event_bytes} bytes")
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                data = b"\n".join(self._data)
                try:
                    text = data.decode("utf-8")
                    kind = self._event.decode("utf-8") or "message"
                except UnicodeDecodeError:
                    raise SSEError("an SSE event is not UTF-8") from None
                events.append(SSEEvent(text, kind))
            self._data, self._size, self._event = [], 0, b""
            return
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._size += len(value) + (1 if self._data else 0)
            if self._size > self.max_event_bytes:
                raise SSEError(f"an SSE event is larger than {self.max_event_bytes} bytes")
            self._data.append(value)
        elif name == b"event":
            self._event = value
        # ``id`` and ``retry`` steer reconnection, which an upstream run does not do.
