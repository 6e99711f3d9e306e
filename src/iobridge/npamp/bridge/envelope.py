"""NPAMP-BRIDGE payload codec: envelope, StreamControl and SafetyLabel TLVs, transport errors.

Theory of operation
-------------------
A Bridge frame (channel ``0x000D``, frame types ``0x0100``-``0x0105``) carries, as the plaintext
of its AEAD-sealed payload region::

    BridgeEnvelope TLV 0x0010  (REQUIRED, first)       NPAMP-BRIDGE §3, §4
    StreamControl  TLV 0x0011  (CC-STREAM frames)      NPAMP-CC-STREAM §4, §5 (provisional type)
    SafetyLabel    TLV 0x0013  (state-mutating requests) NPAMP-BRIDGE §7
    <foreign message>          octet-for-octet, no length field (NPAMP-BRIDGE §1)

The foreign message is unframed, so its start is wherever the TLVs stop. CC-STREAM §4 says TLV
order is free, but a JSON foreign message could then never be told apart from a TLV. We follow
the project's reading (digest §10.3): the envelope MUST be the first TLV; after it we consume
further TLVs only while the next two octets are ``0x0011`` or ``0x0013`` (each at most once); the
first other octet starts the foreign message. We always emit envelope, StreamControl, SafetyLabel.

Every rejection rule of NPAMP-BRIDGE, NPAMP-REG §4 and NPAMP-CC-STREAM §5.2/§9 is its own
:class:`EnvelopeMalformed` subclass; :func:`error_reply` turns any :class:`BridgeProtocolError`
into the BRIDGE_ERROR it calls for (or ``None`` when the frame cannot be answered).

Error tree (defined in :mod:`iobridge.npamp.bridge.errors`, re-exported here)::

    RemoteProtocolError
    └── BridgeProtocolError            .transport_code, .frame_type, .envelope
        ├── EnvelopeMalformed (1)
        │   ├── NotABridgeFrame, EnvelopeMissing, EnvelopeNotFirst, EnvelopeTlvOverrun,
        │   │   EnvelopeValueTruncated, EnvelopeTrailingOctets, MethodNotUtf8,
        │   │   NullProtocolId, MessageKindMismatch, CorrelationIdMissing,
        │   │   NotifyCorrelationId, DuplicateBridgeTlv, ContentTypeUnsupported,
        │   │   MethodOnStreamFrame
        │   ├── SafetyLabelMalformed
        │   └── StreamControlMalformed
        │       ├── StreamControlLength, StreamControlVersion, StreamControlUndefined,
        │       └── StreamControlMissing, StreamControlMisplaced
        ├── ProtocolUnsupported (2)
        ├── MethodUnsupported (3)
        ├── SafetyPolicyViolation (5)
        └── ResumeRefused (6)
    LocalProtocolError
    └── InvalidBridgeMessage           we tried to emit a message the rules forbid
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from iobridge.npamp.bridge.errors import (
    BridgeProtocolError,
    ContentTypeUnsupported,
    CorrelationIdMissing,
    DuplicateBridgeTlv,
    EnvelopeMalformed,
    EnvelopeMissing,
    EnvelopeNotFirst,
    EnvelopeTlvOverrun,
    EnvelopeTrailingOctets,
    EnvelopeValueTruncated,
    InvalidBridgeMessage,
    MessageKindMismatch,
    MethodNotUtf8,
    MethodOnStreamFrame,
    MethodUnsupported,
    NotABridgeFrame,
    NotifyCorrelationId,
    NullProtocolId,
    ProtocolUnsupported,
    ResumeRefused,
    SafetyLabelMalformed,
    SafetyPolicyViolation,
    StreamControlLength,
    StreamControlMalformed,
    StreamControlMisplaced,
    StreamControlMissing,
    StreamControlUndefined,
    StreamControlVersion,
    TransportErrorCode,
)
from iobridge.npamp.errors import LocalProtocolError
from iobridge.npamp.wire.tlv import TLV_HEADER_SIZE, TlvType, pull_tlv, push_tlv

__all__ = [
    "BRIDGE_CHANNEL",
    "FRAME_MESSAGE_KIND",
    "STREAM_CONTROL_LENGTH",
    "STREAM_CONTROL_VERSION",
    "BridgeEnvelope",
    "BridgeErrorBody",
    "BridgeFrameType",
    "BridgeMessage",
    "BridgeProtocolError",
    "ContentType",
    "ContentTypeUnsupported",
    "Control",
    "CorrelationIdMissing",
    "DuplicateBridgeTlv",
    "Effect",
    "EnvelopeMalformed",
    "EnvelopeMissing",
    "EnvelopeNotFirst",
    "EnvelopeTlvOverrun",
    "EnvelopeTrailingOctets",
    "EnvelopeValueTruncated",
    "InvalidBridgeMessage",
    "MessageKind",
    "MessageKindMismatch",
    "MethodNotUtf8",
    "MethodOnStreamFrame",
    "MethodUnsupported",
    "NotABridgeFrame",
    "NotifyCorrelationId",
    "NullProtocolId",
    "ProtocolUnsupported",
    "ResumeRefused",
    "SafetyLabel",
    "SafetyLabelMalformed",
    "SafetyPolicyViolation",
    "StreamControl",
    "StreamControlLength",
    "StreamControlMalformed",
    "StreamControlMisplaced",
    "StreamControlMissing",
    "StreamControlUndefined",
    "StreamControlVersion",
    "TransportErrorCode",
    "correlates",
    "error_reply",
    "peek_data_stream_control",
    "pull_bridge_error_body",
    "pull_bridge_message",
    "pull_envelope",
    "pull_safety_label",
    "pull_stream_control",
    "push_bridge_error_body",
    "push_bridge_message",
    "push_envelope",
    "push_safety_label",
    "push_stream_control",
    "recover_envelope",
]

#: The Bridge channel (core channel registry; NPAMP-BRIDGE §1).
BRIDGE_CHANNEL = 0x000D
#: StreamControl Value is fixed at 11 octets (NPAMP-CC-STREAM §5.2).
STREAM_CONTROL_LENGTH = 11
#: The only StreamControl version defined (NPAMP-CC-STREAM §5.2).
STREAM_CONTROL_VERSION = 0x01

_ENVELOPE_FLAG_FINAL = 0x01
_SC_FLAG_RESUMABLE = 0x01
_SC_FLAG_CANCEL_ACK = 0x02
_MAX_U64 = (1 << 64) - 1
_TL = struct.Struct(">HH")
_SC = struct.Struct(">BBBQ")
#: The whole StreamControl TLV: type, length, then the value above.
_SC_TLV = struct.Struct(">HHBBBQ")


class BridgeFrameType(IntEnum):
    """Bridge-channel frame types (NPAMP-BRIDGE §2)."""

    #: A foreign request expecting a reply (or a stream).
    BRIDGE_REQUEST = 0x0100
    #: A successful single reply.
    BRIDGE_RESPONSE = 0x0101
    #: A failed reply: foreign error object or N-PAMP transport error.
    BRIDGE_ERROR = 0x0102
    #: A one-way message; never answered.
    BRIDGE_NOTIFY = 0x0103
    #: One event of a streamed reply.
    BRIDGE_STREAM_DATA = 0x0104
    #: Terminates a stream (``final`` set); also the upstream cancel (CC-STREAM §7.1).
    BRIDGE_STREAM_END = 0x0105


class MessageKind(IntEnum):
    """BridgeEnvelope ``message_kind`` (NPAMP-BRIDGE §4)."""

    REQUEST = 0x01
    RESPONSE = 0x02
    NOTIFICATION = 0x03
    ERROR = 0x04
    STREAM_DATA = 0x05
    STREAM_END = 0x06


#: The one message_kind each frame type must carry. Not arithmetic: ERROR↔4, NOTIFY↔3.
FRAME_MESSAGE_KIND: dict[BridgeFrameType, MessageKind] = {
    BridgeFrameType.BRIDGE_REQUEST: MessageKind.REQUEST,
    BridgeFrameType.BRIDGE_RESPONSE: MessageKind.RESPONSE,
    BridgeFrameType.BRIDGE_ERROR: MessageKind.ERROR,
    BridgeFrameType.BRIDGE_NOTIFY: MessageKind.NOTIFICATION,
    BridgeFrameType.BRIDGE_STREAM_DATA: MessageKind.STREAM_DATA,
    BridgeFrameType.BRIDGE_STREAM_END: MessageKind.STREAM_END,
}


class ContentType(IntEnum):
    """Foreign-message encodings (NPAMP-BRIDGE §4)."""

    JSON = 0x01
    CBOR = 0x02
    GRPC_PROTO = 0x03


class Control(IntEnum):
    """StreamControl ``control`` selector (NPAMP-CC-STREAM §5.2); 0x03-0xFF are reserved."""

    #: An event-bearing frame; we also send it on a natural END and on a cancel_ack END.
    DATA = 0x00
    #: Resume request, carried on a BRIDGE_REQUEST (§6.2).
    RESUME = 0x01
    #: Consumer cancel, carried on an upstream BRIDGE_STREAM_END (§7.1).
    CANCEL = 0x02


class Effect(IntEnum):
    """SafetyLabel ``effect`` classes, least to most severe (NPAMP-BRIDGE §7)."""

    READ_ONLY = 0x00
    IDEMPOTENT_WRITE = 0x01
    NON_IDEMPOTENT_WRITE = 0x02
    DESTRUCTIVE = 0x03


# --- value objects -------------------------------------------------------------------------


def _check_u8(name: str, value: int) -> None:
    if not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"{name} {value!r} does not fit in u8")


def _check_short_text(name: str, value: str) -> None:
    """A u8-length-prefixed UTF-8 field: must encode and fit in 255 octets."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"{name} is not encodable as UTF-8") from exc
    if size > 0xFF:
        raise LocalProtocolError(f"{name} is longer than 255 octets")


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeEnvelope:
    """The BridgeEnvelope TLV value (type 0x0010, NPAMP-BRIDGE §4).

    Construction checks only what the octets can hold; protocol rules (null protocol_id, kind
    agreement, correlation) are checked against the frame in :func:`pull_bridge_message`.
    """

    #: Foreign protocol (NPAMP-REG): 0x35 is AG-UI, provisionally.
    protocol_id: int
    #: What this message is; must agree with the frame type.
    message_kind: int
    #: Foreign-message encoding (:class:`ContentType`).
    content_type: int
    #: Raw flags octet; bit 0 is ``final``, reserved bits are kept so round trips are exact.
    flags: int = 0
    #: Opaque reply-correlation token, 0-255 octets.
    correlation_id: bytes = b""
    #: UTF-8 operation name ("run" for an AG-UI run), empty when not applicable.
    method: str = ""

    def __post_init__(self) -> None:
        for name in ("protocol_id", "message_kind", "content_type", "flags"):
            _check_u8(name, getattr(self, name))
        if len(self.correlation_id) > 0xFF:
            raise LocalProtocolError("correlation_id is longer than 255 octets")
        _check_short_text("method", self.method)

    @property
    def final(self) -> bool:
        """Whether the ``final`` flag (bit 0) is set."""
        return bool(self.flags & _ENVELOPE_FLAG_FINAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamControl:
    """The StreamControl TLV value (type 0x0011, provisional; NPAMP-CC-STREAM §5)."""

    #: Control selector; an int so that a decoded reserved value can still be reported.
    control: int = Control.DATA
    #: Event id of a data/END frame, resume cursor, last consumed (cancel) or tail (ack).
    event_id: int = 0
    #: Producer can re-emit this stream from an event id (§6.1).
    resumable: bool = False
    #: This END acknowledges a cancel (§7.2).
    cancel_ack: bool = False
    #: Format version; only 1 is defined.
    version: int = STREAM_CONTROL_VERSION

    def __post_init__(self) -> None:
        _check_u8("version", self.version)
        _check_u8("control", self.control)
        if not 0 <= self.event_id <= _MAX_U64:
            raise LocalProtocolError(f"event_id {self.event_id!r} does not fit in u64")


@dataclass(frozen=True, slots=True, kw_only=True)
class SafetyLabel:
    """The SafetyLabel TLV value (type 0x0013, NPAMP-BRIDGE §7).

    It states the sender's intent. It is never authorization: see
    :mod:`iobridge.npamp.bridge.safety`.
    """

    #: Most severe side effect the request may cause.
    effect: Effect
    #: Advisory UTF-8 resource hint (an AG-UI threadId or agent id, for instance).
    scope: str = ""

    def __post_init__(self) -> None:
        _check_short_text("SafetyLabel scope", self.scope)


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeMessage:
    """One decoded Bridge-frame plaintext."""

    #: The Bridge frame type (:class:`BridgeFrameType`).
    frame_type: BridgeFrameType
    #: The envelope, always present.
    envelope: BridgeEnvelope
    #: CC-STREAM metadata, when present.
    stream_control: StreamControl | None = None
    #: Safety intent, when present.
    safety_label: SafetyLabel | None = None
    #: The foreign message, octet-for-octet.
    body: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeErrorBody:
    """An N-PAMP transport error in place of a foreign message (NPAMP-BRIDGE §6).

    The spec gives no octet layout; we use the Go reference's ``code u8 || msg_len u8 || msg``.
    """

    #: Which failure below the foreign protocol.
    code: TransportErrorCode
    #: Short UTF-8 reason, at most 255 octets.
    message: str = ""

    def __post_init__(self) -> None:
        _check_short_text("transport error message", self.message)


# --- TLV value codecs ----------------------------------------------------------------------


def push_envelope(envelope: BridgeEnvelope) -> bytes:
    """Encode the BridgeEnvelope as a complete TLV (type 0x0010)."""
    method = envelope.method.encode("utf-8")
    value = (
        bytes(
            (
                envelope.protocol_id,
                envelope.message_kind,
                envelope.content_type,
                envelope.flags,
                len(envelope.correlation_id),
            )
        )
        + envelope.correlation_id
        + bytes((len(method),))
        + method
    )
    return push_tlv(TlvType.BRIDGE_ENVELOPE, value)


def pull_envelope(value: bytes) -> BridgeEnvelope:
    """Decode a BridgeEnvelope TLV value (without its TLV header).

    Raises:
        EnvelopeValueTruncated: Fixed fields, correlation_id or method run past the value.
        EnvelopeTrailingOctets: Octets follow the method.
        MethodNotUtf8: The method is not UTF-8.
    """
    if len(value) < 6:
        raise EnvelopeValueTruncated(f"envelope value of {len(value)} octets, need at least 6")
    corr_len = value[4]
    method_at = 5 + corr_len
    if method_at >= len(value):
        raise EnvelopeValueTruncated(f"corr_len {corr_len} runs past the envelope value")
    method_len = value[method_at]
    end = method_at + 1 + method_len
    if end > len(value):
        raise EnvelopeValueTruncated(f"method_len {method_len} runs past the envelope value")
    if end < len(value):
        raise EnvelopeTrailingOctets(f"{len(value) - end} trailing octets in the envelope")
    try:
        method = value[method_at + 1 : end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MethodNotUtf8("envelope method is not UTF-8") from exc
    return BridgeEnvelope(
        protocol_id=value[0],
        message_kind=value[1],
        content_type=value[2],
        flags=value[3],
        correlation_id=bytes(value[5:method_at]),
        method=method,
    )


def push_stream_control(sc: StreamControl) -> bytes:
    """Encode the StreamControl as a complete TLV (type 0x0011, 11-octet value)."""
    return stream_control_tlv(
        sc.control, sc.event_id, resumable=sc.resumable, cancel_ack=sc.cancel_ack,
        version=sc.version,
    )


def stream_control_tlv(
    control: int,
    event_id: int,
    *,
    resumable: bool = False,
    cancel_ack: bool = False,
    version: int = STREAM_CONTROL_VERSION,
) -> bytes:
    """A StreamControl TLV from its fields (no dataclass: the per-event producer path).

    Raises:
        struct.error: A field does not fit its width (callers pass checked values).
    """
    flags = (_SC_FLAG_RESUMABLE if resumable else 0) | (_SC_FLAG_CANCEL_ACK if cancel_ack else 0)
    return _SC_TLV.pack(TlvType.STREAM_CONTROL, _SC.size, version, control, flags, event_id)


def pull_stream_control(value: bytes) -> StreamControl:
    """Decode a StreamControl TLV value; reserved flag bits are ignored (§5.2).

    Raises:
        StreamControlLength: The value is not exactly 11 octets.
        StreamControlVersion: The version is not 1.
        StreamControlUndefined: The control value is reserved (0x03-0xFF).
    """
    if len(value) != STREAM_CONTROL_LENGTH:
        raise StreamControlLength(f"StreamControl Length {len(value)}, must be 11")
    version, control, flags, event_id = _SC.unpack(value)
    if version != STREAM_CONTROL_VERSION:
        raise StreamControlVersion(f"StreamControl version {version} is not implemented")
    if control not in Control._value2member_map_:
        raise StreamControlUndefined(f"StreamControl control 0x{control:02x} is reserved")
    return StreamControl(
        version=version,
        control=control,
        event_id=event_id,
        resumable=bool(flags & _SC_FLAG_RESUMABLE),
        cancel_ack=bool(flags & _SC_FLAG_CANCEL_ACK),
    )


_SC_TLV_SIZE = _SC_TLV.size
_STREAM_CONTROL_TYPE = int(TlvType.STREAM_CONTROL)
_DATA_CONTROL = int(Control.DATA)
_BRIDGE_TLVS = frozenset({int(TlvType.STREAM_CONTROL), int(TlvType.SAFETY_LABEL)})


def peek_data_stream_control(payload: bytes, pos: int) -> tuple[int, bool, int] | None:
    """The per-event consumer path's reading of a DATA StreamControl TLV at ``pos``.

    Returns:
        ``(event_id, resumable, end)`` when the TLV there is a well-formed version 1 DATA
        StreamControl without cancel_ack and no further Bridge TLV (StreamControl,
        SafetyLabel) follows it; ``None`` otherwise (the caller then runs the full decoder).
    """
    end = pos + _SC_TLV_SIZE
    if len(payload) < end:
        return None
    tlv_type, length, version, control, flags, event_id = _SC_TLV.unpack_from(payload, pos)
    # Plain ints (module constants): IntEnum attribute loads are the cost on this path.
    if (
        tlv_type != _STREAM_CONTROL_TYPE
        or length != STREAM_CONTROL_LENGTH
        or version != STREAM_CONTROL_VERSION
        or control != _DATA_CONTROL
        or flags & _SC_FLAG_CANCEL_ACK
    ):
        return None
    if len(payload) - end >= TLV_HEADER_SIZE and _TL.unpack_from(payload, end)[0] in _BRIDGE_TLVS:
        return None
    return event_id, bool(flags & _SC_FLAG_RESUMABLE), end


def push_safety_label(label: SafetyLabel) -> bytes:
    """Encode the SafetyLabel as a complete TLV (type 0x0013)."""
    scope = label.scope.encode("utf-8")
    return push_tlv(TlvType.SAFETY_LABEL, bytes((label.effect, len(scope))) + scope)


def pull_safety_label(value: bytes) -> SafetyLabel:
    """Decode a SafetyLabel TLV value.

    Raises:
        SafetyLabelMalformed: Truncated, trailing octets, undefined effect, or non-UTF-8 scope.
    """
    if len(value) < 2:
        raise SafetyLabelMalformed(f"SafetyLabel value of {len(value)} octets, need 2")
    effect, scope_len = value[0], value[1]
    if 2 + scope_len != len(value):
        raise SafetyLabelMalformed(f"scope_len {scope_len} disagrees with {len(value) - 2}")
    if effect not in Effect._value2member_map_:
        raise SafetyLabelMalformed(f"SafetyLabel effect 0x{effect:02x} is undefined")
    try:
        scope = value[2:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafetyLabelMalformed("SafetyLabel scope is not UTF-8") from exc
    return SafetyLabel(effect=Effect(effect), scope=scope)


# --- whole payload -------------------------------------------------------------------------

_STREAM_FRAMES = frozenset({BridgeFrameType.BRIDGE_STREAM_DATA, BridgeFrameType.BRIDGE_STREAM_END})
#: Control values each frame type may carry (CC-STREAM §5.2, §6.2, §7; digest §10.4).
_ALLOWED_CONTROL: dict[BridgeFrameType, frozenset[int]] = {
    BridgeFrameType.BRIDGE_REQUEST: frozenset({Control.RESUME}),
    BridgeFrameType.BRIDGE_STREAM_DATA: frozenset({Control.DATA}),
    BridgeFrameType.BRIDGE_STREAM_END: frozenset({Control.DATA, Control.CANCEL}),
}


def _pull_companion_tlv(payload: bytes, pos: int) -> tuple[int, bytes, int]:
    """Read the TLV at ``pos`` through the generic codec; return (type, value, next pos)."""
    tlv_type, length = _TL.unpack_from(payload, pos)
    end = pos + TLV_HEADER_SIZE + length
    if end > len(payload):
        raise EnvelopeTlvOverrun(f"TLV 0x{tlv_type:04x} Length {length} runs past the payload end")
    tlv = pull_tlv(payload[pos:end])
    return tlv.type, tlv.value, end


def _check_rules(msg: BridgeMessage, *, stream_control_required: bool) -> None:
    """Apply the per-frame rules that need the whole message (raises with context attached)."""
    env, ft = msg.envelope, msg.frame_type
    if env.protocol_id == 0x00:
        raise NullProtocolId("protocol_id 0x00 is the null identifier")
    if env.message_kind != FRAME_MESSAGE_KIND[ft]:
        raise MessageKindMismatch(
            f"message_kind 0x{env.message_kind:02x} contradicts frame type {ft.name}"
        )
    if ft is BridgeFrameType.BRIDGE_NOTIFY:
        if env.correlation_id:
            raise NotifyCorrelationId("BRIDGE_NOTIFY must set corr_len = 0")
    elif not env.correlation_id:
        raise CorrelationIdMissing(f"{ft.name} needs a non-empty correlation_id")
    sc = msg.stream_control
    if sc is None:
        if stream_control_required and ft in _STREAM_FRAMES:
            raise StreamControlMissing(f"{ft.name} of a CC-STREAM stream lacks StreamControl")
        return
    if sc.control not in _ALLOWED_CONTROL.get(ft, frozenset()):
        raise StreamControlMisplaced(f"StreamControl control {sc.control} on {ft.name}")
    downstream_end = ft is BridgeFrameType.BRIDGE_STREAM_END and sc.control == Control.DATA
    if sc.cancel_ack and not downstream_end:
        raise StreamControlMisplaced("cancel_ack is only valid on a downstream BRIDGE_STREAM_END")


def pull_bridge_message(
    frame_type: int, payload: bytes, *, stream_control_required: bool = False
) -> BridgeMessage:
    """Decode the plaintext of one Bridge frame.

    Args:
        frame_type: The frame header's type.
        payload: The decrypted payload region.
        stream_control_required: True for streams carried under NPAMP-CC-STREAM, where
            every BRIDGE_STREAM_DATA/END must carry StreamControl.

    Returns:
        The message; ``body`` is the foreign message, untouched.

    Raises:
        EnvelopeMalformed: One of its subclasses names the rule; ``frame_type`` and, once
            parsed, ``envelope`` are attached for :func:`error_reply`.
    """
    try:
        ft = BridgeFrameType(frame_type)
    except ValueError:
        exc = NotABridgeFrame(
            f"frame type 0x{frame_type:04x} is not a Bridge frame", frame_type=frame_type
        )
        exc.recovered = recover_envelope(payload)
        raise exc from None
    envelope: BridgeEnvelope | None = None
    try:
        if len(payload) < TLV_HEADER_SIZE:
            raise EnvelopeMissing("payload too short to hold the BridgeEnvelope TLV")
        if _TL.unpack_from(payload, 0)[0] != TlvType.BRIDGE_ENVELOPE:
            raise EnvelopeNotFirst("the first TLV is not the BridgeEnvelope (0x0010)")
        _, value, pos = _pull_companion_tlv(payload, 0)
        envelope = pull_envelope(value)
        found: dict[int, bytes] = {}
        while len(payload) - pos >= TLV_HEADER_SIZE:
            tlv_type = _TL.unpack_from(payload, pos)[0]
            if tlv_type not in (TlvType.STREAM_CONTROL, TlvType.SAFETY_LABEL):
                break
            if tlv_type in found:
                raise DuplicateBridgeTlv(f"TLV 0x{tlv_type:04x} appears twice")
            _, found[tlv_type], pos = _pull_companion_tlv(payload, pos)
        sc_value = found.get(TlvType.STREAM_CONTROL)
        sl_value = found.get(TlvType.SAFETY_LABEL)
        msg = BridgeMessage(
            frame_type=ft,
            envelope=envelope,
            stream_control=None if sc_value is None else pull_stream_control(sc_value),
            safety_label=None if sl_value is None else pull_safety_label(sl_value),
            body=bytes(payload[pos:]),
        )
        _check_rules(msg, stream_control_required=stream_control_required)
    except BridgeProtocolError as exc:
        exc.frame_type = ft
        exc.envelope = envelope
        exc.recovered = envelope if envelope is not None else recover_envelope(payload)
        raise
    return msg


def recover_envelope(payload: bytes) -> BridgeEnvelope | None:
    """Read what can be read of a malformed payload's envelope, to answer the rejection.

    Walks the leading Bridge TLVs (0x0010, 0x0011, 0x0013, whatever their order: a SafetyLabel
    before the envelope is still answerable) to the BridgeEnvelope and takes its fixed fields
    and its correlation_id if that is wholly present (else empty). Never raises.

    Returns:
        A best-effort envelope (``method`` always empty), or ``None`` when no envelope TLV
        starts where one could.
    """
    pos = 0
    while len(payload) - pos >= TLV_HEADER_SIZE:
        tlv_type, length = _TL.unpack_from(payload, pos)
        start = pos + TLV_HEADER_SIZE
        if tlv_type == TlvType.BRIDGE_ENVELOPE:
            value = payload[start : start + length]
            fixed = bytes(value[:4]).ljust(4, b"\x00")
            corr_len = value[4] if len(value) > 4 else 0
            corr = bytes(value[5 : 5 + corr_len])
            return BridgeEnvelope(
                protocol_id=fixed[0],
                message_kind=fixed[1],
                content_type=fixed[2],
                flags=fixed[3],
                correlation_id=corr if len(corr) == corr_len else b"",
            )
        if tlv_type not in (TlvType.STREAM_CONTROL, TlvType.SAFETY_LABEL):
            return None
        pos = start + length
    return None


def push_bridge_message(msg: BridgeMessage, *, stream_control_required: bool = False) -> bytes:
    """Encode a Bridge plaintext: envelope, StreamControl, SafetyLabel, foreign message.

    Raises:
        InvalidBridgeMessage: The message breaks a rule the receiver would reject it for.
    """
    try:
        _check_rules(msg, stream_control_required=stream_control_required)
    except BridgeProtocolError as exc:
        raise InvalidBridgeMessage(f"refusing to send: {exc}") from exc
    parts = [push_envelope(msg.envelope)]
    if msg.stream_control is not None:
        parts.append(push_stream_control(msg.stream_control))
    if msg.safety_label is not None:
        parts.append(push_safety_label(msg.safety_label))
    parts.append(msg.body)
    return b"".join(parts)


def correlates(request: BridgeEnvelope, reply: BridgeEnvelope) -> bool:
    """Whether ``reply`` answers ``request``: both ids non-empty and byte-equal (§5)."""
    return bool(request.correlation_id) and request.correlation_id == reply.correlation_id


# --- transport errors ----------------------------------------------------------------------


def push_bridge_error_body(err: BridgeErrorBody) -> bytes:
    """Encode a transport error as ``code u8 || msg_len u8 || msg``."""
    msg = err.message.encode("utf-8")
    return bytes((err.code, len(msg))) + msg


def pull_bridge_error_body(body: bytes) -> BridgeErrorBody | None:
    """Read a BRIDGE_ERROR body as a transport error, or ``None`` for a foreign error object.

    A transport error starts with a code 1-6 and is exactly ``2 + msg_len`` octets of which
    the message is UTF-8; anything else (a JSON object starts with ``{``) is foreign and must
    be carried verbatim (NPAMP-BRIDGE §6; digest §10.10).
    """
    if len(body) < 2 or body[0] not in TransportErrorCode._value2member_map_:
        return None
    if len(body) != 2 + body[1]:
        return None
    try:
        message = body[2:].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return BridgeErrorBody(code=TransportErrorCode(body[0]), message=message)


#: Frame types whose rejection is answered: a request, or a stream frame (the consumer rejects a
#: bad stream frame upstream, digest §10.9). Replies and notifications never are (§2, §8).
_ANSWERED = frozenset(
    {
        BridgeFrameType.BRIDGE_REQUEST,
        BridgeFrameType.BRIDGE_STREAM_DATA,
        BridgeFrameType.BRIDGE_STREAM_END,
    }
)
#: Channel-specific frame types start here (NPAMP-BRIDGE §2); lower ones are core or companion.
_CHANNEL_SPECIFIC = 0x0100


def error_reply(
    exc: BridgeProtocolError, *, protocol_id: int | None = None
) -> tuple[BridgeFrameType, bytes] | None:
    """Build the BRIDGE_ERROR a rejected frame calls for, or ``None`` to drop it silently.

    Rejecting is answering (NPAMP-BRIDGE §4): a request, a stream frame, or a frame of an
    undefined Bridge type (0x0106 and up) that holds an envelope is answered even when that
    envelope is absent (for the first two),
    truncated, not first or has trailing octets, echoing whatever correlation_id could be
    recovered (empty when none). Replies (RESPONSE, ERROR) and notifications are never
    answered (§2, §8), so two peers cannot loop on errors.

    Args:
        exc: The rejection.
        protocol_id: The protocol_id this side carries on the channel. The reply echoes the
            frame's own protocol_id when it is a valid one; for the null id 0x00 (or none
            readable) it carries this one instead, because 0x00 "MUST NOT be used as a
            protocol_id" (NPAMP-REG §4). Without one (no agreement with the peer, so no id
            may be emitted, NPAMP-REG §7.1) such a frame cannot be answered validly: dropped.

    Returns:
        ``(BRIDGE_ERROR, payload)`` or ``None``.
    """
    ft = exc.frame_type
    env = exc.envelope if exc.envelope is not None else exc.recovered
    if ft is None or ft < _CHANNEL_SPECIFIC:
        return None  # core and companion frame types keep their own meaning (§2)
    undefined = ft > BridgeFrameType.BRIDGE_STREAM_END
    if not (ft in _ANSWERED or (undefined and env is not None)):
        return None
    reply_id = env.protocol_id if env is not None and env.protocol_id else protocol_id
    if reply_id is None:
        return None
    content_type = ContentType.JSON
    if env is not None and env.content_type in ContentType._value2member_map_:
        content_type = ContentType(env.content_type)
    reason = str(exc).encode("utf-8")[:255].decode("utf-8", "ignore")
    envelope = BridgeEnvelope(
        protocol_id=reply_id,
        message_kind=MessageKind.ERROR,
        content_type=content_type,
        correlation_id=b"" if env is None else env.correlation_id,
    )
    body = push_bridge_error_body(BridgeErrorBody(code=exc.transport_code, message=reason))
    if not envelope.correlation_id:
        # Nothing to echo: the empty id is the only honest answer, and it is the one reply
        # the send-side check (which insists on an id) must let through.
        return BridgeFrameType.BRIDGE_ERROR, push_envelope(envelope) + body
    msg = BridgeMessage(frame_type=BridgeFrameType.BRIDGE_ERROR, envelope=envelope, body=body)
    return BridgeFrameType.BRIDGE_ERROR, push_bridge_message(msg)
