"""AG-UI client over N-PAMP: start, follow, cancel and resume runs.

::

    async with connect("127.0.0.1", 7443, identity=key, pinned=["sha256:..."]) as client:
        stream = client.run({"threadId": "t1", "runId": "r1", "messages": [...]})
        async for event in stream:
            print(event.event_id, event.type)

Every run and resume carries a SafetyLabel (MAP-AGUI §6): ``non_idempotent_write`` unless the
client is built with ``safety=Effect.DESTRUCTIVE`` (or a run overrides it). If the association
drops mid-run, open a new one and ``client.resume(stream.correlation_id, stream.last_event_id)``:
the server replays what came after the cursor and continues live, and the session discards any
event at or below the cursor, so each event is seen once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import ssl
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import orjson

from iobridge.npamp._makers import positional_maker
from iobridge.npamp.aio import Association, TransportConfig, client_ssl_context
from iobridge.npamp.aio import connect as npamp_connect
from iobridge.npamp.association import FrameReceived
from iobridge.npamp.bridge import (
    AGUI_PROTOCOL_ID,
    DISCOVERY_CHANNEL,
    BridgeSession,
    Effect,
    Role,
    SafetyLabel,
    StreamState,
    TransportErrorCode,
)
from iobridge.npamp.bridge.agui_opaque import (
    RUN_ROUTE,
    EventArrayReader,
    MalformedEventArray,
    cancel_route,
    tool_result_route,
)
from iobridge.npamp.bridge.events import (
    BridgeErrorReceived,
    BridgeFrameRejected,
    CancelAcked,
    Event,
    StreamDataReceived,
    StreamEnded,
)
from iobridge.npamp.bridge.opaque import (
    OpaqueErrorReceived,
    OpaqueEvent,
    OpaqueResponse,
    OpaqueSession,
    OpaqueStreamData,
    OpaqueStreamEnded,
)
from iobridge.npamp.errors import ErrorCode, NpampError, TransportError
from iobridge.npamp.handshake import HandshakeConfig, IdentityKey, PeerVerifier, PinnedPeers
from iobridge.npamp.handshake.identity import FINGERPRINT_PREFIX

__all__ = [
    "AgUiClient",
    "AgUiEvent",
    "OpaqueAgUiClient",
    "OpaqueRunStream",
    "RunRefused",
    "RunStream",
    "connect",
    "connect_opaque",
]

BRIDGE_CHANNEL = 0x000D
_LIVE = frozenset({StreamState.CONSUMING, StreamState.RESUMING})


class RunRefused(NpampError):
    """The server answered a run or resume with BRIDGE_ERROR instead of a stream.

    Attributes:
        transport_code: The N-PAMP transport error (NotDelivered, SafetyPolicy, NotResumable,
            ProtocolUnsupported...), or ``None`` for a foreign error object.
        reason: The server's short reason.
        body: The BRIDGE_ERROR body, octet for octet.
    """

    code: ClassVar[ErrorCode] = ErrorCode.PROTOCOL_ERROR

    def __init__(self, transport_code: TransportErrorCode | None, reason: str, body: bytes) -> None:
        name = transport_code.name if transport_code is not None else "foreign error"
        super().__init__(f"{name}: {reason}" if reason else name)
        self.transport_code, self.reason, self.body = transport_code, reason, body


@dataclass(frozen=True, slots=True, kw_only=True)
class AgUiEvent:
    """One AG-UI event as carried: its event_id, its octets and their JSON decoding."""

    #: CC-STREAM event_id (the server's run-log sequence number); the resume cursor.
    event_id: int
    #: The event JSON exactly as the server carried it.
    raw: bytes
    #: ``json.loads(raw)``; any event type is accepted (the carriage is transparent).
    data: dict[str, Any]

    @property
    def type(self) -> str:
        """The AG-UI event type (``RUN_STARTED``, ``TEXT_MESSAGE_CONTENT``, ...)."""
        return str(self.data.get("type", ""))


_End = StreamEnded | CancelAcked
#: The compiled Maker where built (iobridge/npamp/_makers.py says what it buys).
_make_event = positional_maker(AgUiEvent)


class RunStream:
    """The events of one run; iterate with ``async for``. Started on first iteration.

    Attributes:
        correlation_id: The stream's id; give it to :meth:`AgUiClient.resume`.
        last_event_id: The event_id of the last event yielded (the resume cursor).
        resumable: Whether the server advertised the stream resumable.
        cancelled: True once the server acknowledged our cancel.
        ended: True once the stream terminated (END or cancel_ack).
    """

    def __init__(self, client: AgUiClient, correlation_id: bytes, request: Any) -> None:
        self._client: AgUiClient | None = client
        self._request = request
        # A deque and one wake-up per batch, not an asyncio.Queue: events of one read are
        # yielded without an await each (the per-event path).
        self._items: deque[AgUiEvent | _End | BaseException] = deque()
        self._ready = asyncio.Event()
        self.correlation_id = correlation_id
        self.last_event_id = 0
        self.resumable = False
        self.cancelled = False
        self.ended = False

    def __aiter__(self) -> AsyncIterator[AgUiEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AgUiEvent]:
        if self._request is not None and self._client is not None:
            request, self._request = self._request, None
            # Let go of the client once the request is out: the client holds its streams, so
            # the other way round too would be a cycle only the collector frees.
            client, self._client = self._client, None
            await client._send(request)
        items = self._items
        while not self.ended:
            if not items:
                self._ready.clear()
                await self._ready.wait()
                continue
            item = items.popleft()
            if type(item) is AgUiEvent:
                self.last_event_id = item.event_id
                yield item
                continue
            self.ended = True
            if isinstance(item, BaseException):
                raise item
            self.cancelled = isinstance(item, CancelAcked)

    def _put(self, item: AgUiEvent | _End | BaseException) -> None:
        self._items.append(item)
        self._ready.set()

    def _wake(self) -> None:
        if self._items:
            self._ready.set()

    def _deliver(self, event: Event) -> None:
        """Queue what one session event means for this stream; the reader wakes the
        consumer once per batch (:meth:`_wake`), not once per event."""
        if type(event) is StreamDataReceived:
            self.resumable = event.resumable
            raw = event.data
            self._items.append(_make_event(event.event_id, raw, _loads(raw)))
        elif isinstance(event, StreamEnded | CancelAcked):
            if isinstance(event, StreamEnded):
                self.resumable = event.resumable
            self._put(event)
        elif isinstance(event, BridgeErrorReceived):
            self._put(RunRefused(event.code, event.message, event.body))
        elif isinstance(event, BridgeFrameRejected):
            self._put(event.error)


class AgUiClient:
    """AG-UI runs over one established association (use :func:`connect`).

    Args:
        association: The N-PAMP association.
        channel: Bridge ``0x000D`` (default) or Interaction ``0x000F``, as the server agreed.
        protocol_id: The AG-UI protocol_id agreed with the server.
        safety: Effect declared on every run and resume unless overridden.
    """

    def __init__(
        self,
        association: Association,
        *,
        channel: int = BRIDGE_CHANNEL,
        protocol_id: int = AGUI_PROTOCOL_ID,
        safety: Effect = Effect.NON_IDEMPOTENT_WRITE,
    ) -> None:
        self.association, self.channel, self.safety = association, channel, safety
        self.session = BridgeSession(protocol_id=protocol_id)
        #: Raw DISCO_ANNOUNCE payloads the server sent on the Discovery channel.
        self.announcements: list[bytes] = []
        self._streams: dict[bytes, RunStream] = {}
        self._lock = asyncio.Lock()
        #: Sends the session's replies to what it received (a task only when there are some).
        self._replying: asyncio.Task[None] | None = None
        self._failure: Exception | None = None
        self._reading = True
        # Frames are handled as they are read, in the association's callback: no reader task.
        association.deliver_to(self._received, self._stop)

    def run(
        self,
        run_input: Mapping[str, Any] | bytes,
        *,
        safety: Effect | None = None,
        correlation_id: bytes | None = None,
    ) -> RunStream:
        """Start a run (on first iteration of the returned stream).

        Args:
            run_input: A RunAgentInput, as a mapping (sent as compact JSON) or exact bytes.
            safety: The run's declared effect (default: the client's).
            correlation_id: The stream id (default: random).
        """
        body = run_input if isinstance(run_input, bytes) else _json(run_input)
        corr = correlation_id or os.urandom(8).hex().encode()
        label = SafetyLabel(effect=self.safety if safety is None else safety)
        return self._open(corr, ("run", corr, body, label))

    def resume(
        self,
        correlation_id: bytes,
        cursor: int,
        *,
        body: bytes = b"",
        safety: Effect | None = None,
    ) -> RunStream:
        """Continue a run after ``cursor`` (the last event durably consumed), e.g. on a new
        association after the old one dropped. The label should match the original run's.
        """
        label = SafetyLabel(effect=self.safety if safety is None else safety)
        stream = self._open(correlation_id, ("resume", correlation_id, body, label, cursor))
        stream.last_event_id = cursor
        return stream

    async def cancel(self, stream: RunStream | bytes) -> None:
        """Ask the server to stop the run; the stream then ends with ``cancelled`` set
        (or normally, if the run had already ended: the cancel is then moot). Events already
        received are still yielded. Cancelling a stream that is not live does nothing.
        """
        corr = stream.correlation_id if isinstance(stream, RunStream) else stream
        if self.session.state_of(Role.CONSUMER, corr) not in _LIVE:
            return
        async with self._lock:
            self.session.cancel_run(corr)
            await self._flush_locked()

    async def aclose(self) -> None:
        """Stop reading (the association itself is closed by :func:`connect`).

        Raises:
            Exception: What handling a received batch raised, if it did (every stream ended
                with ``TransportError`` then).
        """
        self._stop(TransportError("association closed"))
        if self._replying is not None:
            self._replying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replying
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def _open(self, corr: bytes, request: Any) -> RunStream:
        stream = RunStream(self, corr, request)
        self._streams[corr] = stream
        return stream

    async def _send(self, request: tuple[Any, ...]) -> None:
        async with self._lock:
            if request[0] == "run":
                _, corr, body, label = request
                self.session.start_run(corr, body, safety_label=label)
            else:
                _, corr, body, label, cursor = request
                self.session.resume_run(corr, body, cursor=cursor, safety_label=label)
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        for frame_type, payload in self.session.data_to_send():
            await self.association.send(self.channel, frame_type, payload)

    def _received(self, received: list[FrameReceived]) -> None:
        """One batch of frames the association read (its callback): the session gets them
        (:meth:`_handle`), its replies are sent, and every stream that got events is woken
        once per batch."""
        try:
            woken = self._handle(received)
        except Exception as exc:  # a bug or an event the decoder refuses: what a failed reader
            # task did, every stream ends with the reader's error, nothing more is read, and
            # aclose() raises the exception
            self._failure = exc
            self._stop(TransportError("association closed"))
            return
        if self.session.wants_to_send() and self._replying is None:
            self._replying = asyncio.get_running_loop().create_task(self._reply())
        for stream in woken:
            stream._wake()

    async def _reply(self) -> None:
        try:
            async with self._lock:
                while self.session.wants_to_send():
                    await self._flush_locked()
        except (NpampError, OSError, ssl.SSLError) as exc:
            self._stop(exc if isinstance(exc, NpampError) else TransportError(str(exc)))
        finally:
            self._replying = None

    def _stop(self, error: BaseException) -> None:
        """Stop reading (the association ended, a reply failed, or aclose()): every stream
        gets ``error``."""
        if not self._reading:
            return
        self._reading = False
        self.association.deliver_to(None, None)
        for stream in self._streams.values():
            stream._put(error)

    def _handle(self, received: list[FrameReceived]) -> set[RunStream]:
        """Hand one batch's Bridge frames to the session in one call and deliver the events
        to their streams; returns the streams that got some."""
        channel = self.channel
        frames = [(f.frame_type, f.payload) for f in received if f.channel == channel]
        if len(frames) != len(received):
            self.announcements += [f.payload for f in received if f.channel == DISCOVERY_CHANNEL]
        streams, woken = self._streams, set()
        for event in self.session.receive_frames(frames):
            stream = streams.get(getattr(event, "correlation_id", None) or b"")
            if stream is not None:
                woken.add(stream)
                stream._deliver(event)
        return woken


class OpaqueRunStream:
    """The events of one run carried opaquely; iterate with ``async for``.

    ``event_id`` of each event is its position in the run (1, 2, 3...): opaque carriage has
    no event ids and no resume. Attributes: ``ended`` once the array closed.
    """

    def __init__(
        self, client: OpaqueAgUiClient, correlation_id: bytes, body: bytes, label: SafetyLabel
    ) -> None:
        self._client = client
        self._request: tuple[bytes, SafetyLabel] | None = (body, label)
        self._queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self._reader = EventArrayReader()
        self.correlation_id = correlation_id
        self.ended = False

    def __aiter__(self) -> AsyncIterator[AgUiEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AgUiEvent]:
        if self._request is not None:
            (body, label), self._request = self._request, None
            await self._client._request(self.correlation_id, RUN_ROUTE, body, label)
        count = 0
        while not self.ended:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                self.ended = True
                raise item
            if item is None:
                self.ended = True
                return
            count += 1
            yield AgUiEvent(event_id=count, raw=item, data=_loads(item))

    def _deliver(self, event: OpaqueEvent) -> None:
        try:
            if isinstance(event, OpaqueStreamData | OpaqueStreamEnded):
                for raw in self._reader.feed(event.data):
                    self._queue.put_nowait(raw)
                if isinstance(event, OpaqueStreamEnded):
                    if not self._reader.closed:
                        raise MalformedEventArray("the reply ended before its array closed")
                    self._queue.put_nowait(None)
            elif isinstance(event, OpaqueErrorReceived):
                self._queue.put_nowait(RunRefused(event.code, event.message, event.body))
            elif isinstance(event, OpaqueResponse):
                raise MalformedEventArray("a run was answered by a single response")
            elif isinstance(event, BridgeFrameRejected):
                self._queue.put_nowait(event.error)
        except MalformedEventArray as exc:
            self._queue.put_nowait(TransportError(f"malformed run reply: {exc}"))


class OpaqueAgUiClient:
    """AG-UI runs carried under NPAMP-CC-OPAQUE: the io route surface as opaque JSON
    (see :mod:`iobridge.npamp.bridge.agui_opaque`). Use :func:`connect_opaque`.

    Tool results go back in the same run (:meth:`submit_tool_result`); :meth:`cancel` stops
    a run, which then ends with ``RUN_FINISHED`` outcome cancelled.
    """

    def __init__(
        self,
        association: Association,
        *,
        protocol_id: int,
        channel: int = BRIDGE_CHANNEL,
        safety: Effect = Effect.NON_IDEMPOTENT_WRITE,
    ) -> None:
        self.association, self.channel, self.safety = association, channel, safety
        self.session = OpaqueSession(protocol_id=protocol_id)
        self._streams: dict[bytes, OpaqueRunStream] = {}
        self._calls: dict[bytes, asyncio.Future[OpaqueEvent]] = {}
        self._lock = asyncio.Lock()
        self._reader = asyncio.create_task(self._read())

    def run(
        self, run_input: Mapping[str, Any] | bytes, *, safety: Effect | None = None
    ) -> OpaqueRunStream:
        """Start a run (on first iteration of the returned stream)."""
        body = run_input if isinstance(run_input, bytes) else _json(run_input)
        label = SafetyLabel(effect=self.safety if safety is None else safety)
        corr = os.urandom(8).hex().encode()
        stream = OpaqueRunStream(self, corr, body, label)
        self._streams[corr] = stream
        return stream

    async def submit_tool_result(
        self, run_id: str, tool_call_id: str, result: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Deliver a frontend tool's result (``{"content"|"result"|"output": ..., ...}``).

        Raises:
            RunRefused: the server refused it (the io error object is in ``body``).
        """
        return await self._call(tool_result_route(run_id, tool_call_id), _json(result))

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Stop a run: ``{"status": "cancelling"}``, or ``"ended"`` if it had ended."""
        return await self._call(cancel_route(run_id), b"{}")

    async def aclose(self) -> None:
        """Stop reading (the association itself is closed by :func:`connect_opaque`)."""
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _call(self, method: str, body: bytes) -> dict[str, Any]:
        corr = os.urandom(8).hex().encode()
        future: asyncio.Future[OpaqueEvent] = asyncio.get_running_loop().create_future()
        self._calls[corr] = future
        try:
            await self._request(corr, method, body, SafetyLabel(effect=self.safety))
            answer = await future
        finally:
            self._calls.pop(corr, None)
        if isinstance(answer, OpaqueResponse):
            value: dict[str, Any] = json.loads(answer.body)
            return value
        if isinstance(answer, OpaqueErrorReceived):
            raise RunRefused(answer.code, answer.message, answer.body)
        raise TransportError(f"unexpected answer to {method}: {answer!r}")

    async def _request(self, corr: bytes, method: str, body: bytes, label: SafetyLabel) -> None:
        async with self._lock:
            self.session.request(corr, body, method=method, safety_label=label)
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        for frame_type, payload in self.session.data_to_send():
            await self.association.send(self.channel, frame_type, payload)

    async def _read(self) -> None:
        error: BaseException = TransportError("association closed")
        try:
            while True:
                frame = await self.association.receive()
                if frame.channel != self.channel:
                    continue
                events = self.session.receive_frame(frame.frame_type, frame.payload)
                async with self._lock:
                    await self._flush_locked()
                for event in events:
                    corr = getattr(event, "correlation_id", None) or b""
                    future = self._calls.get(corr)
                    if future is not None and not future.done():
                        future.set_result(event)
                    elif (stream := self._streams.get(corr)) is not None:
                        stream._deliver(event)
        except (NpampError, OSError, ssl.SSLError) as exc:
            error = exc if isinstance(exc, NpampError) else TransportError(str(exc))
        finally:
            for stream in self._streams.values():
                stream._queue.put_nowait(error)
            for future in self._calls.values():
                if not future.done():
                    future.set_exception(error)


def _loads(raw: bytes) -> Any:
    """``json.loads``, through orjson first: the consumer's per-event cost was mostly the
    standard decoder. What orjson refuses (NaN, integers beyond 64 bits...) is retried with
    ``json.loads``, so exactly the same documents are accepted."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


