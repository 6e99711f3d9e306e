"""Sans-IO N-PAMP association: handshake, then encrypted frames on many channels.

Theory of operation. :class:`NpampConnection` is fed the octets read from the transport with
:meth:`~NpampConnection.receive_data`, which returns
:mod:`~iobridge.npamp.association.events`; commands
(:meth:`~NpampConnection.send_frame`, :meth:`~NpampConnection.ping`,
:meth:`~NpampConnection.key_update`, :meth:`~NpampConnection.close`) and automatic replies
(PONG, KEY_UPDATE_ACK, CLOSE_ACK, ERROR) queue encoded frames behind
:meth:`~NpampConnection.data_to_send`, which the shell drains after every call. No sockets,
clocks or threads; timeouts belong to the shell.

Receive path per frame (core draft §4, §6, §7; digest §1.4):

1. :class:`~iobridge.npamp.wire.frame.FrameReader` validates the header (CRC first, ...).
2. GREASE channels are ignored (:class:`~.events.FrameDropped`), in every state.
3. While HANDSHAKING, the frame goes to the handshake object; its completion switches the
   association to OPEN with application keys hanging off the master secret.
4. Once OPEN every frame must be ENC. Frames on channels not enabled locally are dropped
   before any key is derived (the draft's "not advertised" rule; there is no advertisement
   message in the handshake, so the enabled set is configuration, digest §10 item 16).
5. Sequence number (strict next-expected over TLS), then the AEAD tag. Only after that are
   the flags (COMP/FRAG rejected) and the frame type acted upon, so a forged CLOSE, ERROR or
   KEY_UPDATE can never change state.

Readings taken (see ``docs/npamp.md``): CLOSE, CLOSE_ACK and ERROR act on the association only
on the Control channel, elsewhere they are channel data; PING/PONG/CLOSE payloads are echoed or
ignored; our ERROR payload is the u16 :class:`~.errors.ErrorCode` followed by a UTF-8 reason;
a sender rotates keys on its own (no need to wait for the ACK) and, before the u64 sequence
would run out, rotates automatically.

Remote violations do not raise out of :meth:`~NpampConnection.receive_data`: the events decoded
before the fault are returned followed by :class:`~.events.ConnectionTerminated` carrying the
error, an ERROR frame is queued when the error's reply hint asks for it and keys exist, and the
association enters ERROR. Every later call raises :class:`~.errors.InvalidState`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from iobridge.npamp.association.events import (
    CloseReceived,
    ConnectionTerminated,
    Event,
    FrameDropped,
    FrameReceived,
    HandshakeCompleted,
    KeyUpdated,
    PongReceived,
)
from iobridge.npamp.association.state import (
    TERMINAL_STATES,
    TRANSITIONS,
    AssociationInput,
    AssociationState,
)
from iobridge.npamp.errors import (
    InvalidState,
    KeyUpdateError,
    LocalProtocolError,
    NpampError,
    PayloadTooLarge,
    PeerReportedError,
    Reply,
    TlvDecodeError,
    UnexpectedFrame,
    UnsupportedFlag,
)
from iobridge.npamp.handshake.machine import ClientHandshake, ServerHandshake
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.record.cipher import (
    TAG_SIZE,
    ReceiveState,
    RecordCipher,
    SendState,
)
from iobridge.npamp.wire.frame import (
    DEFAULT_MAX_PAYLOAD_LENGTH,
    Channel,
    Flags,
    Frame,
    FrameReader,
    FrameType,
)
from iobridge.npamp.wire.tlv import TlvType, pull_tlvs, push_tlv

__all__ = ["DEFAULT_CHANNELS", "AssociationConfig", "NpampConnection"]

#: Channels enabled unless configured otherwise: Control, Bridge, Interaction, Discovery.
DEFAULT_CHANNELS = frozenset(
    {Channel.CONTROL, Channel.BRIDGE, Channel.INTERACTION, Channel.DISCOVERY}
)
#: Frames per (channel, direction, epoch) after which we rotate our sending keys (digest §10
#: item 20: the spec gives no number).
DEFAULT_KEY_UPDATE_INTERVAL = 2**24
#: Handshake frame types that must not reappear once established (spec/10 §1, §9).
_HANDSHAKE_TYPES = frozenset(range(FrameType.CLIENT_HELLO, FrameType.REKEM_ACK + 1))
_MARKER_KNOWN = frozenset({TlvType.KEY_UPDATE_MARKER})
_UNSUPPORTED_FLAGS = int(Flags.COMP | Flags.FRAG)

In = AssociationInput


@dataclass(frozen=True, kw_only=True, slots=True)
class AssociationConfig:
    """Per-association settings.

    Attributes:
        channels: Channel ids in use; frames on others are dropped. Control is always added.
        max_payload_length: Largest Payload Length accepted or sent.
        key_update_interval: Rotate our sending keys on a channel after this many frames in
            one epoch (``None``: only when the sequence space is about to run out).
    """

    channels: frozenset[int] = DEFAULT_CHANNELS
    max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH
    key_update_interval: int | None = DEFAULT_KEY_UPDATE_INTERVAL
    #: ``channels`` with Control: what an association enables (derived once, not a setting).
    enabled: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", frozenset(self.channels) | {Channel.CONTROL})
        bad = [c for c in self.channels if not 0 <= c < 0xF000]
        if bad:
            raise ValueError(f"channels must be in 0x0000-0xEFFF, got {bad}")
        if self.max_payload_length <= TAG_SIZE:
            raise ValueError("max_payload_length must exceed the AEAD tag size")
        if self.key_update_interval is not None and self.key_update_interval < 1:
            raise ValueError("key_update_interval must be positive")


class NpampConnection:
    """One N-PAMP association (client or server role), handshake included.

    Attributes:
        client: Whether we are the client.
        config: The association settings.
    """

    def __init__(
        self,
        handshake: ClientHandshake | ServerHandshake,
        *,
        config: AssociationConfig | None = None,
    ) -> None:
        """Wrap a fresh handshake object.

        Args:
            handshake: A :class:`ClientHandshake` (client) or :class:`ServerHandshake`.
            config: Association settings (defaults: :class:`AssociationConfig`).
        """
        self.client = isinstance(handshake, ClientHandshake)
        self.config = config or AssociationConfig()
        self._channels = self.config.enabled
        self._handshake = handshake
        self._state = AssociationState.HANDSHAKING
        self._reader = FrameReader(max_payload_length=self.config.max_payload_length)
        self._out: list[bytes] = []
        self._result: HandshakeCompleted | None = None
        self._send: dict[int, SendState] = {}
        self._recv: dict[int, ReceiveState] = {}
        self._acked_epoch: dict[int, int] = {}
        self._send_dir = 0 if self.client else 1
        self._recv_dir = 1 - self._send_dir

    # -- public API ---------------------------------------------------------------------------

    @property
    def state(self) -> AssociationState:
        """Current association state."""
        return self._state

    @property
    def handshake_result(self) -> HandshakeCompleted | None:
        """The completed handshake (profile, suite, peer identity), once OPEN."""
        return self._result

    def initiate(self) -> None:
        """Start the handshake: the client queues CLIENT_HELLO; a server has nothing to do.

        Raises:
            InvalidState: Not in HANDSHAKING, or called twice on a client.
        """
        self._move(In.SEND_HANDSHAKE, local=True)
        if isinstance(self._handshake, ClientHandshake):
            try:
                self._handshake.initiate()
            except NpampError:
                self._state = AssociationState.ERROR
                raise
            self._out.append(self._handshake.data_to_send())

    def data_to_send(self) -> bytes:
        """Drain the encoded frames queued for the peer (no I/O happens here)."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed octets read from the transport; return what they caused.

        Args:
            data: Any chunk of the byte stream (frames may be split or coalesced).

        Returns:
            Events in wire order. A peer violation ends the list with
            :class:`ConnectionTerminated` whose ``error`` says what happened; once CLOSED,
            further input is discarded.

        Raises:
            InvalidState: The association already failed.
        """
        if self._state is AssociationState.ERROR:
            raise InvalidState("association failed; no further input is processed")
        events: list[Event] = []
        if self._state is AssociationState.CLOSED:
            return events
        try:
            self._reader.receive_data(data)
            while self._state not in TERMINAL_STATES:
                frame = self._reader.next_frame()
                if frame is None:
                    break
                self._process(frame, events)
        except NpampError as exc:
            self._fail(exc, events)
        return events

    def send_frame(
        self, channel: int, frame_type: int, payload: bytes, *, urgent: bool = False
    ) -> None:
        """Seal and queue one application frame.

        Args:
            channel: An enabled channel id.
            frame_type: u16 frame type (not 0x0000).
            payload: Plaintext payload (TLVs followed by the body).
            urgent: Set URG (a scheduling hint only).

        Raises:
            LocalProtocolError: Channel not enabled, frame type out of range, or a type the
                association itself handles (PING, KEY_UPDATE, CLOSE on Control...: use the
                matching method) - no state change; ``PayloadTooLarge`` above the cap.
            InvalidState: Not OPEN; the association enters ERROR.
        """
        self._check_channel(channel)
        self._check_frame(channel, frame_type, payload)
        self._move(In.SEND_DATA, local=True)
        self._seal(channel, frame_type, payload, urgent=urgent)

    def _check_frame(self, channel: int, frame_type: int, payload: bytes) -> None:
        """Refuse an application frame :meth:`send_frame` may not send (nothing changes)."""
        if not 0 < frame_type <= 0xFFFF:
            raise LocalProtocolError(f"frame type {frame_type!r} must be in 1..0xFFFF")
        handled = _HANDLERS.get(frame_type)
        if handled is not None and (channel == Channel.CONTROL or not handled[1]):
            raise LocalProtocolError(
                f"frame type 0x{frame_type:04x} on channel 0x{channel:04x} is managed by the "
                "association; use ping(), key_update() or close()"
            )
        if len(payload) + TAG_SIZE > self.config.max_payload_length:
            raise PayloadTooLarge(f"payload of {len(payload)} octets exceeds the frame cap")

    def send_frames(self, channel: int, frames: list[tuple[int, bytes]]) -> None:
        """Seal and queue several application frames of one channel, in order: the same frames
        as :meth:`send_frame` one by one (the producer's per-event path).

        Raises:
            LocalProtocolError, InvalidState: As :meth:`send_frame`; a frame that is refused
                refuses the whole batch before anything is queued.
        """
        self._check_channel(channel)
        for frame_type, payload in frames:
            self._check_frame(channel, frame_type, payload)
        if not frames:
            return
        self._move(In.SEND_DATA, local=True)
        for frame_type, payload in frames:
            self._seal(channel, frame_type, payload)

    def ping(self, channel: int = Channel.CONTROL, payload: bytes = b"") -> None:
        """Queue a PING; the peer's PONG is reported as :class:`PongReceived`.

        Raises:
            InvalidState: Not OPEN.
        """
        self._check_channel(channel)
        self._move(In.SEND_PING, local=True)
        self._seal(channel, FrameType.PING, payload)

    def key_update(self, channel: int = Channel.CONTROL) -> None:
        """Rotate our sending keys on ``channel`` (KEY_UPDATE, then the next epoch).

        Raises:
            InvalidState: Not OPEN.
        """
        self._check_channel(channel)
        self._move(In.SEND_KEY_UPDATE, local=True)
        self._rotate(channel)

    def close(self, payload: bytes = b"") -> None:
        """Queue CLOSE on the Control channel; CLOSE_ACK completes it.

        Raises:
            InvalidState: Not OPEN.
        """
        self._move(In.SEND_CLOSE, local=True)
        self._seal(Channel.CONTROL, FrameType.CLOSE, payload)

    # -- state --------------------------------------------------------------------------------

    def _move(self, event: AssociationInput, *, local: bool) -> None:
        try:
            self._state = TRANSITIONS[(self._state, event)]
        except KeyError:
            message = f"{event.name} is not allowed in {self._state.name}"
            if not local:
                raise UnexpectedFrame(message) from None  # receive_data's _fail takes it over
            self._state = AssociationState.ERROR
            self._zeroize()
            raise InvalidState(message) from None

    def _fail(self, exc: NpampError, events: list[Event]) -> None:
        if exc.reply is Reply.ERROR_AND_CLOSE and self._result is not None and self._send_ok():
            reason = exc.message.encode("utf-8", "replace")[:256]
            # If even the ERROR cannot be sealed there is nothing more to say; the shell tears
            # the transport down regardless.
            with suppress(NpampError):
                self._seal(Channel.CONTROL, FrameType.ERROR, exc.code.to_bytes(2, "big") + reason)
        self._state = AssociationState.ERROR
        self._zeroize()
        events.append(ConnectionTerminated(error=exc))

    def _send_ok(self) -> bool:
        return self._state in (AssociationState.OPEN, AssociationState.CLOSING)

    def _finish(
        self, events: list[Event], error: NpampError | None = None, code: int | None = None
    ) -> None:
        self._zeroize()
        events.append(ConnectionTerminated(error=error, remote_code=code))

    def _zeroize(self) -> None:
        # Python cannot wipe immutable bytes; dropping every reference is what we can do.
        self._send.clear()
        self._recv.clear()

    def _check_channel(self, channel: int) -> None:
        if channel not in self._channels:
            raise LocalProtocolError(f"channel 0x{channel:04x} is not enabled")

    # -- keys ---------------------------------------------------------------------------------

    def _cipher(self, direction: int, epoch: int, channel: int) -> RecordCipher:
        r = self._result
        if r is None:  # pragma: no cover - guarded by the state machine
            raise InvalidState("no application keys before the handshake completes")
        key, iv = ks.application_keys(
            r.master_secret, direction, epoch, r.aead_suite, channel, r.hash_name
        )
        return RecordCipher(r.aead_suite, key, iv)

    def _send_state(self, channel: int) -> SendState:
        st = self._send.get(channel)
        if st is None:
            st = self._send[channel] = SendState(channel, self._cipher(self._send_dir, 0, channel))
        return st

    def _recv_state(self, channel: int) -> ReceiveState:
        st = self._recv.get(channel)
        if st is None:
            st = self._recv[channel] = ReceiveState(
                channel, self._cipher(self._recv_dir, 0, channel)
            )
        return st

    def _seal(self, channel: int, frame_type: int, payload: bytes, *, urgent: bool = False) -> None:
        st = self._send_state(channel)
        interval = self.config.key_update_interval
        if st.exhausted or (interval is not None and st.next_seq >= interval):
            self._rotate(channel)
        self._out.append(st.seal(frame_type, payload, urgent=urgent))

    def _rotate(self, channel: int) -> None:
        st = self._send_state(channel)
        new_epoch = st.epoch + 1
        marker = push_tlv(TlvType.KEY_UPDATE_MARKER, new_epoch.to_bytes(8, "big"))
        self._out.append(st.seal(FrameType.KEY_UPDATE, marker, last=True))
        st.rekey(self._cipher(self._send_dir, new_epoch, channel), new_epoch)

    # -- receive ------------------------------------------------------------------------------

    def _process(self, frame: Frame, events: list[Event]) -> None:
        header = frame[0]
        frame_type, channel = header[0], header[1]
        if self._state is AssociationState.OPEN and channel in self._channels:
            # The per-frame path: an open association, an enabled channel (never GREASE:
            # 0xF000-0xFFFE cannot be enabled); the same steps as below, fewer lookups.
            st = self._recv.get(channel)
            payload = (st if st is not None else self._recv_state(channel)).open(frame)
            if header.flags & _UNSUPPORTED_FLAGS:
                raise UnsupportedFlag(f"flags 0x{header.flags:x}: COMP/FRAG undefined")
            handler = _HANDLERS.get(frame_type)
            if handler is None or (handler[1] and channel != Channel.CONTROL):
                events.append(
                    FrameReceived(
                        channel=channel,
                        frame_type=frame_type,
                        payload=payload,
                        seq=header[2],
                        urgent=header.urgent,
                    )
                )
                return
            handler[0](self, frame, payload, events)
            return
        if frame.grease:
            events.append(
                FrameDropped(channel=frame.channel, frame_type=frame.frame_type, reason="grease")
            )
            return
        if self._state is AssociationState.HANDSHAKING:
            self._move(In.RECV_HANDSHAKE, local=False)
            try:
                completed = self._handshake.receive_frame(frame)
            finally:
                self._out.append(self._handshake.data_to_send())
            for done in completed:
                self._result = done
                self._move(In.RECV_HANDSHAKE_DONE, local=False)
                events.append(done)
            return
        if frame.channel not in self._channels:
            events.append(
                FrameDropped(
                    channel=frame.channel, frame_type=frame.frame_type, reason="channel not enabled"
                )
            )
            return
        payload = self._recv_state(frame.channel).open(frame)
        if frame.header.flags & _UNSUPPORTED_FLAGS:
            raise UnsupportedFlag(f"flags 0x{frame.header.flags:x}: COMP/FRAG undefined")
        handler = _HANDLERS.get(frame.frame_type)
        if handler is None or (handler[1] and frame.channel != Channel.CONTROL):
            self._move(In.RECV_DATA, local=False)
            events.append(
                FrameReceived(
                    channel=frame.channel,
                    frame_type=frame.frame_type,
                    payload=payload,
                    seq=frame.seq,
                    urgent=frame.header.urgent,
                )
            )
            return
        handler[0](self, frame, payload, events)

    def _on_ping(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_PING, local=False)
        self._seal(frame.channel, FrameType.PONG, payload)

    def _on_pong(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_PONG, local=False)
        events.append(PongReceived(channel=frame.channel, payload=payload))

    def _on_key_update(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_KEY_UPDATE, local=False)
        st = self._recv_state(frame.channel)
        epoch = _marker(payload)
        if epoch != st.epoch + 1:
            raise KeyUpdateError(f"KEY_UPDATE to epoch {epoch}, expected {st.epoch + 1}")
        st.rekey(self._cipher(self._recv_dir, epoch, frame.channel), epoch)
        self._seal(frame.channel, FrameType.KEY_UPDATE_ACK, payload)
        events.append(KeyUpdated(channel=frame.channel, epoch=epoch, local=False))

    def _on_key_update_ack(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_KEY_UPDATE_ACK, local=False)
        epoch = _marker(payload)
        sent = self._send[frame.channel].epoch if frame.channel in self._send else 0
        if not self._acked_epoch.get(frame.channel, 0) < epoch <= sent:
            raise KeyUpdateError(f"KEY_UPDATE_ACK for epoch {epoch} we never announced")
        self._acked_epoch[frame.channel] = epoch
        events.append(KeyUpdated(channel=frame.channel, epoch=epoch, local=True))

    def _on_close(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_CLOSE, local=False)
        # The CLOSE_ACK is sealed before the keys go; CLOSED permits no other send.
        self._out.append(self._send_state(Channel.CONTROL).seal(FrameType.CLOSE_ACK, b""))
        events.append(CloseReceived(payload=payload))
        self._finish(events)

    def _on_close_ack(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_CLOSE_ACK, local=False)
        self._finish(events)

    def _on_error(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        self._move(In.RECV_ERROR, local=False)
        code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
        reason = payload[2:].decode("utf-8", "replace")
        self._finish(events, PeerReportedError(f"peer sent ERROR {code}: {reason}"), code)

    def _on_handshake_type(self, frame: Frame, payload: bytes, events: list[Event]) -> None:
        raise UnexpectedFrame(f"handshake frame 0x{frame.frame_type:04x} after establishment")


def _marker(payload: bytes) -> int:
    """Decode the KEY_UPDATE(_ACK) payload: exactly one KeyUpdateMarker TLV, 8 octets BE."""
    tlvs = pull_tlvs(payload, _MARKER_KNOWN)
    if len(tlvs) != 1 or len(tlvs[0].value) != 8:
        raise TlvDecodeError("KEY_UPDATE payload must be one 8-octet KeyUpdateMarker TLV")
    return int.from_bytes(tlvs[0].value, "big")


_Handler = Callable[[NpampConnection, Frame, bytes, list[Event]], None]

#: frame type → (handler, Control channel only). Types absent here are channel data.
_HANDLERS: dict[int, tuple[_Handler, bool]] = {
    FrameType.PING: (NpampConnection._on_ping, False),
    FrameType.PONG: (NpampConnection._on_pong, False),
    FrameType.KEY_UPDATE: (NpampConnection._on_key_update, False),
    FrameType.KEY_UPDATE_ACK: (NpampConnection._on_key_update_ack, False),
    FrameType.CLOSE: (NpampConnection._on_close, True),
    FrameType.CLOSE_ACK: (NpampConnection._on_close_ack, True),
    FrameType.ERROR: (NpampConnection._on_error, True),
    **{t: (NpampConnection._on_handshake_type, True) for t in _HANDSHAKE_TYPES},
}
#: Frame types the association acts on, per channel (send_frame refuses them).
_HANDLED_ON_CONTROL = frozenset(_HANDLERS)
_HANDLED_ANYWHERE = frozenset(t for t, (_, control_only) in _HANDLERS.items() if not control_only)
