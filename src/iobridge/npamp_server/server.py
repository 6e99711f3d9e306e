"""The AG-UI Bridge server: N-PAMP associations carrying the runs of a :class:`Backend`.

Theory of operation
-------------------
This is a thin asyncio shell. :class:`~iobridge.npamp.aio.Association` moves frames,
:class:`~iobridge.npamp.bridge.BridgeSession` (one per AG-UI channel of an association) decides
every Bridge and CC-STREAM rule, and :class:`~iobridge.app.Backend` owns the runs (agents,
ownership, cursors, attach/detach). The shell only turns session events into Backend calls:

* ``RunRequested`` → authorize (peer key → principal, SafetyLabel ceiling), then
  ``backend.start_run``; a failure before the stream starts is a BRIDGE_ERROR (NotDelivered,
  SafetyPolicy), never a RUN_ERROR, and never success (MAP-AGUI §4.3).
* Each run-log entry is one BRIDGE_STREAM_DATA whose foreign message is the log entry itself,
  the octets SSE puts after ``data:`` ("events are bytes once"); ``event_id`` is the log
  sequence number. After the terminal event comes exactly one BRIDGE_STREAM_END.
* ``ResumeRequested`` (possibly on a new association) → the registry maps (principal,
  correlation_id) to the run; ``backend.resume`` checks it and the cursor; replay after the
  cursor, then follow live.
* ``CancelRequested`` → the session already queued the single cancel_ack END; we stop
  forwarding and ``backend.cancel_run`` (RUN_FINISHED ``outcome: cancelled`` is stored).

It imports nothing of HTTP: ``iobridge serve --no-http`` runs it alone.

Frames of one session are sent under one lock, drained in the order the session queued them,
so a cancel_ack can never overtake a data frame that precedes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from iobridge.app import EventSink
from iobridge.auth import Principal
from iobridge.errors import (
    EventsNotRetained,
    InputError,
    IobridgeError,
    NotFoundError,
    ServiceUnavailable,
)
from iobridge.npamp.aio import (
    Association,
    NpampServer,
    TransportConfig,
    self_signed_certificate,
    serve,
    server_ssl_context,
)
from iobridge.npamp.association import AssociationConfig
from iobridge.npamp.bridge import (
    RUN_METHOD,
    BridgeSession,
    Role,
    SafetyLabel,
    StreamState,
    TransportErrorCode,
)
from iobridge.npamp.bridge.discovery import (
    CARRIAGE_CLASS_STREAM,
    DISCOVERY_CHANNEL,
    DiscoveryResponder,
    ProtocolRecord,
    push_disco_announce,
)
from iobridge.npamp.bridge.envelope import recover_envelope
from iobridge.npamp.bridge.events import (
    BridgeErrorReceived,
    CancelRequested,
    Event,
    ResumeRequested,
    RunRequested,
)
from iobridge.npamp.bridge.opaque import OpaqueSession
from iobridge.npamp.errors import NpampError
from iobridge.npamp.handshake import HandshakeConfig, IdentityKey, SignatureScheme, load_identity
from iobridge.npamp_server.opaque import OpaqueCarrier
from iobridge.npamp_server.principals import PeerDirectory, Refusal
from iobridge.npamp_server.resumable import ResumableStreams
from iobridge.protocol.event_ids import Cursor

if TYPE_CHECKING:
    from iobridge.app import Backend, FollowedRun
    from iobridge.config import NpampSettings

__all__ = ["AgUiServer", "serving"]

logger = logging.getLogger("iobridge.npamp")

#: DISCO_ANNOUNCE frame type on the Discovery channel (NPAMP-DISC §3).
DISCO_ANNOUNCE = 0x0103
_PRODUCING = frozenset({StreamState.PRODUCING, StreamState.RESUME_RECEIVED})
_GONE = (NpampError, OSError, ssl.SSLError)
#: Events per write when a run-log batch is forwarded (a replay batch holds thousands).
SEND_SLICE = 256


class AgUiServer:
    """Carries the AG-UI runs of one :class:`~iobridge.app.Backend` over N-PAMP.

    Args:
        backend: The application core (shared with HTTP when both are served).
        identity: Our identity key; loaded from ``npamp.identity_key`` or freshly generated.
    """

    def __init__(self, backend: Backend, *, identity: IdentityKey | None = None) -> None:
        self.backend = backend
        settings: NpampSettings = backend.settings.npamp
        self.settings = settings
        #: Its mode and resource rules apply to peers as they do to HTTP callers.
        self.peers = PeerDirectory(settings, backend.authenticator)
        if identity is None:
            identity = (
                load_identity(settings.identity_key)
                if settings.identity_key is not None
                else IdentityKey.generate(SignatureScheme.ED25519)
            )
        self.identity = identity
        #: (principal, correlation_id) → runId, for resume on any association (and replica).
        self.streams = ResumableStreams(backend)
        #: ``host:port`` once listening.
        self.address: str | None = None

    @functools.cached_property
    def agui_record(self) -> ProtocolRecord:
        """The AG-UI protocol record (NPAMP-DISC §5.1) for the channels this server carries:
        built once (the settings it reads do not change while serving), not per association."""
        return ProtocolRecord(
            record_id=b"agui",
            revision=1,
            protocol_id=self.settings.agui_protocol_id,
            carriage_class=CARRIAGE_CLASS_STREAM,
            channels=tuple(self.settings.channels),
            content_types=(0x01,),
            methods=(RUN_METHOD,),
        )

    @property
    def resumable(self) -> bool:
        """Whether finished runs are retained, so streams may be advertised resumable."""
        return self.backend.settings.retention_seconds > 0

    def transport_config(self) -> TransportConfig:
        """Handshake (our key, peer trust) and association (channels) settings."""
        channels = set(self.settings.channels)
        if self.settings.announce_discovery or self.settings.answer_discovery:
            channels.add(DISCOVERY_CHANNEL)
        return TransportConfig(
            handshake=HandshakeConfig(identities=[self.identity], peer_verifier=self.peers.trusts),
            association=AssociationConfig(channels=frozenset(channels)),
            handshake_timeout=self.settings.handshake_timeout,
        )

    async def listen(self, host: str, port: int, ssl_ctx: ssl.SSLContext) -> NpampServer:
        """Start accepting associations; close the result with ``wait_closed()``."""
        server = await serve(
            host, port, ssl_ctx, self.transport_config(), self.handle, backlog=self.settings.backlog
        )
        self.address = f"{host}:{server.port}"
        logger.info(
            "N-PAMP listening on %s:%d, identity %s", host, server.port, self.identity.fingerprint
        )
        return server

    async def handle(self, assoc: Association) -> None:
        """Serve one association until it ends (the :data:`~iobridge.npamp.aio.Handler`)."""
        await _Peer(self, assoc).serve()


@dataclass(eq=False)
class _Forwarding:
    """One stream this association produces: its task and, once started, its run."""

    task: asyncio.Task[None]
    run: FollowedRun | None = None


class _Peer:
    """One association: its Bridge sessions, its send lock and the streams it produces."""

    def __init__(self, server: AgUiServer, assoc: Association) -> None:
        self.server, self.assoc = server, assoc
        self.agreed = server.peers.agreed(assoc.peer_identity)
        protocol_id = server.settings.agui_protocol_id if self.agreed else None
        self.sessions = {
            channel: BridgeSession(protocol_id=protocol_id, resumable=server.resumable)
            for channel in server.settings.channels
        }
        self.lock = asyncio.Lock()
        self.streams: dict[tuple[int, bytes], _Forwarding] = {}
        #: The private protocol_id of opaque carriage with this peer, if agreed (CC-OPAQUE §3).
        self.opaque_id = server.peers.opaque_protocol_id(assoc.peer_identity)
        self.opaque: OpaqueCarrier | None = None
        if self.opaque_id is not None:
            self.opaque = OpaqueCarrier(
                server.backend,
                {c: OpaqueSession(protocol_id=self.opaque_id) for c in server.settings.channels},
                authorize=self._authorize,
                lock=self.lock,
                flush=self._flush_opaque,
                peer=assoc.peer_identity.hex()[:16],
            )
        #: Cancels in flight (a run on another replica is cancelled through its owner).
        self.cancels: set[asyncio.Task[None]] = set()
        # Queries get the AG-UI record only under agreement (MAP-AGUI §7), else an empty result.
        self.discovery = DiscoveryResponder([self.server.agui_record] if self.agreed else [])

    async def serve(self) -> None:
        try:
            if self.agreed and self.server.settings.announce_discovery:
                await self.assoc.send(DISCOVERY_CHANNEL, DISCO_ANNOUNCE, self._announcement())
            async for frame in self.assoc:
                if frame.channel == DISCOVERY_CHANNEL:
                    answers = self.discovery.receive_frame(frame.frame_type, frame.payload)
                    if answers:
                        async with self.lock:
                            await self.assoc.send_many(DISCOVERY_CHANNEL, answers)
                    continue
                session = self.sessions.get(frame.channel)
                if session is None:
                    continue
                if self.opaque is not None and self._is_opaque(frame.payload):
                    await self.opaque.receive(frame.channel, frame.frame_type, frame.payload)
                    continue
                events = session.receive_frame(frame.frame_type, frame.payload)
                if session.wants_to_send():  # (a lock and a call less when nothing is owed)
                    await self._flush(frame.channel)
                for event in events:
                    self._dispatch(frame.channel, event)
        except _GONE:
            pass
        finally:
            tasks = [f.task for f in self.streams.values()]
            for task in tasks:
                task.cancel()  # each detaches with the resume grace
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.opaque is not None:
                await self.opaque.aclose()

    def _is_opaque(self, payload: bytes) -> bool:
        """Whether a Bridge frame names the opaque protocol_id (as far as it can be read)."""
        envelope = recover_envelope(payload)
        return envelope is not None and envelope.protocol_id == self.opaque_id

    def _dispatch(self, channel: int, event: Event) -> None:
        key = (channel, event.correlation_id or b"")
        if isinstance(event, RunRequested | ResumeRequested):
            if isinstance(event, RunRequested):
                task = asyncio.create_task(self._run(channel, event))
            else:
                task = asyncio.create_task(self._resume(channel, event))
            self.streams[key] = _Forwarding(task)
            task.add_done_callback(functools.partial(self._done, key))
        elif isinstance(event, CancelRequested):
            self._cancelled(key)
        elif isinstance(event, BridgeErrorReceived) and event.role is Role.PRODUCER:
            forwarding = self.streams.get(key)  # the consumer rejected our stream
            if forwarding is not None:
                forwarding.task.cancel()
        else:
            logger.debug("N-PAMP peer %s: %r", self.assoc.peer_identity.hex()[:16], event)

    def _done(self, key: tuple[int, bytes], task: asyncio.Task[None]) -> None:
        if self.streams.get(key) is not None and self.streams[key].task is task:
            del self.streams[key]
        if not task.cancelled() and task.exception() is not None:
            logger.error("N-PAMP stream failed", exc_info=task.exception())

    def _cancelled(self, key: tuple[int, bytes]) -> None:
        """The session acknowledged a cancel: release resume state and stop the run."""
        forwarding = self.streams.get(key)
        principal = self.server.peers.principal(self.assoc.peer_identity)
        if principal is None:
            return
        self.server.streams.forget(principal, key[1])
        if forwarding is not None and forwarding.run is not None:
            task = asyncio.create_task(self._cancel(principal, forwarding.run))
            self.cancels.add(task)
            task.add_done_callback(self.cancels.discard)

    async def _cancel(self, principal: Principal, run: FollowedRun) -> None:
        with contextlib.suppress(NotFoundError, ServiceUnavailable):
            await self.server.backend.cancel_run(principal, run.run_id)

    # -- runs ---------------------------------------------------------------------------

    def _authorize(self, label: SafetyLabel | None) -> Principal:
        return self.server.peers.authorize(self.assoc.peer_identity, label)

    async def _run(self, channel: int, event: RunRequested) -> None:
        corr = event.correlation_id
        try:
            principal = self._authorize(event.safety_label)
            run = await self.server.backend.start_run(
                principal, event.body, tool_result_mode=self.server.settings.tool_result_mode
            )
        except Refusal as exc:
            await self._fail(channel, corr, exc.code, exc.message)
            return
        except IobridgeError as exc:
            reason = f"{exc.code}: {exc.message}"
            await self._fail(channel, corr, TransportErrorCode.NOT_DELIVERED, reason)
            return
        await self.server.streams.remember(principal, corr, run)
        await self._forward(channel, corr, principal, run, 0)

    async def _resume(self, channel: int, event: ResumeRequested) -> None:
        corr = event.correlation_id
        try:
            principal = self._authorize(event.safety_label)
            run, after = await self._resumable_run(principal, corr, event.cursor)
        except Refusal as exc:
            await self._fail(channel, corr, exc.code, exc.message)
            return
        await self._forward(channel, corr, principal, run, after)

    async def _resumable_run(
        self, principal: Principal, corr: bytes, cursor: int
    ) -> tuple[FollowedRun, int | Cursor]:
        """The retained run behind (principal, correlation_id), re-authorized (CC-STREAM §12);
        a stream another replica started is found through the shared entry."""
        run_id = await self.server.streams.recall(principal, corr)
        if run_id is None:
            raise Refusal(TransportErrorCode.NOT_RESUMABLE, "no resumable stream with this id")
        try:
            return await self.server.backend.resume(principal, run_id, cursor)
        except NotFoundError:
            self.server.streams.forget(principal, corr)
            raise Refusal(
                TransportErrorCode.NOT_RESUMABLE, "the run is no longer retained"
            ) from None
        except InputError:
            raise Refusal(
                TransportErrorCode.NOT_RESUMABLE, "the cursor is beyond the stream"
            ) from None
        except IobridgeError as exc:  # no longer retained, too many followers
            raise Refusal(TransportErrorCode.NOT_RESUMABLE, exc.message) from None

    async def _forward(
        self, channel: int, corr: bytes, principal: Principal, run: FollowedRun,
        after: int | Cursor,
    ) -> None:
        """Carry the run log after ``after`` as the stream, then its single END."""
        session = self.sessions[channel]
        forwarding = self.streams.get((channel, corr))
        if forwarding is not None:
            forwarding.run = run
        backend = self.server.backend
        try:
            await backend.follow(
                run, _StreamWriter(self, channel, corr), after=after,
                detach_grace=self.server.settings.resume_grace_seconds,
            )
            if session.state_of(Role.PRODUCER, corr) is StreamState.CANCELLED:
                await self._cancel(principal, run)  # cancelled while being started
        except _GONE:
            pass  # the association dropped: the run goes on for the resume grace

    async def _fail(self, channel: int, corr: bytes, code: TransportErrorCode, reason: str) -> None:
        session = self.sessions[channel]
        reason = reason.encode("utf-8")[:255].decode("utf-8", "ignore")
        with contextlib.suppress(*_GONE):
            async with self.lock:
                if session.state_of(Role.PRODUCER, corr) in _PRODUCING:
                    session.fail(corr, code, reason)
                    await self._flush_locked(channel)

    # -- sending ------------------------------------------------------------------------

    async def _flush(self, channel: int) -> None:
        async with self.lock:
            await self._flush_locked(channel)

    async def _flush_locked(self, channel: int) -> None:
        frames = self.sessions[channel].data_to_send()
        if frames:
            await self.assoc.send_many(channel, frames)

    async def _flush_opaque(self, channel: int, session: OpaqueSession) -> None:
        frames = session.data_to_send()
        if frames:
            await self.assoc.send_many(channel, frames)

    def _announcement(self) -> bytes:
        """DISCO_ANNOUNCE ``{0: 0x0103, 2: [record]}`` in deterministic CBOR (NPAMP-DISC §7.1)."""
        return push_disco_announce([self.server.agui_record])


class _StreamWriter(EventSink):
    """One Bridge stream's end of :meth:`Backend.follow`: each log entry one
    BRIDGE_STREAM_DATA whose ``event_id`` is its sequence number, then exactly one END."""

    def __init__(self, peer: _Peer, channel: int, corr: bytes) -> None:
        self.peer, self.channel, self.corr = peer, channel, corr
        self.session = peer.sessions[channel]

    async def send(
        self, events: list[tuple[int, bytes]], *, last: bool, tags: list[bytes] | None = None
    ) -> bool:
        session, corr = self.session, self.corr
        async with self.peer.lock:
            if session.state_of(Role.PRODUCER, corr) not in _PRODUCING:
                return False
            # Written in slices: the peer starts on the first while the rest of a large
            # (replay) batch is still being sealed. The batch that ends the run carries the
            # END in its last write.
            for start in range(0, len(events), SEND_SLICE):
                session.send_events(corr, [data for _seq, data in events[start:start + SEND_SLICE]])
                if last and start + SEND_SLICE >= len(events):
                    session.end_stream(corr)
                await self.peer._flush_locked(self.channel)
        return True

    async def keep_alive(self) -> None:
        return None  # followed without ``idle``: the association has its own liveness

    async def end(self) -> None:
        async with self.peer.lock:
            if self.session.state_of(Role.PRODUCER, self.corr) in _PRODUCING:
                self.session.end_stream(self.corr)
                await self.peer._flush_locked(self.channel)

    async def cut_off(self, error: EventsNotRetained) -> None:
        # This consumer fell behind the run's replay window.
        await self.peer._fail(self.channel, self.corr, TransportErrorCode.NOT_RESUMABLE,
                              error.message)


# --- serving ------------------------------------------------------------------------------


def _ssl_context(settings: NpampSettings, workdir: str) -> ssl.SSLContext:
    if settings.tls_cert is not None and settings.tls_key is not None:
        return server_ssl_context(settings.tls_cert, settings.tls_key)
    logger.warning("N-PAMP: no tls_cert/tls_key configured, using a self-signed certificate")
    return server_ssl_context(*self_signed_certificate(workdir))


@contextlib.asynccontextmanager
async def serving(
    backend: Backend, *, host: str | None = None, port: int | None = None
) -> AsyncIterator[AgUiServer]:
    """Serve ``backend`` over N-PAMP while the context is open (the backend must be open).

    ``host``/``port`` default to ``npamp.host`` (else the HTTP ``host``) and ``npamp.port``.
    On exit the listener closes and its associations end; runs whose peers may resume keep
    going until the backend itself closes.
    """
    npamp = backend.settings.npamp
    port = npamp.port if port is None else port
    if port is None:
        raise ValueError("no N-PAMP port: set npamp.port (or --npamp-port)")
    host = host or npamp.host or backend.settings.host
    server = AgUiServer(backend)
    with tempfile.TemporaryDirectory(prefix="iobridge-npamp-") as workdir:
        listener = await server.listen(host, port, _ssl_context(npamp, workdir))
        try:
            yield server
        finally:
            await listener.wait_closed()