#: Allowlists built from ``pinned`` entries, most recently used last (at most this many).
PINNED_CACHE_SIZE = 64
_pinned: OrderedDict[tuple[tuple[str, tuple[int, int, int] | None], ...], PinnedPeers] = (
    OrderedDict()
)


def _pinned_peers(entries: Iterable[str | os.PathLike[str]]) -> PinnedPeers:
    """The allowlist for ``entries``, parsed once and not on every :func:`connect`.

    A key file entry is re-read when it changed on disk (inode, size or modification time
    differ), so replacing a pinned key takes effect on the next association. Entries that
    cannot be stat'ed are not cached: :class:`PinnedPeers` then raises its own error.
    """
    stamped: list[tuple[str, tuple[int, int, int] | None]] = []
    for entry in entries:
        text = os.fspath(entry)
        stamp = None
        if not text.startswith(FINGERPRINT_PREFIX):
            try:
                st = os.stat(text)
            except OSError:
                return PinnedPeers(entries)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        stamped.append((text, stamp))
    key = tuple(stamped)
    peers = _pinned.get(key)
    if peers is None:
        peers = _pinned[key] = PinnedPeers(text for text, _ in key)
        if len(_pinned) > PINNED_CACHE_SIZE:
            _pinned.popitem(last=False)
    else:
        _pinned.move_to_end(key)
    return peers


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """The module's one client TLS context (no certificate checks: keys are pinned instead).

    Shared by every :func:`connect` without its own: one context serves any number of
    connections, and building one per association was most of the cost of setting one up.
    """
    return client_ssl_context(verify=False)


