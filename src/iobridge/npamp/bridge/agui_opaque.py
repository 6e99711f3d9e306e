"""What iobridge's peers agree to carry opaquely: the io-bridge route surface, as JSON.

Opaque carriage interprets nothing (CC-OPAQUE §1.3), so the two peers agree out of band on
what the payloads are. iobridge's agreement is the io Agent Protocol's own HTTP route surface,
one foreign interaction per Bridge exchange:

* the envelope ``method`` names the route, verbatim: ``POST /run``,
  ``POST /runs/{runId}/tool-calls/{toolCallId}/result``, ``POST /runs/{runId}/cancel`` (path
  segments percent-encoded, as in a URL);
* the request payload is the route's JSON body, octet for octet;
* ``POST /run`` is answered by a streamed reply whose reassembled payload is one
  ``application/json`` document, the JSON array of the run's AG-UI events in order (each event
  the very octets SSE puts after ``data:``); the other routes by one BRIDGE_RESPONSE holding the
  route's JSON answer;
* a refusal of the io protocol is a BRIDGE_ERROR carrying the route's JSON error object, as
  HTTP sends it (CC-OPAQUE §8.1); failures below it are transport errors.

None of MAP-AGUI §4-§6 applies: no StreamControl, no event_id, no resume. This module holds
the pure pieces of that agreement; it never sees a frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = [
    "RUN_ROUTE",
    "EventArrayReader",
    "EventArrayWriter",
    "MalformedEventArray",
    "Route",
    "cancel_route",
    "parse_route",
    "tool_result_route",
]

#: The route that starts a run (its reply is the event array).
RUN_ROUTE = "POST /run"
_TOOL_RESULT = re.compile(r"POST /runs/([^/ ]+)/tool-calls/([^/ ]+)/result")
_CANCEL = re.compile(r"POST /runs/([^/ ]+)/cancel")


@dataclass(frozen=True, slots=True)
class Route:
    """One parsed route: ``kind`` is ``run``, ``tool_result`` or ``cancel``."""

    kind: str
    run_id: str = ""
    tool_call_id: str = ""


def _segment(value: str) -> str:
    return quote(value, safe="")


def tool_result_route(run_id: str, tool_call_id: str) -> str:
    """The method naming a frontend tool result for ``run_id``."""
    return f"POST /runs/{_segment(run_id)}/tool-calls/{_segment(tool_call_id)}/result"


def cancel_route(run_id: str) -> str:
    """The method naming a cancel of ``run_id``."""
    return f"POST /runs/{_segment(run_id)}/cancel"


def parse_route(method: str) -> Route | None:
    """The route a method names, or ``None`` when it names none of ours."""
    if method == RUN_ROUTE:
        return Route("run")
    if match := _TOOL_RESULT.fullmatch(method):
        return Route("tool_result", unquote(match[1]), unquote(match[2]))
    if match := _CANCEL.fullmatch(method):
        return Route("cancel", unquote(match[1]))
    return None


class EventArrayWriter:
    """Producer side: the chunks whose concatenation is ``[event,event,...]``.

    One event per chunk keeps each event in one frame; the reader does not rely on it.
    """

    def __init__(self) -> None:
        self._opened = False

    def chunk(self, event: bytes) -> bytes:
        """The chunk carrying ``event`` (its octets untouched)."""
        if self._opened:
            return b"," + event
        self._opened = True
        return b"[" + event

    def close(self) -> bytes:
        """The last chunk, closing the array (``[]`` when no event was written)."""
        return b"]" if self._opened else b"[]"


class MalformedEventArray(ValueError):
    """The reassembled reply is not a JSON array of objects (or an element is too large)."""


_SPECIAL = re.compile(rb'["\\{}\[\]]')
_WS = b" \t\r\n"


class EventArrayReader:
    """Consumer side: the event octets of a JSON array fed in arbitrary chunks.

    Each element is returned as the exact octets the producer wrote. Only the array's
    structure is read here (strings, nesting); the elements are decoded by the caller.

    Args:
        max_event_bytes: Largest element accepted; a longer one raises, bounding the buffer.
    """

    def __init__(self, *, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_event_bytes = max_event_bytes
        self._buf = bytearray()
        self._pos = 0  # next octet of _buf to scan
        self._start = -1  # offset of the element being read, or -1 between elements
        self._depth = 0
        self._in_string = False
        self._state = "open"  # open -> value -> comma_or_close -> value ... -> closed

    @property
    def closed(self) -> bool:
        """Whether the closing ``]`` was read."""
        return self._state == "closed"

    def feed(self, data: bytes) -> list[bytes]:
        """Read ``data``; return the elements it completed, in order.

        Raises:
            MalformedEventArray: not an array of objects, data after ``]``, or an element
                over ``max_event_bytes``.
        """
        self._buf += data
        out: list[bytes] = []
        buf = self._buf
        while self._pos < len(buf):
            if self._start >= 0:
                end = self._scan_element()
                if end < 0:
                    break
                if end - self._start > self.max_event_bytes:
                    raise MalformedEventArray(f"an event exceeds {self.max_event_bytes} octets")
                out.append(bytes(buf[self._start : end]))
                self._start, self._state, self._pos = -1, "comma_or_close", end
                continue
            octet = buf[self._pos]
            self._pos += 1
            if octet in _WS:
                continue
            if self._state == "open" and octet == 0x5B:  # [
                self._state = "first"
            elif self._state in ("first", "value") and octet == 0x7B:  # {
                self._start, self._depth, self._pos = self._pos - 1, 0, self._pos - 1
            elif self._state in ("first", "comma_or_close") and octet == 0x5D:  # ]
                self._state = "closed"
            elif self._state == "comma_or_close" and octet == 0x2C:  # ,
                self._state = "value"
            else:
                raise MalformedEventArray(
                    f"unexpected {chr(octet)!r} in the event array ({self._state})"
                )
        if self._start >= 0 and len(buf) - self._start > self.max_event_bytes:
            raise MalformedEventArray(f"an event exceeds {self.max_event_bytes} octets")
        # Drop what was consumed so the buffer holds at most one partial element.
        keep = self._start if self._start >= 0 else self._pos
        del buf[:keep]
        self._pos -= keep
        if self._start >= 0:
            self._start = 0
        return out

    def _scan_element(self) -> int:
        """Advance through the current object; its end offset, or -1 if it is incomplete."""
        buf, pos = self._buf, self._pos
        while True:
            match = _SPECIAL.search(buf, pos)
            if match is None:
                self._pos = len(buf)
                return -1
            octet, pos = buf[match.start()], match.end()
            if self._in_string:
                if octet == 0x5C:  # backslash: skip the escaped octet
                    if pos >= len(buf):
                        self._pos = match.start()
                        return -1
                    pos += 1
                elif octet == 0x22:
                    self._in_string = False
                continue
            if octet == 0x22:
                self._in_string = True
            elif octet in (0x7B, 0x5B):
                self._depth += 1
            elif octet in (0x7D, 0x5D):
                self._depth -= 1
                if self._depth == 0:
                    self._pos = pos
                    return pos
            # a backslash outside a string is left for the JSON decoder to refuse
