"""Connection-level limits for uvicorn: header size, slow clients, keep-alive.

``uvicorn_options(settings)`` is what ``iobridge serve`` hands to uvicorn. It selects
uvicorn's httptools protocol (the C parser: a run's request and its stream cost a third less
CPU than under h11) through ``LimitedHttpProtocol``, which adds what uvicorn lacks:

* a head size limit: httptools buffers a header line however long it grows (a 32 MiB header
  was accepted), so the bytes of a request's head are counted as they arrive, and a head not
  complete within ``max_header_bytes`` is answered 431 ``HEADERS_TOO_LARGE`` (JSON envelope);
* a header deadline: a connection must deliver a request's complete head within
  ``header_timeout`` seconds of opening (or of its previous response), else it is closed
  (slowloris); uvicorn's own keep-alive timer stops at the first byte;
* a body idle timeout: while a request body is being read, ``body_timeout`` seconds without
  data answer 408 and close;
* at most ``keep_alive_max_requests`` requests per connection; the response to the last one
  says ``Connection: close``, so a client does not send another request down a connection
  that is about to close.

The header count, and the size of the parsed headers, are checked by
:class:`~iobridge.http.guards.RequestGuard` (ASGI), so they hold under any server.
"""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from iobridge.http.errors import error_response

if TYPE_CHECKING:
    from iobridge.config import Settings

__all__ = ["LimitedHttpProtocol", "uvicorn_options"]

#: Seconds a refused connection stays half-open, dropping what the client still sends.
LINGER_SECONDS = 2.0


def _envelope(status: int, reason: bytes, code: str, message: str) -> bytes:
    """A complete ``Connection: close`` response carrying the error envelope."""
    body = bytes(error_response(status, code, message).body)
    return b"".join([
        b"HTTP/1.1 %d %b\r\n" % (status, reason),
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n",
        body,
    ])


class _Phase(enum.Enum):
    HEAD = "head"  # waiting for, or reading, a request's head
    BODY = "body"  # the head is in, the body is arriving
    APP = "app"  # the whole request is in: the application has it


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a head size limit, deadlines and a per-connection
    request cap.

    The limits are class attributes: ``uvicorn_options`` makes a subclass per settings.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_requests: int = 1000
    max_head_bytes: int = 16384
    #: Slots, so the limits' state does not grow the instance dict of every connection.
    __slots__ = ("_deadline", "_discarding", "_head_bytes", "_phase", "_requests", "_served")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._served = 0
        self._requests = 0
        self._discarding = False
        self._phase = _Phase.HEAD
        self._head_bytes = 0

    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._phase is _Phase.HEAD:
            room = self.max_head_bytes - self._head_bytes
            if len(data) > room:
                # Parse no more than the limit allows; the head must end within it.
                super().data_received(data[:room])
                if self._phase is _Phase.HEAD:
                    if not self.transport.is_closing():
                        self._refuse(431, b"Request Header Fields Too Large",
                                     "HEADERS_TOO_LARGE", "the request headers are too large")
                    return
                data = data[room:]  # the rest is the body (or the next request)
            else:
                self._head_bytes += len(data)
        super().data_received(data)
        self._track()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase is not _Phase.HEAD:  # a pipelined request behind the previous one
            self._phase = _Phase.HEAD
            self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._phase = _Phase.BODY
        super().on_headers_complete()
        self._requests += 1
        if self._requests >= self.max_requests and self.cycle is not None:
            # The last request this connection takes: its response says Connection: close
            # (uvicorn then closes after it). Closing after a keep-alive response instead left
            # a client free to reuse the connection, and to lose its next request to the close.
            self.cycle.keep_alive = False

    def on_message_complete(self) -> None:
        self._phase = _Phase.APP
        super().on_message_complete()

    def _track(self) -> None:
        """Keep the timer that matches where the request is: head, body, or handled."""
        if self.transport.is_closing():
            self._disarm()
        elif self._phase is _Phase.BODY:
            self._arm(self.body_timeout, self._body_too_slow)
        elif self._phase is _Phase.APP:
            self._disarm()  # the head (and body) are in: the app has the request
        # HEAD: the head deadline keeps running, whatever arrives.

    def _head_too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _body_too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_started:
            # The app waits for the body; the close below wakes it with a disconnect.
            self.transport.write(_envelope(
                408, b"Request Timeout", "REQUEST_TIMEOUT", "the request body stalled"
            ))
        self.transport.close()

    def _refuse(self, status: int, reason: bytes, code: str, message: str) -> None:
        """Answer with the envelope, then half-close and drop what the client still sends.

        Closing outright with the client's bytes unread makes the kernel send a reset, which
        can destroy the answer before the client reads it (nginx's "lingering close").
        """
        self.transport.write(_envelope(status, reason, code, message))
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._arm(LINGER_SECONDS, self.transport.close)

    def on_response_complete(self) -> None:
        self._served += 1
        if self._served >= self.max_requests:
            self.transport.close()
            return
        super().on_response_complete()
        if self.transport.is_closing() or self._phase is _Phase.BODY:
            return
        if self.cycle is None or self.cycle.response_complete:
            # Every request received is answered: the next head is due within header_timeout.
            if self._phase is _Phase.APP:
                self._phase = _Phase.HEAD
                self._head_bytes = 0
            self._arm(self.header_timeout, self._head_too_slow)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn keyword arguments that enforce ``settings``' connection limits."""
    protocol = type(
        "ConfiguredHttpProtocol",
        (LimitedHttpProtocol,),
        {
            "header_timeout": settings.header_timeout,
            "body_timeout": settings.body_timeout,
            "max_requests": settings.keep_alive_max_requests,
            "max_head_bytes": settings.max_header_bytes,
        },
    )
    return {
        "http": protocol,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "limit_concurrency": settings.max_connections,
    }