#: Transport settings built from (identity, verifier, timeout), most recently used last (at
#: most this many): every association with the same ones shares one, and with it what its
#: handshake configuration derives once (the CLIENT_HELLO offers, our IdentityKey TLV, the
#: negotiation results).
CONFIG_CACHE_SIZE = 64
_configs: OrderedDict[tuple[int, int, float], tuple[IdentityKey, PeerVerifier, TransportConfig]] = (
    OrderedDict()
)


def _transport_config(
    identity: IdentityKey, verifier: PeerVerifier, handshake_timeout: float
) -> TransportConfig:
    """The settings of an association with these; the same object while it stays cached (the
    cache holds the identity and verifier it was built from, so their ids stay theirs)."""
    key = (id(identity), id(verifier), handshake_timeout)
    cached = _configs.get(key)
    if cached is not None and cached[0] is identity and cached[1] is verifier:
        _configs.move_to_end(key)
        return cached[2]
    config = TransportConfig(
        handshake=HandshakeConfig(identities=[identity], peer_verifier=verifier),
        handshake_timeout=handshake_timeout,
    )
    _configs[key] = (identity, verifier, config)
    if len(_configs) > CONFIG_CACHE_SIZE:
        _configs.popitem(last=False)
    return config


_C = TypeVar("_C", "AgUiClient", "OpaqueAgUiClient")


