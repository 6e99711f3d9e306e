"""asyncio shell: N-PAMP over TCP + TLS 1.3 (ALPN ``n-pamp/2``), frames back to back.

The shell only moves bytes between a TLS stream and :class:`~.connection.NpampConnection`,
arms timeouts and resolves waiters; every protocol decision lives in the sans-IO core. The
N-PAMP handshake runs inside TLS (digest §2.8): TLS gives transport confidentiality, N-PAMP
authenticates the identity keys with its own hybrid post-quantum handshake, so certificate
verification is the caller's choice (:mod:`.tls` builds the contexts and a dev certificate).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

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

_READ_SIZE = 1 << 16

Handler = Callable[["Association"], Awaitable[None]]
"""Per-association server callback."""


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


class Association:
    """An established N-PAMP association over one TLS stream.

    Frames are read by a background task; :meth:`receive` (or ``async for``) returns the
    application frames, in order, optionally filtered by channel.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: NpampConnection,
        config: TransportConfig,
        early: list[Event],
    ) -> None:
        """Take over a stream whose handshake completed (use :func:`connect`/:func:`serve`)."""
        self._reader, self._writer, self._conn, self._config = reader, writer, conn, config
        self._frames: deque[FrameReceived] = deque()
        self._changed = asyncio.Event()
        self._waiters: dict[tuple[type, int], asyncio.Future[None]] = {}
        #: Set once the association ended; ``error`` is ``None`` after a graceful close.
        self.terminated: ConnectionTerminated | None = None
        result = conn.handshake_result
        if result is None:
            raise InvalidState("an Association needs a completed handshake")
        #: The completed handshake (profile, AEAD suite, peer identity key).
        self.handshake: HandshakeCompleted = result
        self._dispatch(early)
        loop = asyncio.get_running_loop()
        loop.call_soon(self._write_pending)
        self._task = loop.create_task(self._read_loop())

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
            self._changed.clear()
            await self._changed.wait()

    async def receive_all(self) -> list[FrameReceived]:
        """Every application frame queued so far (at least one; waits for it), in order.

        One await per batch of frames read together, not one per frame: the consumer's
        per-event path.

        Raises:
            NpampError: The association ended first (``TransportError`` after a clean close).
        """
        while not self._frames:
            self._check_alive()
            self._changed.clear()
            await self._changed.wait()
        frames = list(self._frames)
        self._frames.clear()
        return frames

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
        loop = asyncio.get_running_loop()
        waiter, start = self._waiter(PongReceived, channel), loop.time()
        self._conn.ping(channel)
        await self._flush()
        async with asyncio.timeout(self._config.close_timeout):
            await waiter
        return loop.time() - start

    def _waiter(self, kind: type, channel: int) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        return self._waiters.setdefault((kind, channel), loop.create_future())

    async def aclose(self) -> None:
        """Close gracefully: CLOSE, wait (bounded) for CLOSE_ACK, then close the socket."""
        if self.terminated is None and self._conn.state is AssociationState.OPEN:
            self._conn.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self._flush()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.close_timeout):
                    await asyncio.shield(self._task)
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError, ssl.SSLError):
            await self._task
        await _close_writer(self._writer)
        self._end(ConnectionTerminated(error=TransportError("association closed locally")))

    async def _flush(self) -> None:
        if self._write_pending():
            await self._writer.drain()

    def _write_pending(self) -> bool:
        """Hand what the connection queued to the transport (buffered; never blocks).

        Returns:
            Whether anything was written.
        """
        data = self._conn.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)
            return True
        return False

    async def _read_loop(self) -> None:
        try:
            while self.terminated is None:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    self._end(ConnectionTerminated(error=TransportError("peer closed the stream")))
                    break
                events = self._conn.receive_data(data)
                await self._flush()  # replies (PONG, ACKs, ERROR) even when ending
                self._dispatch(events)
        except (OSError, ssl.SSLError, NpampError) as exc:
            error = exc if isinstance(exc, NpampError) else TransportError(str(exc))
            self._end(ConnectionTerminated(error=error))
        finally:
            # Close without awaiting: cancelling a task that awaits wait_closed() would cancel
            # the stream's shared close future for every other waiter.
            self._writer.close()

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if type(event) is FrameReceived:
                self._frames.append(event)
            elif isinstance(event, PongReceived) or (isinstance(event, KeyUpdated) and event.local):
                waiter = self._waiters.pop((type(event), event.channel), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            elif isinstance(event, ConnectionTerminated):
                self._end(event)
        self._changed.set()

    def _end(self, event: ConnectionTerminated) -> None:
        if self.terminated is None:
            self.terminated = event
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(event.error or TransportError("association closed"))
                waiter.exception()  # mark retrieved: nobody may be waiting any more
        self._waiters.clear()
        self._changed.set()


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        await asyncio.wait_for(asyncio.shield(writer.wait_closed()), 1.0)


async def _establish(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    conn: NpampConnection,
    config: TransportConfig,
) -> Association:
    """Check ALPN, run the N-PAMP handshake (each step bounded), build the Association."""
    tls = writer.get_extra_info("ssl_object")
    if tls is None or tls.selected_alpn_protocol() != ALPN:
        raise TransportError(f"ALPN {ALPN!r} was not negotiated; refusing the connection")
    conn.initiate()
    events: list[Event] = []
    while conn.state is AssociationState.HANDSHAKING:
        data = conn.data_to_send()
        if data:
            writer.write(data)
            await writer.drain()
        try:
            async with asyncio.timeout(config.handshake_timeout):
                chunk = await reader.read(_READ_SIZE)
        except TimeoutError:
            raise HandshakeTimeout("peer did not answer the handshake in time") from None
        if not chunk:
            raise TransportError("peer closed the stream during the handshake")
        events = conn.receive_data(chunk)
        end = events[-1] if events else None
        if isinstance(end, ConnectionTerminated) and conn.handshake_result is None:
            raise end.error or TransportError("association ended during the handshake")
    # Frames (or a fault) that arrived with the last flight go to the association. The
    # client's CLIENT_AUTH stays queued: the association writes it with its first frames when
    # the caller sends at once (one TLS record and one send instead of two; the server
    # processes frames that follow CLIENT_AUTH in the same read), else on the next loop turn.
    return Association(reader, writer, conn, config, events)


@contextlib.asynccontextmanager
async def connect(
    host: str, port: int, ssl_ctx: ssl.SSLContext, config: TransportConfig
) -> AsyncIterator[Association]:
    """Open TLS to ``host:port``, run the client handshake, yield the association.

    Raises:
        TransportError: TCP/TLS failure or ALPN not negotiated.
        HandshakeTimeout: A step took longer than ``config.handshake_timeout``.
        HandshakeFailure: The N-PAMP handshake failed (subclass says why).
    """
    try:
        # A timeout scope, not wait_for: that would run the connect in a task of its own.
        async with asyncio.timeout(config.handshake_timeout):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ssl_ctx, ssl_handshake_timeout=config.handshake_timeout
            )
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        raise TransportError(f"TLS connection to {host}:{port} failed: {exc!r}") from exc
    conn = NpampConnection(ClientHandshake(config.handshake), config=config.association)
    try:
        assoc = await _establish(reader, writer, conn, config)
    except BaseException:
        await _close_writer(writer)
        raise
    try:
        yield assoc
    finally:
        await assoc.aclose()


