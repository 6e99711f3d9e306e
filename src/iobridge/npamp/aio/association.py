"""asyncio shell: N-PAMP over TCP + TLS 1.3 (ALPN ``n-pamp/2``), frames back to back.

The shell only moves bytes between a TLS transport and :class:`~.connection.NpampConnection`,
arms timeouts and resolves waiters; every protocol decision lives in the sans-IO core. The
N-PAMP handshake runs inside TLS (digest §2.8): TLS gives transport confidentiality, N-PAMP
authenticates the identity keys with its own hybrid post-quantum handshake, so certificate
verification is the caller's choice (:mod:`.tls` builds the contexts and a dev certificate).

Theory of operation. Each connection is an :class:`asyncio.Protocol` (``_Shell``): the event
loop hands it the octets TLS decrypted, and it feeds them to the sans-IO core in the same
callback, with no reader task, stream buffer or wake-up per read. Until the handshake ends the
shell drives it there (writing each flight, re-arming the per-step timeout); then an
:class:`Association` takes the octets, queues the application frames and wakes whoever waits
in :meth:`Association.receive`. While the transport's write buffer is above its high-water
mark, the shell stops reading, as a reader that awaits ``drain()`` after writing the replies
(PONG, KEY_UPDATE_ACK, CLOSE_ACK) would.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import cast

from iobridge.npamp.aio.tls import ALPN
from iobridge.npamp.association.connection import AssociationConfig, NpampConnection
from iobridge.npamp.association.events import (
    ConnectionTerminated,
    Event,
    FrameReceived,
    HandshakeCompleted,
    KeyUpdated,
    PongReceived,
)
from iobridge.npamp.association.state import AssociationState
from iobridge.npamp.errors import HandshakeTimeout, InvalidState, NpampError, TransportError
from iobridge.npamp.handshake.machine import ClientHandshake, HandshakeConfig, ServerHandshake

__all__ = ["Association", "Handler", "NpampServer", "TransportConfig", "connect", "serve"]

Handler = Callable[["Association"], Awaitable[None]]
"""Per-association server callback."""

#: Seconds to wait for the transport to finish closing (TLS close_notify, TCP FIN).
_CLOSE_WAIT = 1.0
_HANDSHAKING = AssociationState.HANDSHAKING


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """What an endpoint needs besides the socket.

    Attributes:
        handshake: Identities, trust policy and offers for the N-PAMP handshake.
        association: Channels, frame cap and key-update interval.
        handshake_timeout: Seconds allowed for each handshake step (TLS, then every flight).
        close_timeout: Seconds to wait for CLOSE_ACK in :meth:`Association.aclose`.
    """

    handshake: HandshakeConfig
    association: AssociationConfig = field(default_factory=AssociationConfig)
    handshake_timeout: float = 10.0
    close_timeout: float = 5.0


class _Shell(asyncio.Protocol):
    """One TLS connection: drives the handshake from the loop's callbacks, then hands the
    octets to its :class:`Association`. Knows nothing of frames."""

    conn: NpampConnection

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.assoc: Association | None = None
        #: Whether the handshake phase is over (established or failed).
        self.settled = False
        self._timer: asyncio.TimerHandle | None = None
        #: When the current handshake step times out (loop time).
        self._deadline = 0.0
        self.paused = False  # the transport's write buffer is above its high-water mark
        self.reading_paused = False
        self.lost = False
        self.lost_error: BaseException | None = None
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._close_waiters: list[asyncio.Future[None]] = []

    # -- handshake phase: what a subclass does with the outcome --

    def _established(self, assoc: Association) -> None:
        raise NotImplementedError

    def _refused(self, error: BaseException) -> None:
        raise NotImplementedError

    def _settle(self, events: list[Event] | None, error: BaseException | None) -> None:
        """End the handshake phase once: an :class:`Association` over ``events``, or
        ``error``."""
        if self.settled:
            return
        self.settled = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if error is not None:
            self._refused(error)
            return
        assert events is not None
        self.assoc = Association(self, events)
        self._established(self.assoc)

    def _arm(self) -> None:
        """Give the next handshake step ``handshake_timeout`` from now: one timer per
        connection, moved on when it fires early rather than replaced at every flight."""
        self._deadline = self.loop.time() + self.config.handshake_timeout
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._timed_out)

    def _timed_out(self) -> None:
        if self.loop.time() < self._deadline:  # a later step re-armed it
            self._timer = self.loop.call_at(self._deadline, self._timed_out)
            return
        self._timer = None
        self._settle(None, HandshakeTimeout("peer did not answer the handshake in time"))

    # -- protocol callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """TLS is up: check ALPN, start the handshake (the client's CLIENT_HELLO)."""
        # A duplex transport (uvloop's is not an asyncio.Transport subclass, only alike).
        self.transport = cast(asyncio.Transport, transport)
        tls = self.transport.get_extra_info("ssl_object")
        if tls is None or tls.selected_alpn_protocol() != ALPN:
            self._settle(
                None, TransportError(f"ALPN {ALPN!r} was not negotiated; refusing the connection")
            )
            return
        try:
            self.conn.initiate()
        except NpampError as exc:
            self._settle(None, exc)
            return
        data = self.conn.data_to_send()
        if data:
            self.write(data)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Octets TLS decrypted: the association's once established, else the handshake's."""
        assoc = self.assoc
        if assoc is not None:
            assoc._receive(data)
            return
        if self.settled:
            return  # refused: the transport is closing
        conn = self.conn
        events = conn.receive_data(data)
        if conn.state is _HANDSHAKING:
            out = conn.data_to_send()
            if out:
                self.write(out)
            self._arm()
            return
        end = events[-1] if events else None
        if isinstance(end, ConnectionTerminated) and conn.handshake_result is None:
            error = end.error or TransportError("association ended during the handshake")
            self._settle(None, error)
            return
        # Frames (or a fault) that arrived with the last flight go to the association. The
        # client's CLIENT_AUTH stays queued: the association writes it with its first frames
        # when the caller sends at once (one TLS record and one send instead of two; the
        # server processes frames that follow CLIENT_AUTH in the same read), else on the next
        # loop turn.
        self._settle(events, None)

    def eof_received(self) -> None:
        """The peer closed its side (TLS closes the transport itself)."""
        if self.assoc is not None:
            self.assoc._lost(None)
        else:
            self._settle(None, TransportError("peer closed the stream during the handshake"))

    def connection_lost(self, exc: Exception | None) -> None:
        """The transport is closed: fail or end what waits on it, then let go of the
        association and the transport (they and the shell refer to each other: without this
        each association is garbage only the cyclic collector frees)."""
        self.lost, self.lost_error = True, exc
        if self.assoc is not None:
            self.assoc._lost(exc)
            self.assoc = None
        else:
            self._settle(
                None, exc or TransportError("peer closed the stream during the handshake")
            )
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(exc or ConnectionResetError("Connection lost"))
                waiter.exception()  # retrieved: the waiter may have been cancelled meanwhile
        self._drain_waiters.clear()
        for waiter in self._close_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._close_waiters.clear()
        self.transport = None

    def pause_writing(self) -> None:
        """Above the high-water mark: senders wait in :meth:`drain`."""
        self.paused = True

    def resume_writing(self) -> None:
        """Below the low-water mark again."""
        self.paused = False
        if self.reading_paused:
            self.reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- used by the association and the entry points --

    def replied(self) -> None:
        """Replies were just written: while the buffer is above its high-water mark, read no
        more until it drains (a reader that awaited ``drain()`` after its replies would not
        read either)."""
        if self.paused and not self.reading_paused and not self.is_closing():
            assert self.transport is not None
            self.reading_paused = True
            self.transport.pause_reading()

    async def drain(self) -> None:
        """Wait while the write buffer is full (``StreamWriter.drain``'s contract).

        Raises:
            OSError, ssl.SSLError: The connection was lost (with this error, or
                ``ConnectionResetError``).
        """
        if self.lost:
            raise self.lost_error or ConnectionResetError("Connection lost")
        if not self.paused:
            return
        waiter = self.loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def write(self, data: bytes) -> None:
        """Hand ``data`` to the transport at once: a reply deferred to the end of the loop turn
        would wait behind every other connection's callbacks of that turn (handshakes...),
        and the peer with it."""
        if self.transport is not None:
            self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        """Close the transport (it still sends what it buffered); nothing is awaited."""
        if self.transport is not None:
            self.transport.close()

    async def close_and_wait(self) -> None:
        """Close the transport and wait (bounded) until it is closed; errors are not raised."""
        self.close()
        if self.lost or self.transport is None:
            return
        waiter = self.loop.create_future()
        self._close_waiters.append(waiter)
        await _bounded(self.loop, waiter, _CLOSE_WAIT)


async def _bounded(
    loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], seconds: float
) -> None:
    """Await ``waiter`` at most ``seconds``; then it is resolved as if it were done. A timer
    rather than an ``asyncio.timeout`` scope (its object, handle and cancellation bookkeeping,
    for the two bounded waits of every close)."""
    timer = loop.call_later(seconds, _resolve, waiter)
    try:
        await waiter
    finally:
        timer.cancel()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _ClientShell(_Shell):
    """The client's connection: :func:`connect` awaits :attr:`outcome`."""

    def __init__(
        self,
        conn: NpampConnection,
        config: TransportConfig,
        outcome: asyncio.Future[Association],
    ) -> None:
        super().__init__(config)
        self.conn = conn
        #: What connect() awaits; let go of once settled (it would hold the association).
        self.outcome: asyncio.Future[Association] | None = outcome

    def _established(self, assoc: Association) -> None:
        outcome, self.outcome = self.outcome, None
        if outcome is not None and not outcome.done():
            outcome.set_result(assoc)

    def _refused(self, error: BaseException) -> None:
        outcome, self.outcome = self.outcome, None
        if outcome is not None and not outcome.done():
            outcome.set_exception(error)
            outcome.exception()  # retrieved: connect() may have been cancelled meanwhile


class _ServerShell(_Shell):
    """A server connection: the handler runs in a task of its own once established."""

    def __init__(self, server: NpampServer) -> None:
        super().__init__(server._config)
        self.server = server
        self.task: asyncio.Task[None] | None = None
        self._finished: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """TLS is up (a failed TLS handshake never gets here): a live connection from now."""
        self.server._live.add(self)
        config = self.config
        self.conn = NpampConnection(
            ServerHandshake(config.handshake), config=config.association
        )
        super().connection_made(transport)

    def _established(self, assoc: Association) -> None:
        self.task = task = self.loop.create_task(self._serve(assoc))
        task.add_done_callback(self._done)
        self.loop.call_soon(assoc._write_pending)  # after the handler's first step

    def _refused(self, error: BaseException) -> None:
        # A failed TLS/ALPN/N-PAMP handshake: close without calling the handler.
        self.close()
        self._done(None)

    async def _serve(self, assoc: Association) -> None:
        try:
            await self.server._handler(assoc)
        finally:
            await assoc.aclose()

    def _done(self, task: asyncio.Task[None] | None) -> None:
        self.server._live.discard(self)
        if self._finished is not None and not self._finished.done():
            self._finished.set_result(None)

    def finished(self) -> asyncio.Future[None]:
        """A future done once this connection is over (handler returned, or refused)."""
        if self._finished is None:
            self._finished = self.loop.create_future()
            if self not in self.server._live:
                self._finished.set_result(None)
        return self._finished

    def stop(self) -> None:
        """Cancel the handler, or abandon the handshake (``wait_closed`` ran out of time)."""
        if self.task is not None:
            self.task.cancel()
        else:
            self.close()
            self._settle(None, TransportError("server closed"))


class Association:
    """An established N-PAMP association over one TLS connection.

    Frames arrive from the connection's callbacks (no reader task); :meth:`receive` (or
    ``async for``) returns the application frames, in order, optionally filtered by channel.
    """

    def __init__(self, shell: _Shell, early: list[Event]) -> None:
        """Take over a connection whose handshake completed (use :func:`connect`/:func:`serve`)."""
        conn = shell.conn
        result = conn.handshake_result
        if result is None:
            raise InvalidState("an Association needs a completed handshake")
        self._shell, self._conn, self._config = shell, conn, shell.config
        self._frames: deque[FrameReceived] = deque()
        #: Futures of the tasks waiting in receive()/receive_all(), woken together.
        self._readers: list[asyncio.Future[None]] = []
        self._waiters: dict[tuple[type, int], asyncio.Future[None]] = {}
        self._ended: list[asyncio.Future[None]] = []
        #: Where frames go as they are read instead of the queue (:meth:`deliver_to`).
        self._on_frames: Callable[[list[FrameReceived]], None] | None = None
        self._on_end: Callable[[BaseException], None] | None = None
        #: Set once the association ended; ``error`` is ``None`` after a graceful close.
        self.terminated: ConnectionTerminated | None = None
        #: The completed handshake (profile, AEAD suite, peer identity key).
        self.handshake: HandshakeCompleted = result
        self._dispatch(early)
        if self.terminated is not None:  # what is queued (an ERROR...) goes out, then close
            self._write_pending()
            shell.close()
        # Otherwise what is queued (the client's CLIENT_AUTH) goes out with the first frames
        # its user sends, or on the loop turn after it got the association (the entry points
        # schedule that).

    @property
    def peer_identity(self) -> bytes:
        """Raw identity public key the peer authenticated with."""
        return self.handshake.peer_identity

    async def send(
        self, channel: int, frame_type: int, payload: bytes, *, urgent: bool = False
    ) -> None:
        """Seal and write one frame (waits for the transport buffer to drain).

        Raises:
            NpampError: The association has ended (its error, or ``TransportError``).
        """
        self._check_alive()
        self._conn.send_frame(channel, frame_type, payload, urgent=urgent)
        await self._flush()

    async def send_many(self, channel: int, frames: Iterable[tuple[int, bytes]]) -> None:
        """Seal several frames and write them at once (one write per batch, not per frame).

        Raises:
            NpampError: The association has ended (its error, or ``TransportError``).
        """
        self._check_alive()
        self._conn.send_frames(channel, list(frames))
        await self._flush()

    def _check_alive(self) -> None:
        if self.terminated is not None:
            raise self.terminated.error or TransportError("association closed")

    async def _next_batch(self) -> None:
        """Wait until frames arrive or the association ends."""
        waiter = self._shell.loop.create_future()
        self._readers.append(waiter)
        try:
            await waiter
        except BaseException:  # cancelled: stop waking it
            with contextlib.suppress(ValueError):
                self._readers.remove(waiter)
            raise

    async def receive(self, channel: int | None = None) -> FrameReceived:
        """Next application frame (on ``channel``, if given).

        Raises:
            NpampError: The association ended first (``TransportError`` after a clean close).
        """
        while True:
            for i, frame in enumerate(self._frames):
                if channel is None or frame.channel == channel:
                    del self._frames[i]
                    return frame
            self._check_alive()
            await self._next_batch()

    async def receive_all(self) -> list[FrameReceived]:
        """Every application frame queued so far (at least one; waits for it), in order.

        One await per batch of frames read together, not one per frame: the consumer's
        per-event path.

        Raises:
            NpampError: The association ended first (``TransportError`` after a clean close).
        """
        while not self._frames:
            self._check_alive()
            await self._next_batch()
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def deliver_to(
        self,
        on_frames: Callable[[list[FrameReceived]], None] | None,
        on_end: Callable[[BaseException], None] | None,
    ) -> None:
        """Hand each batch of application frames to ``on_frames`` as it is read (in order,
        from the event loop's callback) instead of queueing it for :meth:`receive`, and call
        ``on_end(error)`` once when the association ends (at once if it has): for a consumer
        that processes frames without awaiting, with no task of its own. Frames already
        queued are handed over first; ``deliver_to(None, None)`` queues them again. The
        callbacks run inside the connection's callback: they must not raise (the event loop
        would report it and close the connection)."""
        self._on_frames, self._on_end = on_frames, on_end
        self._deliver()
        if on_end is not None and self.terminated is not None:
            self._on_end = None
            on_end(self.terminated.error or TransportError("association closed"))

    def _deliver(self) -> None:
        if self._on_frames is not None and self._frames:
            batch = list(self._frames)
            self._frames.clear()
            self._on_frames(batch)

    def __aiter__(self) -> AsyncIterator[FrameReceived]:
        """Iterate over application frames until the association ends."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[FrameReceived]:
        while True:
            try:
                yield await self.receive()
            except NpampError:
                return

    async def key_update(self, channel: int = 0x000D) -> None:
        """Rotate our sending keys on ``channel`` and wait for the peer's KEY_UPDATE_ACK.

        Raises:
            TimeoutError: No ACK within ``close_timeout``.
        """
        self._check_alive()
        waiter = self._waiter(KeyUpdated, channel)
        self._conn.key_update(channel)
        await self._flush()
        async with asyncio.timeout(self._config.close_timeout):
            await waiter

    async def ping(self, channel: int = 0x0000) -> float:
        """Send PING on ``channel``, wait for the PONG; return the round trip in seconds.

        Raises:
            TimeoutError: No PONG within ``close_timeout``.
        """
        self._check_alive()
        loop = self._shell.loop
        waiter, start = self._waiter(PongReceived, channel), loop.time()
        self._conn.ping(channel)
        await self._flush()
        async with asyncio.timeout(self._config.close_timeout):
            await waiter
        return loop.time() - start

    def _waiter(self, kind: type, channel: int) -> asyncio.Future[None]:
        return self._waiters.setdefault((kind, channel), self._shell.loop.create_future())

    async def aclose(self) -> None:
        """Close gracefully: CLOSE, wait (bounded) for CLOSE_ACK, then close the socket."""
        if self.terminated is None and self._conn.state is AssociationState.OPEN:
            self._conn.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self._flush()
            if self.terminated is None:
                loop = self._shell.loop
                waiter = loop.create_future()
                self._ended.append(waiter)
                await _bounded(loop, waiter, self._config.close_timeout)
        # Nothing more is read: what the peer does while the socket closes (its EOF...) no
        # longer decides how the association ended.
        self._shell.assoc = None
        await self._shell.close_and_wait()
        self._end(ConnectionTerminated(error=TransportError("association closed locally")))

    async def _flush(self) -> None:
        shell = self._shell
        if self._write_pending() and (shell.paused or shell.lost):
            await shell.drain()

    def _write_pending(self) -> bool:
        """Hand what the connection queued to the transport (buffered; never blocks).

        Returns:
            Whether anything was written.
        """
        data = self._conn.data_to_send()
        if data and not self._shell.is_closing():
            self._shell.write(data)
            return True
        return False

    def _receive(self, data: bytes) -> None:
        """Octets from the connection: events, replies written at once, then dispatch."""
        if self.terminated is not None:
            return  # ended: the transport is closing, nothing more is read
        try:
            events = self._conn.receive_data(data)
        except NpampError as exc:  # pragma: no cover - the association already failed
            self._end(ConnectionTerminated(error=exc))
        else:
            if self._write_pending():  # replies (PONG, ACKs, ERROR) even when ending
                self._shell.replied()
            self._dispatch(events)
        if self.terminated is not None:
            # Close without waiting: whoever closes the association waits for the transport.
            self._shell.close()

    def _lost(self, exc: BaseException | None) -> None:
        """The peer closed the stream, or the connection broke."""
        if self.terminated is None:
            error = TransportError(str(exc)) if exc is not None else None
            self._end(
                ConnectionTerminated(error=error or TransportError("peer closed the stream"))
            )
            self._shell.close()

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if type(event) is FrameReceived:
                self._frames.append(event)
            elif isinstance(event, PongReceived) or (isinstance(event, KeyUpdated) and event.local):
                waiter = self._waiters.pop((type(event), event.channel), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            elif isinstance(event, ConnectionTerminated):
                self._deliver()  # what came before the end first
                self._end(event)
        self._deliver()
        self._wake()

    def _wake(self) -> None:
        readers = self._readers
        if readers:
            for waiter in readers:
                if not waiter.done():
                    waiter.set_result(None)
            readers.clear()

    def _end(self, event: ConnectionTerminated) -> None:
        if self.terminated is None:
            self.terminated = event
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                on_end(event.error or TransportError("association closed"))
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(event.error or TransportError("association closed"))
                waiter.exception()  # mark retrieved: nobody may be waiting any more
        self._waiters.clear()
        for ended in self._ended:
            if not ended.done():
                ended.set_result(None)
        self._ended.clear()
        self._wake()


def connect(
    host: str, port: int, ssl_ctx: ssl.SSLContext, config: TransportConfig
) -> contextlib.AbstractAsyncContextManager[Association]:
    """``async with``: open TLS to ``host:port``, run the client handshake, yield the
    association; it is closed gracefully on exit.

    Raises:
        TransportError: TCP/TLS failure or ALPN not negotiated.
        HandshakeTimeout: A step took longer than ``config.handshake_timeout``.
        HandshakeFailure: The N-PAMP handshake failed (subclass says why).
    """
    return _Connect(host, port, ssl_ctx, config)


class _Connect(contextlib.AbstractAsyncContextManager[Association]):
    """What :func:`connect` returns (a class: no generator and its frame per association)."""

    def __init__(
        self, host: str, port: int, ssl_ctx: ssl.SSLContext, config: TransportConfig
    ) -> None:
        self._host, self._port, self._ssl_ctx, self._config = host, port, ssl_ctx, config
        self._assoc: Association | None = None

    async def __aenter__(self) -> Association:
        host, port, config = self._host, self._port, self._config
        conn = NpampConnection(ClientHandshake(config.handshake), config=config.association)
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Association] = loop.create_future()
        try:
            # A timeout scope, not wait_for: that would run the connect in a task of its own.
            async with asyncio.timeout(config.handshake_timeout):
                _, shell = await loop.create_connection(
                    lambda: _ClientShell(conn, config, outcome),
                    host,
                    port,
                    ssl=self._ssl_ctx,
                    ssl_handshake_timeout=config.handshake_timeout,
                )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            raise TransportError(f"TLS connection to {host}:{port} failed: {exc!r}") from exc
        try:
            assoc = await outcome
        except BaseException:
            await shell.close_and_wait()
            raise
        # CLIENT_AUTH leaves with the caller's first frames when it sends at once (one TLS
        # record instead of two), else on the next loop turn.
        loop.call_soon(assoc._write_pending)
        self._assoc = assoc
        return assoc

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._assoc is not None:
            await self._assoc.aclose()


class NpampServer:
    """A listening N-PAMP endpoint; closing it also winds down the live associations."""

    def __init__(self, config: TransportConfig, handler: Handler) -> None:
        """Prepare the per-connection callback (use :func:`serve`)."""
        self._config, self._handler = config, handler
        #: Connections in their handshake or handler.
        self._live: set[_ServerShell] = set()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound TCP port (first socket)."""
        if self.server is None:
            raise InvalidState("server is not listening")
        return int(self.server.sockets[0].getsockname()[1])

    def _connection(self) -> _ServerShell:
        return _ServerShell(self)

    def close(self) -> None:
        """Stop accepting connections."""
        if self.server is not None:
            self.server.close()

    async def wait_closed(self) -> None:
        """Stop listening; give live associations ``close_timeout`` to end, then cancel them."""
        self.close()
        if self._live:
            shells = {shell.finished(): shell for shell in self._live}
            _, pending = await asyncio.wait(shells, timeout=self._config.close_timeout)
            for waiter in pending:
                shells[waiter].stop()
            if pending:
                await asyncio.wait(pending)
        if self.server is not None:
            await self.server.wait_closed()


async def serve(
    host: str,
    port: int,
    ssl_ctx: ssl.SSLContext,
    config: TransportConfig,
    handler: Handler,
    *,
    backlog: int = 2048,
) -> NpampServer:
    """Listen for N-PAMP associations; run ``handler`` for each established one.

    A connection whose TLS, ALPN or N-PAMP handshake fails is closed without calling the
    handler. The association is closed gracefully when the handler returns. ``backlog`` is
    the TCP accept queue (asyncio's default of 100 drops part of a burst of connections).
    """
    npamp_server = NpampServer(config, handler)
    npamp_server.server = await asyncio.get_running_loop().create_server(
        npamp_server._connection,
        host,
        port,
        ssl=ssl_ctx,
        ssl_handshake_timeout=config.handshake_timeout,
        backlog=backlog,
    )
    return npamp_server