class _Connected(contextlib.AbstractAsyncContextManager[_C]):
    """``async with``: the association, then a client over it; on exit the client stops
    reading and the association closes (a class, not nested generator context managers:
    one object per association instead of three generators and their frames)."""

    def __init__(
        self,
        host: str,
        port: int,
        identity: IdentityKey,
        pinned: PeerVerifier | Iterable[str | os.PathLike[str]],
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float,
        make: Callable[[Association], _C],
    ) -> None:
        self._args = (host, port, identity, pinned, ssl_context, handshake_timeout)
        self._make: Callable[[Association], _C] = make
        self._association: contextlib.AbstractAsyncContextManager[Association] | None = None
        self._client: _C | None = None

    async def __aenter__(self) -> _C:
        host, port, identity, pinned, ssl_context, handshake_timeout = self._args
        verifier = pinned if callable(pinned) else _pinned_peers(pinned)
        config = _transport_config(identity, verifier, handshake_timeout)
        self._association = npamp_connect(
            host, port, ssl_context or _default_ssl_context(), config
        )
        assoc = await self._association.__aenter__()
        try:
            self._client = self._make(assoc)
        except BaseException as exc:
            await self._association.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._client is not None:
                await self._client.aclose()
        finally:
            if self._association is not None:
                await self._association.__aexit__(exc_type, exc, tb)


