"""Errors and transport-error codes of the NPAMP-BRIDGE / NPAMP-CC-STREAM layer.

Every rejection rule is its own class carrying the transport error it is answered with
(``transport_code``) and, once known, the offending frame's type and envelope, so that
:func:`iobridge.npamp.bridge.error_reply` can build the BRIDGE_ERROR. The tree is drawn in
:mod:`iobridge.npamp.bridge.envelope`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar

from iobridge.npamp.errors import LocalProtocolError, RemoteProtocolError, Reply

if TYPE_CHECKING:
    from iobridge.npamp.bridge.envelope import BridgeEnvelope

__all__ = [
    "BridgeProtocolError",
    "ContentTypeUnsupported",
    "CorrelationIdMissing",
    "DuplicateBridgeTlv",
    "EnvelopeMalformed",
    "EnvelopeMissing",
    "EnvelopeNotFirst",
    "EnvelopeTlvOverrun",
    "EnvelopeTrailingOctets",
    "EnvelopeValueTruncated",
    "InvalidBridgeMessage",
    "MessageKindMismatch",
    "MethodNotUtf8",
    "MethodOnStreamFrame",
    "MethodUnsupported",
    "NotABridgeFrame",
    "NotifyCorrelationId",
    "NullProtocolId",
    "ProtocolUnsupported",
    "ResumeRefused",
    "SafetyLabelMalformed",
    "SafetyPolicyViolation",
    "StreamControlLength",
    "StreamControlMalformed",
    "StreamControlMisplaced",
    "StreamControlMissing",
    "StreamControlUndefined",
    "StreamControlVersion",
    "TransportErrorCode",
]


class TransportErrorCode(IntEnum):
    """N-PAMP transport errors carried in a BRIDGE_ERROR (NPAMP-BRIDGE §6, CC-STREAM §6.4)."""

    #: The BridgeEnvelope (or a companion TLV around it) is missing or invalid.
    ENVELOPE_MALFORMED = 1
    #: ``protocol_id`` is not carried by this peer.
    PROTOCOL_UNSUPPORTED = 2
    #: The foreign operation is recognised but not carried.
    METHOD_UNSUPPORTED = 3
    #: The foreign endpoint did not accept the message; never report success instead.
    NOT_DELIVERED = 4
    #: Refused by a local safety policy.
    SAFETY_POLICY = 5
    #: The stream cannot be continued from the cursor and cannot be restarted.
    NOT_RESUMABLE = 6


class BridgeProtocolError(RemoteProtocolError):
    """A Bridge frame the peer sent must be refused; the association itself survives.

    Attributes:
        transport_code: The transport error to answer with (see :func:`error_reply`).
        frame_type: Frame type of the offending frame, when known.
        envelope: The envelope, when it was parsed before the rule failed; needed to echo.
        recovered: When the envelope itself is malformed, the fields that could still be read
            from it (a correlation_id only if it is wholly present, else empty), so that the
            rejection can still be answered and correlated (NPAMP-BRIDGE §4).
    """

    transport_code: ClassVar[TransportErrorCode] = TransportErrorCode.ENVELOPE_MALFORMED
    reply = Reply.DROP

    def __init__(
        self,
        message: str = "",
        *,
        frame_type: int | None = None,
        envelope: BridgeEnvelope | None = None,
    ) -> None:
        super().__init__(message)
        self.frame_type = frame_type
        self.envelope = envelope
        self.recovered: BridgeEnvelope | None = None


class EnvelopeMalformed(BridgeProtocolError):
    """The BridgeEnvelope TLV, or a Bridge TLV around it, is missing or invalid (code 1)."""


class NotABridgeFrame(EnvelopeMalformed):
    """Frame type is not one of BRIDGE_* 0x0100-0x0105 (corpus tc16)."""


class EnvelopeMissing(EnvelopeMalformed):
    """The payload is too short to hold any TLV, so the envelope is absent (§4)."""


class EnvelopeNotFirst(EnvelopeMalformed):
    """The first TLV is not the BridgeEnvelope (§3; corpus tc7)."""


class EnvelopeTlvOverrun(EnvelopeMalformed):
    """A Bridge TLV's Length runs past the end of the payload (corpus tc8)."""


class EnvelopeValueTruncated(EnvelopeMalformed):
    """corr_len or method_len runs past the envelope value (corpus tc9)."""


class EnvelopeTrailingOctets(EnvelopeMalformed):
    """The envelope value holds octets after the method (corpus tc14)."""


class MethodNotUtf8(EnvelopeMalformed):
    """The method field is not valid UTF-8 (§4)."""


class NullProtocolId(EnvelopeMalformed):
    """protocol_id 0x00 is the null identifier: malformed, not unsupported (NPAMP-REG §4)."""


class MessageKindMismatch(EnvelopeMalformed):
    """message_kind contradicts the frame type (§4; corpus tc10)."""


class CorrelationIdMissing(EnvelopeMalformed):
    """A request or reply carries an empty correlation_id (§5; corpus tc11, tc13)."""


class NotifyCorrelationId(EnvelopeMalformed):
    """A BRIDGE_NOTIFY carries a non-empty correlation_id (§5, §8; corpus tc12)."""


class DuplicateBridgeTlv(EnvelopeMalformed):
    """StreamControl or SafetyLabel appears twice in one payload."""


class ContentTypeUnsupported(EnvelopeMalformed):
    """content_type is not one this carriage accepts (NPAMP-CC-OPAQUE; digest §10.14)."""


class MethodOnStreamFrame(EnvelopeMalformed):
    """A stream frame carries a method; AG-UI pins method_len 0 there (MAP-AGUI §4.2)."""


class SafetyLabelMalformed(EnvelopeMalformed):
    """A present SafetyLabel is truncated, overlong, non-UTF-8 or has an undefined effect."""


class StreamControlMalformed(EnvelopeMalformed):
    """The StreamControl TLV is invalid (NPAMP-CC-STREAM §5.2, §9)."""


class StreamControlLength(StreamControlMalformed):
    """StreamControl Length is not 11 (truncated or overlong)."""


class StreamControlVersion(StreamControlMalformed):
    """StreamControl version is not one we implement (only 1)."""


class StreamControlUndefined(StreamControlMalformed):
    """StreamControl control is a reserved value 0x03-0xFF."""


class StreamControlMissing(StreamControlMalformed):
    """A stream frame of a CC-STREAM stream lacks its StreamControl TLV (§4)."""


class StreamControlMisplaced(StreamControlMalformed):
    """The control value or cancel_ack flag does not fit the frame type (§5.2, §6.2, §7)."""


class ProtocolUnsupported(BridgeProtocolError):
    """protocol_id is not carried by this peer (code 2; NPAMP-REG §9)."""

    transport_code = TransportErrorCode.PROTOCOL_UNSUPPORTED


class MethodUnsupported(BridgeProtocolError):
    """The foreign operation is not carried (code 3)."""

    transport_code = TransportErrorCode.METHOD_UNSUPPORTED


class SafetyPolicyViolation(BridgeProtocolError):
    """The request's effect exceeds what local policy allows this principal (code 5)."""

    transport_code = TransportErrorCode.SAFETY_POLICY


class ResumeRefused(BridgeProtocolError):
    """A resume request that cannot be honoured: cancelled, live or unknown (code 6)."""

    transport_code = TransportErrorCode.NOT_RESUMABLE


class InvalidBridgeMessage(LocalProtocolError):
    """We tried to emit a Bridge message that breaks a rule a receiver enforces."""
