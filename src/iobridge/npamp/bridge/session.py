"""NPAMP-CC-STREAM carriage of AG-UI runs: a sans-IO Bridge session for both sides.

Theory of operation
-------------------
One AG-UI run is one CC-STREAM stream: a BRIDGE_REQUEST (method ``run``, RunAgentInput body,
SafetyLabel) answered by BRIDGE_STREAM_DATA frames (one AG-UI event each, event_id 1, 2, 3...)
and exactly one BRIDGE_STREAM_END with ``final`` (MAP-AGUI §4, CC-STREAM §5). :class:`BridgeSession`
holds every stream of one association. It never sees sockets or keys: the shell feeds it the
decrypted ``(frame_type, payload)`` of each Bridge-channel frame through :meth:`receive_frame`
and sends whatever :meth:`data_to_send` returns, on the channel the run uses (Bridge ``0x000D``
by default; Interaction ``0x000F`` carries the same framing, MAP-AGUI §7).

Streams are keyed by ``(role, correlation_id)``: ids are unique only per direction (BRIDGE §5),
so our request ``r1`` and the peer's request ``r1`` are different exchanges. Each stream runs
the machine in :data:`TRANSITIONS`, which is role-agnostic (h11 style): the producer
(responder) and consumer (requester) just visit different states. A missing ``(state, input)``
pair moves the stream to ``ERROR`` and raises; a local misuse raises :class:`InvalidState`, a
peer's frame becomes a :class:`BridgeFrameRejected` event plus the BRIDGE_ERROR it calls for.

Readings of places the specs leave open (digest §10) are cited where they are applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

try:
    from iobridge.npamp import _speedups
except ImportError:  # pragma: no cover - the extension is optional; the reference path remains
    _speedups = None  # type: ignore[assignment]

from iobridge.npamp._makers import positional_maker
from iobridge.npamp.bridge.envelope import (
    FRAME_MESSAGE_KIND,
    BridgeEnvelope,
    BridgeErrorBody,
    BridgeFrameType,
    BridgeMessage,
    BridgeProtocolError,
    ContentType,
    ContentTypeUnsupported,
    Control,
    EnvelopeMalformed,
    MethodOnStreamFrame,
    MethodUnsupported,
    ProtocolUnsupported,
    ResumeRefused,
    SafetyLabel,
    StreamControl,
    StreamControlMissing,
    TransportErrorCode,
    peek_data_stream_control,
    pull_bridge_error_body,
    pull_bridge_message,
    push_bridge_error_body,
    push_bridge_message,
    stream_control_tlv,
)
from iobridge.npamp.bridge.events import (
    BridgeErrorReceived,
    CancelAcked,
    CancelRequested,
    Event,
    ResumeRequested,
    RunRequested,
    StreamDataReceived,
    StreamEnded,
    reject_frame,
)
from iobridge.npamp.bridge.safety import DEFAULT_RUN_LABEL, effective_effect
from iobridge.npamp.bridge.state import (
    TERMINAL_STATES,
    CorrelationIdInUse,
    EventIdNotIncreasing,
    Role,
    StreamInput,
    StreamState,
    UnknownStream,
    next_state,
)
from iobridge.npamp.errors import InvalidState
from iobridge.npamp.wire.tlv import TLV_HEADER_SIZE

__all__ = [
    "AGUI_PROTOCOL_ID",
    "RUN_METHOD",
    "BridgeSession",
]

#: Provisional, experimental AG-UI protocol_id (MAP-AGUI §2); only under per-peer agreement.
AGUI_PROTOCOL_ID = 0x35
#: The single AG-UI operation label (MAP-AGUI §4.1).
RUN_METHOD = "run"
_MAX_U64 = (1 << 64) - 1
_DATA = int(Control.DATA)
_CONSUMING = StreamState.CONSUMING
_DATA_TYPE = int(BridgeFrameType.BRIDGE_STREAM_DATA)
#: The compiled Maker where built (_makers.py says what it buys).
_make_stream_data = positional_maker(StreamDataReceived)


# --- the session ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    """Per-stream bookkeeping; the machine state plus event-id cursors."""

    role: Role
    correlation_id: bytes
    content_type: int
    state: StreamState = StreamState.IDLE
    #: Producer: last event_id sent. Consumer: highest event_id received (or the cursor).
    last_event_id: int = 0
    #: Consumer after a resume: events at or below this are duplicates to discard (§6.3).
    floor: int | None = None
    resumable: bool = False
    label: SafetyLabel | None = None
    #: Producer: the encoded envelope TLV of this stream's data frames (constant per stream).
    data_envelope: bytes = b""
    #: Consumer: the envelope TLV its data frames arrive with, once one passed every check.
    recv_envelope: bytes = b""

    def expect(self, event: StreamInput, *, local: bool) -> StreamState:
        """The state ``event`` leads to; a pair missing from the table sends us to ``ERROR``."""
        try:
            return next_state(self.state, event, local=local)
        except (InvalidState, EnvelopeMalformed):
            self.state = StreamState.ERROR
            raise

    def step(self, event: StreamInput, *, local: bool) -> None:
        """Apply one input (see :meth:`expect`)."""
        self.state = self.expect(event, local=local)


class BridgeSession:
    """All AG-UI streams of one association, for both roles.

    Args:
        protocol_id: The AG-UI protocol_id agreed out of band with this peer, or ``None`` when
            there is no agreement: then every run request is answered ProtocolUnsupported and
            we never emit 0x35 (NPAMP-REG §7.1; digest §10.28).
        content_types: Accepted content_type values (JSON by default, MAP-AGUI §2).
        resumable: Whether our engine retains events so that streams we produce can be
            resumed; sets the ``resumable`` flag on every frame we emit (CC-STREAM §6.1).
        strict_stream_method: Reject stream frames that carry a method (MAP-AGUI §4.2 pins
            method_len 0). Off by default: the corpus sends one and the digest §10.11 accepts it.
        max_closed_streams: How many terminated streams to remember (to refuse resuming a
            cancelled stream); older ones are forgotten, bounding memory (CC-STREAM §12).
        compiled: Take runs of data frames through the compiled extension when it is
            installed (``False``: the Python reference, frame by frame; same events).
    """

    def __init__(
        self,
        *,
        protocol_id: int | None,
        content_types: frozenset[int] = frozenset({ContentType.JSON}),
        resumable: bool = False,
        strict_stream_method: bool = False,
        max_closed_streams: int = 1024,
        compiled: bool = True,
    ) -> None:
        self.protocol_id = protocol_id
        self.content_types = content_types
        self.resumable = resumable
        self.strict_stream_method = strict_stream_method
        self.max_closed_streams = max_closed_streams
        self._streams: dict[tuple[Role, bytes], _Stream] = {}
        self._closed: dict[tuple[Role, bytes], None] = {}
        self._outbox: list[tuple[int, bytes]] = []
        #: Envelope TLV octets → the consumer stream whose data frames carry them (fast path).
        self._recv_envelopes: dict[bytes, _Stream] = {}
        # The compiled data-frame runs: 12 % of a replay's instructions per event (consumer,
        # stream_data) and 6 % (producer, stream_frames); docs/npamp.md, Performance.
        self._compiled = compiled and _speedups is not None
        # Functions, not bound methods: a session holding its own bound methods is a
        # reference cycle, freed only by the cyclic collector (one per association).
        self._fast_data = BridgeSession._data_run if self._compiled else BridgeSession._data_frame

    # -- I/O surface ------------------------------------------------------------------------

    def data_to_send(self) -> list[tuple[int, bytes]]:
        """Drain the queued ``(frame_type, plaintext payload)`` pairs, in order."""
        out, self._outbox = self._outbox, []
        return out

    def wants_to_send(self) -> bool:
        """Whether :meth:`data_to_send` has frames waiting (saves a lock on the hot path)."""
        return bool(self._outbox)

    def state_of(self, role: Role, correlation_id: bytes) -> StreamState | None:
        """The state of one stream, or ``None`` if this session does not know it."""
        stream = self._streams.get((role, correlation_id))
        return None if stream is None else stream.state

    def receive_frame(self, frame_type: int, payload: bytes) -> list[Event]:
        """Process one decrypted Bridge-channel frame.

        Args:
            frame_type: The frame header's type.
            payload: The AEAD-opened payload region.

        Returns:
            The events it produced. A refused frame yields :class:`BridgeFrameRejected` and,
            where the rules call for one, a queued BRIDGE_ERROR; the session stays usable.
        """
        return self.receive_frames(((frame_type, payload),))

    def receive_frames(self, frames: Iterable[tuple[int, bytes]]) -> list[Event]:
        """Process decrypted Bridge-channel frames ``(frame_type, payload)`` in order: the
        events of :meth:`receive_frame` for each, concatenated (the consumer's batch path).

        A data frame that starts with the very envelope octets an earlier data frame of a
        CONSUMING stream passed every check with (so the same envelope, carriage and method
        rules hold), followed by a DATA StreamControl with a fresh event_id and no further
        Bridge TLV, is taken here without the full decoder (a run of them in one compiled
        call when the extension is installed); anything else, valid or not, goes through
        :meth:`_receive_checked`, which raises the precise error.
        """
        items = frames if type(frames) is list else list(frames)
        events: list[Event] = []
        envelopes, data_type, fast = self._recv_envelopes, _DATA_TYPE, self._fast_data
        index, count = 0, len(items)
        while index < count:
            frame_type, payload = items[index]
            if frame_type == data_type and len(payload) >= TLV_HEADER_SIZE:
                end = TLV_HEADER_SIZE + ((payload[2] << 8) | payload[3])
                stream = envelopes.get(payload[:end])
                if stream is not None and stream.state is _CONSUMING:
                    taken = fast(self, items, index, stream, events)
                    if taken > index:
                        index = taken
                        continue
            events.extend(self._receive_checked(frame_type, payload))
            index += 1
        return events

    def _data_run(
        self, items: list[tuple[int, bytes]], index: int, stream: _Stream, events: list[Event]
    ) -> int:
        """The compiled data-frame path: the run of ``stream``'s data frames from ``index``
        that pass the fast path's checks, in one call; returns the index after it."""
        taken, last, resumable = _speedups.stream_data(
            items, index, stream.recv_envelope, stream.last_event_id, stream.correlation_id,
            _make_stream_data, events,
        )
        if taken > index:
            stream.last_event_id, stream.resumable = last, resumable
        return taken

    def _data_frame(
        self, items: list[tuple[int, bytes]], index: int, stream: _Stream, events: list[Event]
    ) -> int:
        """The reference of :meth:`_data_run`, one frame: ``index + 1`` when it took the
        frame at ``index``, else ``index`` (the full decoder takes that frame)."""
        payload = items[index][1]
        control = peek_data_stream_control(payload, len(stream.recv_envelope))
        if control is None or control[0] <= stream.last_event_id:
            return index
        event_id, resumable, pos = control
        stream.last_event_id, stream.resumable = event_id, resumable
        events.append(_make_stream_data(stream.correlation_id, event_id, payload[pos:], resumable))
        return index + 1

    def _receive_checked(self, frame_type: int, payload: bytes) -> list[Event]:
        """The full decoder and rule checks for one frame."""
        msg: BridgeMessage | None = None
        try:
            msg = pull_bridge_message(frame_type, payload)
            self._check_carriage(msg)
            events = _HANDLERS[msg.frame_type](self, msg)
            if events and msg.frame_type is BridgeFrameType.BRIDGE_STREAM_DATA:
                self._learn_envelope(msg.envelope.correlation_id, payload)
            return events
        except BridgeProtocolError as exc:
            reply, rejected = reject_frame(exc, msg, protocol_id=self.protocol_id)
            if reply is not None:
                self._outbox.append(reply)
            return [rejected]

    def _learn_envelope(self, corr: bytes, payload: bytes) -> None:
        """Remember the envelope TLV of a data frame that passed every check (fast path)."""
        stream = self._streams.get((Role.CONSUMER, corr))
        if stream is None or stream.recv_envelope:
            return
        stream.recv_envelope = payload[: TLV_HEADER_SIZE + int.from_bytes(payload[2:4], "big")]
        self._recv_envelopes[stream.recv_envelope] = stream

    # -- consumer API -----------------------------------------------------------------------

    def start_run(
        self, correlation_id: bytes, body: bytes, *, safety_label: SafetyLabel = DEFAULT_RUN_LABEL
    ) -> None:
        """Queue a run request (MAP-AGUI §4.1); the label is mandatory (§6, clause 6).

        Raises:
            InvalidState: No agreed protocol_id, or the id names an outstanding run.
        """
        stream = self._fresh(Role.CONSUMER, correlation_id, local=True)
        stream.step(StreamInput.SEND_REQUEST, local=True)
        request = BridgeFrameType.BRIDGE_REQUEST
        self._emit(stream, request, body, method=RUN_METHOD, label=safety_label)

    def resume_run(
        self,
        correlation_id: bytes,
        body: bytes = b"",
        *,
        cursor: int | None = None,
        safety_label: SafetyLabel = DEFAULT_RUN_LABEL,
    ) -> None:
        """Queue a resume request: BRIDGE_REQUEST, same id, StreamControl RESUME (§6.2).

        Within this session the stream must have ended or failed, have been advertised
        resumable, and ``cursor`` (default: the last event received) may not exceed what was
        received. On a new association the session does not know the stream, so ``cursor``
        must be given: the last event the application durably consumed.

        Raises:
            InvalidState: Any of those rules is broken, or the stream was cancelled.
        """
        key = (Role.CONSUMER, correlation_id)
        stream = self._streams.get(key)
        if stream is None:
            if cursor is None:
                raise InvalidState("cursor is required to resume a stream this session lacks")
            stream = self._fresh(Role.CONSUMER, correlation_id, local=True)
        else:
            if not stream.resumable:
                raise InvalidState("the stream was not advertised resumable (CC-STREAM §6.1)")
            if cursor is None:
                cursor = stream.last_event_id
            if cursor > stream.last_event_id:
                raise InvalidState(f"cursor {cursor} exceeds the last event received")
        if not 0 <= cursor <= _MAX_U64:
            raise InvalidState(f"cursor {cursor} is not a u64")
        stream.step(StreamInput.SEND_RESUME, local=True)
        self._closed.pop(key, None)
        stream.floor = stream.last_event_id = cursor
        sc = StreamControl(control=Control.RESUME, event_id=cursor)
        self._emit(
            stream,
            BridgeFrameType.BRIDGE_REQUEST,
            body,
            method=RUN_METHOD,
            sc=sc,
            label=safety_label,
        )

    def cancel_run(self, correlation_id: bytes) -> None:
        """Queue an upstream cancel: STREAM_END, control CANCEL, last event received (§7.1).

        Raises:
            InvalidState: The stream is not one we are consuming.
        """
        stream = self._get(Role.CONSUMER, correlation_id)
        stream.step(StreamInput.SEND_CANCEL, local=True)
        sc = StreamControl(control=Control.CANCEL, event_id=stream.last_event_id)
        self._emit(stream, BridgeFrameType.BRIDGE_STREAM_END, b"", sc=sc)

    # -- producer API -----------------------------------------------------------------------

    def send_event(self, correlation_id: bytes, data: bytes) -> int:
        """Queue one AG-UI event as BRIDGE_STREAM_DATA with the next event_id.

        Returns:
            The event_id assigned (1, 2, 3... or cursor+1... after a resume).

        Raises:
            InvalidState: The stream is not producing (ended, cancelled, failed, unknown).
        """
        stream = self._get(Role.PRODUCER, correlation_id)
        stream.step(StreamInput.SEND_DATA, local=True)
        if not stream.data_envelope:
            # The first data frame goes through the checked encoder; later ones reuse its
            # (identical) envelope and only pack a new StreamControl: the per-event path.
            event_id = self._send_stream_frame(stream, BridgeFrameType.BRIDGE_STREAM_DATA, data)
            payload = self._outbox[-1][1]  # envelope TLV first: type(2) length(2) value
            stream.data_envelope = payload[: 4 + int.from_bytes(payload[2:4], "big")]
            return event_id
        if stream.last_event_id >= _MAX_U64:
            raise InvalidState("the stream's u64 event_id space is exhausted")
        stream.last_event_id += 1
        control = stream_control_tlv(Control.DATA, stream.last_event_id, resumable=self.resumable)
        self._outbox.append(
            (BridgeFrameType.BRIDGE_STREAM_DATA, stream.data_envelope + control + data)
        )
        return stream.last_event_id

    def send_events(self, correlation_id: bytes, events: Iterable[bytes]) -> int:
        """Queue several AG-UI events, in order, as :meth:`send_event` does one by one (the
        same frames; the stream state and envelope are looked up once per batch, and the
        payloads built in one compiled call when the extension is installed).

        Returns:
            The last event_id assigned (the stream's current one if ``events`` is empty).

        Raises:
            InvalidState: The stream is not producing (ended, cancelled, failed, unknown).
        """
        datas = events if type(events) is list else list(events)
        if not datas:
            return self._get(Role.PRODUCER, correlation_id).last_event_id
        self.send_event(correlation_id, datas[0])  # the checked path: state, first envelope
        stream = self._streams[(Role.PRODUCER, correlation_id)]
        envelope, event_id, outbox = stream.data_envelope, stream.last_event_id, self._outbox
        resumable, data_type, control = self.resumable, BridgeFrameType.BRIDGE_STREAM_DATA, _DATA
        start = 1
        if self._compiled:  # PRODUCING --SEND_DATA--> PRODUCING: no state change
            made = _speedups.stream_frames(envelope, event_id, resumable, data_type, datas, 1)
            outbox += made
            start += len(made)
            event_id += len(made)
        try:
            for data in datas[start:]:  # the reference; also what the compiled call left
                if event_id >= _MAX_U64:
                    raise InvalidState("the stream's u64 event_id space is exhausted")
                event_id += 1
                tlv = stream_control_tlv(control, event_id, resumable=resumable)
                outbox.append((data_type, envelope + tlv + data))
        finally:
            stream.last_event_id = event_id
        return event_id

    def end_stream(self, correlation_id: bytes, data: bytes = b"") -> int:
        """Queue the single terminating BRIDGE_STREAM_END (``final``), after the last event.

        Returns:
            The END's event_id, greater than every data event_id (§5.1).

        Raises:
            InvalidState: The stream is not producing.
        """
        stream = self._get(Role.PRODUCER, correlation_id)
        stream.step(StreamInput.SEND_END, local=True)
        event_id = self._send_stream_frame(stream, BridgeFrameType.BRIDGE_STREAM_END, data)
        self._close(stream)
        return event_id

    def fail(self, correlation_id: bytes, code: TransportErrorCode, message: str = "") -> None:
        """Answer a run or resume with a transport error (NotDelivered, SafetyPolicy,
        NotResumable...). Never report success for a run that was not delivered (§6).

        Raises:
            InvalidState: The stream is not one we produce, or is already closed.
        """
        stream = self._get(Role.PRODUCER, correlation_id)
        stream.step(StreamInput.SEND_ERROR, local=True)
        err = push_bridge_error_body(BridgeErrorBody(code=code, message=message))
        self._emit(stream, BridgeFrameType.BRIDGE_ERROR, err)
        self._close(stream)

    # -- receive handlers -------------------------------------------------------------------

    def _check_carriage(self, msg: BridgeMessage) -> None:
        """AG-UI carriage rules: agreed protocol_id, content_type, StreamControl, method."""
        env, ft = msg.envelope, msg.frame_type
        if self.protocol_id is None or env.protocol_id != self.protocol_id:
            raise ProtocolUnsupported(f"protocol_id 0x{env.protocol_id:02x} is not carried")
        if env.content_type not in self.content_types:
            raise ContentTypeUnsupported(f"content_type 0x{env.content_type:02x} not accepted")
        if ft in (BridgeFrameType.BRIDGE_STREAM_DATA, BridgeFrameType.BRIDGE_STREAM_END):
            if msg.stream_control is None:
                raise StreamControlMissing(f"{ft.name} of an AG-UI run lacks StreamControl")
            if self.strict_stream_method and env.method:
                raise MethodOnStreamFrame(f"{ft.name} carries method {env.method!r}")

    def _recv_request(self, msg: BridgeMessage) -> list[Event]:
        env, sc = msg.envelope, msg.stream_control
        if env.method != RUN_METHOD:
            raise MethodUnsupported(f"AG-UI carries only {RUN_METHOD!r}, not {env.method!r}")
        corr, label = env.correlation_id, msg.safety_label
        if sc is None:
            stream = self._fresh(Role.PRODUCER, corr, local=False, content_type=env.content_type)
            stream.step(StreamInput.RECV_REQUEST, local=False)
            stream.label = label
            return [
                RunRequested(
                    correlation_id=corr,
                    body=msg.body,
                    safety_label=label,
                    effect=effective_effect(label),
                )
            ]
        key = (Role.PRODUCER, corr)
        known = self._streams.get(key)
        if known is None or known.state is StreamState.ERROR:
            stream = self._fresh(Role.PRODUCER, corr, local=False, content_type=env.content_type)
        elif known.state not in (StreamState.ENDED, StreamState.FAILED):
            raise ResumeRefused(f"cannot resume a stream that is {known.state.name}")
        elif sc.event_id > known.last_event_id:
            raise ResumeRefused(f"cursor {sc.event_id} is beyond the last event sent")
        else:
            stream = known
        stream.step(StreamInput.RECV_RESUME, local=False)
        self._closed.pop(key, None)
        stream.last_event_id, stream.label = sc.event_id, label
        return [
            ResumeRequested(
                correlation_id=corr,
                cursor=sc.event_id,
                body=msg.body,
                safety_label=label,
                effect=effective_effect(label),
            )
        ]

    def _recv_data(self, msg: BridgeMessage) -> list[Event]:
        stream = self._known(Role.CONSUMER, msg.envelope.correlation_id)
        sc = msg.stream_control
        assert sc is not None  # guaranteed by _check_carriage
        nxt = stream.expect(StreamInput.RECV_DATA, local=False)
        if stream.state is StreamState.CANCELLING:
            return []  # in flight before our cancel: discard (CC-STREAM §7.1)
        if stream.floor is not None and sc.event_id <= stream.floor:
            return []  # already consumed before the resume: discard (CC-STREAM §6.3)
        if sc.event_id <= stream.last_event_id:
            self._reject_stream(stream)
            raise EventIdNotIncreasing(
                f"event_id {sc.event_id} does not exceed {stream.last_event_id}"
            )
        stream.state = nxt
        stream.last_event_id, stream.resumable = sc.event_id, sc.resumable
        return [
            StreamDataReceived(
                correlation_id=stream.correlation_id,
                event_id=sc.event_id,
                data=msg.body,
                resumable=sc.resumable,
            )
        ]

    def _recv_end(self, msg: BridgeMessage) -> list[Event]:
        sc, corr = msg.stream_control, msg.envelope.correlation_id
        assert sc is not None  # guaranteed by _check_carriage
        if sc.control == Control.CANCEL:
            return self._recv_cancel(self._known(Role.PRODUCER, corr), sc)
        stream = self._known(Role.CONSUMER, corr)
        if sc.cancel_ack:
            nxt = stream.expect(StreamInput.RECV_CANCEL_ACK, local=False)
            if sc.event_id < stream.last_event_id:
                self._reject_stream(stream)
                raise EventIdNotIncreasing(
                    f"cancel_ack tail {sc.event_id} is below event {stream.last_event_id}"
                )
            stream.state = nxt
            self._close(stream)
            return [CancelAcked(correlation_id=corr, event_id=sc.event_id)]
        nxt = stream.expect(StreamInput.RECV_END, local=False)
        if sc.event_id <= stream.last_event_id:
            self._reject_stream(stream)
            raise EventIdNotIncreasing(
                f"END event_id {sc.event_id} does not exceed data event_id {stream.last_event_id}"
            )
        stream.state = nxt
        stream.resumable = sc.resumable
        self._close(stream)
        return [
            StreamEnded(
                correlation_id=corr, event_id=sc.event_id, data=msg.body, resumable=sc.resumable
            )
        ]

    def _recv_cancel(self, stream: _Stream, sc: StreamControl) -> list[Event]:
        stream.step(StreamInput.RECV_CANCEL, local=False)
        if stream.state is not StreamState.CANCEL_RECEIVED:
            return []  # our END or error already went out: the cancel is moot (§7.2)
        stream.step(StreamInput.SEND_CANCEL_ACK, local=True)
        ack = StreamControl(event_id=stream.last_event_id, cancel_ack=True)
        self._emit(stream, BridgeFrameType.BRIDGE_STREAM_END, b"", sc=ack)
        self._close(stream)
        return [
            CancelRequested(
                correlation_id=stream.correlation_id,
                cursor=sc.event_id,
                tail_event_id=stream.last_event_id,
            )
        ]

    def _recv_error(self, msg: BridgeMessage) -> list[Event]:
        corr = msg.envelope.correlation_id
        stream = self._streams.get((Role.CONSUMER, corr))
        if stream is None or stream.state in TERMINAL_STATES:
            stream = self._known(Role.PRODUCER, corr)  # the consumer rejected our stream
        stream.step(StreamInput.RECV_ERROR, local=False)
        self._close(stream)
        transport = pull_bridge_error_body(msg.body)
        return [
            BridgeErrorReceived(
                correlation_id=corr,
                role=stream.role,
                code=None if transport is None else transport.code,
                message="" if transport is None else transport.message,
                body=msg.body,
            )
        ]

    def _recv_response(self, msg: BridgeMessage) -> list[Event]:
        stream = self._known(Role.CONSUMER, msg.envelope.correlation_id)
        stream.step(StreamInput.RECV_RESPONSE, local=False)  # no transition: always raises
        return []

    def _recv_notify(self, msg: BridgeMessage) -> list[Event]:
        raise MethodUnsupported("AG-UI defines no notifications; dropped (never answered)")

    # -- helpers ----------------------------------------------------------------------------

    def _fresh(
        self, role: Role, corr: bytes, *, local: bool, content_type: int = ContentType.JSON
    ) -> _Stream:
        """A new stream for a new exchange; the id must not name an outstanding one."""
        if local and self.protocol_id is None:
            raise InvalidState("no AG-UI protocol_id is agreed with this peer (NPAMP-REG §7.1)")
        if local and not corr:
            raise InvalidState("a request needs a non-empty correlation_id")
        key = (role, corr)
        old = self._streams.get(key)
        if old is not None and old.state not in TERMINAL_STATES | {StreamState.ERROR}:
            if local:
                raise InvalidState(f"correlation_id {corr!r} names an outstanding run")
            raise CorrelationIdInUse(f"correlation_id {corr!r} names an outstanding run")
        self._closed.pop(key, None)
        stream = _Stream(role=role, correlation_id=corr, content_type=content_type)
        self._streams[key] = stream
        return stream

    def _get(self, role: Role, corr: bytes) -> _Stream:
        stream = self._streams.get((role, corr))
        if stream is None:
            raise InvalidState(f"no {role.value} stream with correlation_id {corr!r}")
        return stream

    def _known(self, role: Role, corr: bytes) -> _Stream:
        stream = self._streams.get((role, corr))
        if stream is None:
            raise UnknownStream(f"no {role.value} stream with correlation_id {corr!r}")
        return stream

    def _reject_stream(self, stream: _Stream) -> None:
        """We reject a bad stream frame upstream: the stream fails (digest §10.9)."""
        stream.step(StreamInput.SEND_ERROR, local=True)
        self._close(stream)

    def _close(self, stream: _Stream) -> None:
        """Remember a terminated stream, forgetting the oldest beyond the bound."""
        key = (stream.role, stream.correlation_id)
        if stream.recv_envelope:
            self._recv_envelopes.pop(stream.recv_envelope, None)
            stream.recv_envelope = b""
        self._closed[key] = None
        while len(self._closed) > self.max_closed_streams:
            oldest = next(iter(self._closed))
            del self._closed[oldest]
            if self._streams[oldest].state in TERMINAL_STATES:
                del self._streams[oldest]

    def _send_stream_frame(self, stream: _Stream, ft: BridgeFrameType, data: bytes) -> int:
        if stream.last_event_id >= _MAX_U64:
            raise InvalidState("the stream's u64 event_id space is exhausted")
        stream.last_event_id += 1
        sc = StreamControl(event_id=stream.last_event_id, resumable=self.resumable)
        self._emit(stream, ft, data, sc=sc)
        return stream.last_event_id

    def _emit(
        self,
        stream: _Stream,
        ft: BridgeFrameType,
        body: bytes,
        *,
        method: str = "",
        sc: StreamControl | None = None,
        label: SafetyLabel | None = None,
    ) -> None:
        self._outbox.append((ft, self._build(stream, ft, body, method, sc, label)))

    def _build(
        self,
        stream: _Stream,
        ft: BridgeFrameType,
        body: bytes,
        method: str,
        sc: StreamControl | None,
        label: SafetyLabel | None,
    ) -> bytes:
        assert self.protocol_id is not None  # streams exist only under an agreed id
        flags = 0x01 if ft is BridgeFrameType.BRIDGE_STREAM_END else 0x00
        envelope = BridgeEnvelope(
            protocol_id=self.protocol_id,
            message_kind=FRAME_MESSAGE_KIND[ft],
            content_type=stream.content_type,
            flags=flags,
            correlation_id=stream.correlation_id,
            method=method,
        )
        msg = BridgeMessage(
            frame_type=ft, envelope=envelope, stream_control=sc, safety_label=label, body=body
        )
        return push_bridge_message(msg)


#: Bridge frame type → the session's handler for a checked message of it.
_HANDLERS: dict[BridgeFrameType, Callable[[BridgeSession, BridgeMessage], list[Event]]] = {
    BridgeFrameType.BRIDGE_REQUEST: BridgeSession._recv_request,
    BridgeFrameType.BRIDGE_RESPONSE: BridgeSession._recv_response,
    BridgeFrameType.BRIDGE_ERROR: BridgeSession._recv_error,
    BridgeFrameType.BRIDGE_NOTIFY: BridgeSession._recv_notify,
    BridgeFrameType.BRIDGE_STREAM_DATA: BridgeSession._recv_data,
    BridgeFrameType.BRIDGE_STREAM_END: BridgeSession._recv_end,
}