class NpampServer:
    """A listening N-PAMP endpoint; closing it also winds down the live associations."""

    def __init__(self, config: TransportConfig, handler: Handler) -> None:
        """Prepare the per-connection callback (use :func:`serve`)."""
        self._config, self._handler = config, handler
        self._tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound TCP port (first socket)."""
        if self.server is None:
            raise InvalidState("server is not listening")
        return int(self.server.sockets[0].getsockname()[1])

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        conn = NpampConnection(
            ServerHandshake(self._config.handshake), config=self._config.association
        )
        try:
            assoc = await _establish(reader, writer, conn, self._config)
        except (NpampError, OSError, ssl.SSLError):
            await _close_writer(writer)
            return
        try:
            await self._handler(assoc)
        finally:
            await assoc.aclose()

    def close(self) -> None:
        """Stop accepting connections."""
        if self.server is not None:
            self.server.close()

    async def wait_closed(self) -> None:
        """Stop listening; give live associations ``close_timeout`` to end, then cancel them."""
        self.close()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self._config.close_timeout)
            for task in pending:
                task.cancel()
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
    npamp_server.server = await asyncio.start_server(
        npamp_server._on_connect,
        host,
        port,
        ssl=ssl_ctx,
        ssl_handshake_timeout=config.handshake_timeout,
        backlog=backlog,
    )
    return npamp_server