def connect(
    host: str,
    port: int,
    *,
    identity: IdentityKey,
    pinned: PeerVerifier | Iterable[str | os.PathLike[str]],
    ssl_context: ssl.SSLContext | None = None,
    channel: int = BRIDGE_CHANNEL,
    protocol_id: int = AGUI_PROTOCOL_ID,
    safety: Effect = Effect.NON_IDEMPOTENT_WRITE,
    handshake_timeout: float = 10.0,
) -> contextlib.AbstractAsyncContextManager[AgUiClient]:
    """Open an association to an AG-UI server and yield a client for it.

    Args:
        host: Server address.
        port: Server N-PAMP port.
        identity: Our identity key (the server maps its fingerprint to a principal).
        pinned: The server keys we trust: fingerprints / public key files, or a verifier.
        ssl_context: TLS settings. Default: TLS 1.3 without certificate checks, because the
            N-PAMP handshake authenticates the server by its pinned identity key.
        channel: Channel carrying the runs (``0x000D``, or ``0x000F`` where agreed).
        protocol_id: The agreed AG-UI protocol_id.
        safety: Default declared effect of runs.
        handshake_timeout: Seconds per TLS/handshake step.

    Raises:
        TransportError: TCP/TLS failure.
        HandshakeFailure: The server key is not pinned, or the handshake failed.
    """
    def make(assoc: Association) -> AgUiClient:
        return AgUiClient(assoc, channel=channel, protocol_id=protocol_id, safety=safety)

    return _Connected(host, port, identity, pinned, ssl_context, handshake_timeout, make)


def connect_opaque(
    host: str,
    port: int,
    *,
    identity: IdentityKey,
    pinned: PeerVerifier | Iterable[str | os.PathLike[str]],
    protocol_id: int,
    ssl_context: ssl.SSLContext | None = None,
    channel: int = BRIDGE_CHANNEL,
    safety: Effect = Effect.NON_IDEMPOTENT_WRITE,
    handshake_timeout: float = 10.0,
) -> contextlib.AbstractAsyncContextManager[OpaqueAgUiClient]:
    """Like :func:`connect`, for a server agreed with us on ``protocol_id`` for opaque
    carriage (NPAMP-CC-OPAQUE) instead of the STREAM mapping."""
    def make(assoc: Association) -> OpaqueAgUiClient:
        return OpaqueAgUiClient(assoc, protocol_id=protocol_id, channel=channel, safety=safety)

    return _Connected(host, port, identity, pinned, ssl_context, handshake_timeout, make)
