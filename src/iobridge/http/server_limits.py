"""Connection-level limits for uvicorn: header size, slow clients, keep-alive.

``uvicorn_options(settings)`` is what ``iobridge serve`` hands to uvicorn. It selects h11
(httptools has no header size limit: a 32 MiB header was accepted) through
``LimitedH11Protocol``, which adds what uvicorn lacks:

* a header deadline: a connection must deliver a request's complete head within
  ``header_timeout`` seconds of opening (or of its previous response), else it is closed
  (slowloris); uvicorn's own keep-alive timer stops at the first byte;
* a body idle timeout: while a request body is being read, ``body_timeout`` seconds without
  data answer 408 and close;
* 431 ``HEADERS_TOO_LARGE`` (JSON envelope) when the head exceeds ``max_header_bytes``,
  where uvicorn answers a bare 400;
* at most ``keep_alive_max_requests`` requests per connection.

The header count, and the size of a head read in one piece, are checked by
:class:`~iobridge.http.guards.RequestGuard` (ASGI), so they hold under any server.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from iobridge.http.errors import error_response

if TYPE_CHECKING:
    from iobridge.config import Settings

__all__ = ["LimitedH11Protocol", "uvicorn_options"]

#: Seconds a refused connection stays half-open, dropping what the client still sends.
LINGER_SECONDS = 2.0


def _envelope(status: int, reason: bytes, code: str, message: str) -> list[h11.Event]:
    body = bytes(error_response(status, code, message).body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return [
        h11.Response(status_code=status, headers=headers, reason=reason),
        h11.Data(data=body),
        h11.EndOfMessage(),
    ]


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines and a per-connection request cap.

    The limits are class attributes: ``uvicorn_options`` makes a subclass per settings.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_requests: int = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._served = 0
        self._discarding = False

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
        super().data_received(data)
        self._track()

    def _track(self) -> None:
        """Keep the timer that matches where the request is: head, body, or handled."""
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state is h11.SEND_BODY:
            self._arm(self.body_timeout, self._body_too_slow)
        elif self.conn.their_state is not h11.IDLE:
            self._disarm()  # the head (and body) are in: the app has the request
        # IDLE: the head deadline keeps running, whatever arrives.

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
            for event in _envelope(
                408, b"Request Timeout", "REQUEST_TIMEOUT", "the request body stalled"
            ):
                self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        buffered, _ = self.conn.trailing_data
        if len(buffered) <= self.conn._max_incomplete_event_size:
            super().send_400_response(msg)
            return
        # h11 refused a head over max_header_bytes: say so, as 431.
        for event in _envelope(
            431, b"Request Header Fields Too Large", "HEADERS_TOO_LARGE",
            "the request headers are too large",
        ):
            self.transport.write(self.conn.send(event) or b"")
        self._linger_close()

    def _linger_close(self) -> None:
        """Half-close after an error answer and drop what the client still sends.

        Closing outright with the client's bytes unread makes the kernel send a reset, which
        can destroy the answer before the client reads it (nginx's "lingering close").
        """
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
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm(self.header_timeout, self._head_too_slow)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn keyword arguments that enforce ``settings``' connection limits."""
    protocol = type(
        "ConfiguredH11Protocol",
        (LimitedH11Protocol,),
        {
            "header_timeout": settings.header_timeout,
            "body_timeout": settings.body_timeout,
            "max_requests": settings.keep_alive_max_requests,
        },
    )
    return {
        "http": protocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "limit_concurrency": settings.max_connections,
    }
