"""The N-PAMP error tree and its local error-code registry.

Every failure a core detects is raised as one of these classes; no other exception type may
escape ``iobridge.npamp`` (anything else is a bug). Lower-level exceptions (``struct.error``,
``IndexError``, ``ValueError``, ``InvalidTag``...) are translated at the decoding boundary with
:func:`map_exceptions`, chained with ``from``.

The hierarchy::

    NpampError                       (abstract root, carries .code and .reply)
    ├── LocalProtocolError           we (the local API user) broke a rule
    │   ├── InvalidState             call not allowed in the current state / after ERROR
    │   ├── SequenceExhausted        next send would wrap u64 seq; KEY_UPDATE first
    │   ├── PayloadTooLarge          payload exceeds a wire or configured limit
    │   ├── HandshakeTimeout         a handshake step timed out (shell)
    │   └── TransportError           TLS/ALPN/socket failure in the asyncio shell
    └── RemoteProtocolError          the peer sent something invalid
        ├── FrameDecodeError         malformed frame header or payload region
        │   ├── CrcMismatch
        │   ├── BadMagic
        │   ├── UnsupportedVersion
        │   ├── ReservedNotZero
        │   ├── ForbiddenFrameType
        │   ├── ForbiddenChannel
        │   ├── FrameTooLarge
        │   └── UnsupportedFlag      COMP/FRAG (no algorithm defined anywhere)
        ├── TlvDecodeError
        │   └── UnknownCriticalTlv
        ├── AeadFailure              tag check failed (wrong key, flipped bit, ...)
        ├── UnencryptedFrame         cleartext frame after the handshake
        ├── SequenceError
        │   ├── ReplayedSequence     seq lower than expected
        │   ├── SequenceGap          seq higher than expected (skipped/out of order)
        │   └── SequenceWrapped      peer sent past the end of the u64 space
        ├── UnexpectedFrame          frame not allowed in this state / on this channel
        ├── KeyUpdateError           bad KEY_UPDATE / KEY_UPDATE_ACK marker
        ├── PeerReportedError        the peer sent an ERROR frame
        └── HandshakeFailure         base class for the handshake module's errors

N-PAMP itself assigns no numeric core error codes (the ERROR frame payload is undefined), so
:class:`ErrorCode` is this implementation's own registry. The Bridge transport error codes are
defined separately by the Bridge layer, which subclasses these bases.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum, IntEnum
from typing import ClassVar

from cryptography.exceptions import InvalidTag

__all__ = [
    "AeadFailure",
    "BadMagic",
    "CrcMismatch",
    "ErrorCode",
    "ForbiddenChannel",
    "ForbiddenFrameType",
    "FrameDecodeError",
    "FrameTooLarge",
    "HandshakeFailure",
    "HandshakeTimeout",
    "InvalidState",
    "KeyUpdateError",
    "LocalProtocolError",
    "NpampError",
    "PayloadTooLarge",
    "PeerReportedError",
    "RemoteProtocolError",
    "ReplayedSequence",
    "Reply",
    "ReservedNotZero",
    "SequenceError",
    "SequenceExhausted",
    "SequenceGap",
    "SequenceWrapped",
    "TlvDecodeError",
    "TransportError",
    "UnencryptedFrame",
    "UnexpectedFrame",
    "UnknownCriticalTlv",
    "UnsupportedFlag",
    "UnsupportedVersion",
    "map_exceptions",
]


class ErrorCode(IntEnum):
    """Local registry of N-PAMP failure codes (not assigned by the spec)."""

    #: No error (graceful close).
    NO_ERROR = 0x00
    #: A bug or unexpected condition inside this implementation.
    INTERNAL_ERROR = 0x01
    #: Generic protocol violation.
    PROTOCOL_ERROR = 0x02
    #: Malformed frame (truncated header, payload length mismatch...).
    FRAME_DECODE_ERROR = 0x03
    #: CRC32C over header octets 0-20 did not match (draft §4).
    CRC_MISMATCH = 0x04
    #: Magic was not "NPAM".
    BAD_MAGIC = 0x05
    #: Version nibble was not 2.
    UNSUPPORTED_VERSION = 0x06
    #: One of the 11 reserved header octets was non-zero.
    RESERVED_NOT_ZERO = 0x07
    #: Frame type 0x0000 (MUST NOT be used).
    FORBIDDEN_FRAME_TYPE = 0x08
    #: Channel 0xFFFF (MUST NOT appear on the wire) or a channel not in use.
    FORBIDDEN_CHANNEL = 0x09
    #: Payload length above the configured cap.
    FRAME_TOO_LARGE = 0x0A
    #: COMP or FRAG flag set; neither has a defined algorithm.
    UNSUPPORTED_FLAG = 0x0B
    #: Malformed TLV.
    TLV_DECODE_ERROR = 0x0C
    #: Unknown TLV with the critical bit 0x8000 set.
    UNKNOWN_CRITICAL_TLV = 0x0D
    #: AEAD authentication failed.
    AEAD_FAILURE = 0x0E
    #: Cleartext frame where ENC is required.
    UNENCRYPTED_FRAME = 0x0F
    #: Sequence number already used (replay).
    REPLAYED_SEQUENCE = 0x10
    #: Sequence number skipped ahead.
    SEQUENCE_GAP = 0x11
    #: Sequence space of the epoch is exhausted.
    SEQUENCE_EXHAUSTED = 0x12
    #: Frame type not allowed in the current state or on this channel.
    UNEXPECTED_FRAME = 0x13
    #: Bad KEY_UPDATE / KEY_UPDATE_ACK.
    KEY_UPDATE_ERROR = 0x14
    #: Local API misuse: call not valid in the current state.
    INVALID_STATE = 0x15
    #: Payload too large to send.
    PAYLOAD_TOO_LARGE = 0x16
    #: The peer kept sending after the last sequence number of the epoch.
    SEQUENCE_WRAPPED = 0x17
    #: The peer reported an error with an ERROR frame.
    PEER_ERROR = 0x18
    #: Handshake failed (generic; the handshake module refines it).
    HANDSHAKE_FAILURE = 0x20
    #: No common profile / KEM / signature / AEAD, or a downgrade was detected.
    NEGOTIATION_FAILURE = 0x21
    #: CertVerify or Finished did not verify.
    AUTHENTICATION_FAILURE = 0x22
    #: The peer's identity key is not the pinned/allowed one.
    UNTRUSTED_PEER = 0x23
    #: A handshake step did not finish in time.
    HANDSHAKE_TIMEOUT = 0x24
    #: TLS / ALPN / socket failure below N-PAMP.
    TRANSPORT_ERROR = 0x30


class Reply(Enum):
    """What the side that detected an error should do about it."""

    #: Drop the offending frame, keep the association.
    DROP = "drop"
    #: Send an ERROR frame (if keys allow), then close the association.
    ERROR_AND_CLOSE = "error_and_close"
    #: Tear down the transport at once: integrity of the stream is lost.
    ABORT = "abort"
    #: Nothing to send: a local misuse; the association state is unchanged or already closed.
    NONE = "none"


class NpampError(Exception):
    """Root of every error raised by ``iobridge.npamp``.

    Attributes:
        code: The :class:`ErrorCode` of this failure.
        reply: The reply the detecting side should make.
    """

    code: ClassVar[ErrorCode] = ErrorCode.PROTOCOL_ERROR
    reply: ClassVar[Reply] = Reply.ERROR_AND_CLOSE

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)

    @property
    def message(self) -> str:
        """Human-readable reason."""
        return str(self.args[0])


class LocalProtocolError(NpampError):
    """We, the local side, tried to do something the protocol forbids."""

    reply: ClassVar[Reply] = Reply.NONE


class RemoteProtocolError(NpampError):
    """The peer sent something the protocol forbids."""


# --- local ---------------------------------------------------------------------------------


class InvalidState(LocalProtocolError):
    """The call is not valid in the current association state."""

    code = ErrorCode.INVALID_STATE


class SequenceExhausted(LocalProtocolError):
    """Sending would wrap the u64 sequence number within one key epoch; KEY_UPDATE first."""

    code = ErrorCode.SEQUENCE_EXHAUSTED


class PayloadTooLarge(LocalProtocolError):
    """The payload exceeds a wire field or the configured frame cap."""

    code = ErrorCode.PAYLOAD_TOO_LARGE


class HandshakeTimeout(LocalProtocolError):
    """A handshake step did not complete in the configured time."""

    code = ErrorCode.HANDSHAKE_TIMEOUT
    reply = Reply.ABORT


class TransportError(LocalProtocolError):
    """TLS, ALPN or socket failure below N-PAMP."""

    code = ErrorCode.TRANSPORT_ERROR
    reply = Reply.ABORT


# --- remote: frame header ------------------------------------------------------------------


class FrameDecodeError(RemoteProtocolError):
    """The frame is malformed."""

    code = ErrorCode.FRAME_DECODE_ERROR
    reply = Reply.ABORT


class CrcMismatch(FrameDecodeError):
    """The header CRC32C does not match octets 0-20."""

    code = ErrorCode.CRC_MISMATCH


class BadMagic(FrameDecodeError):
    """The header does not start with "NPAM"."""

    code = ErrorCode.BAD_MAGIC


class UnsupportedVersion(FrameDecodeError):
    """The header version nibble is not 2."""

    code = ErrorCode.UNSUPPORTED_VERSION


class ReservedNotZero(FrameDecodeError):
    """A reserved header octet is non-zero."""

    code = ErrorCode.RESERVED_NOT_ZERO


class ForbiddenFrameType(FrameDecodeError):
    """Frame type 0x0000 must never be used."""

    code = ErrorCode.FORBIDDEN_FRAME_TYPE


class ForbiddenChannel(FrameDecodeError):
    """Channel 0xFFFF must never appear on the wire."""

    code = ErrorCode.FORBIDDEN_CHANNEL


class FrameTooLarge(FrameDecodeError):
    """The payload length exceeds the configured cap."""

    code = ErrorCode.FRAME_TOO_LARGE


class UnsupportedFlag(FrameDecodeError):
    """COMP or FRAG is set; no compression or fragmentation is defined."""

    code = ErrorCode.UNSUPPORTED_FLAG
    reply = Reply.ERROR_AND_CLOSE


# --- remote: TLV, AEAD, sequence, state ----------------------------------------------------


class TlvDecodeError(RemoteProtocolError):
    """A TLV is truncated or its length disagrees with the data."""

    code = ErrorCode.TLV_DECODE_ERROR


class UnknownCriticalTlv(TlvDecodeError):
    """An unknown TLV type with the critical bit 0x8000 set."""

    code = ErrorCode.UNKNOWN_CRITICAL_TLV


class AeadFailure(RemoteProtocolError):
    """The AEAD tag did not verify: wrong key, wrong nonce, or tampered octets."""

    code = ErrorCode.AEAD_FAILURE
    reply = Reply.ABORT


class UnencryptedFrame(RemoteProtocolError):
    """A cleartext frame arrived where ENC is required."""

    code = ErrorCode.UNENCRYPTED_FRAME
    reply = Reply.ABORT


class SequenceError(RemoteProtocolError):
    """The sequence number is not the one expected next."""

    code = ErrorCode.PROTOCOL_ERROR
    reply = Reply.ABORT


class ReplayedSequence(SequenceError):
    """The sequence number was already used in this epoch (replay)."""

    code = ErrorCode.REPLAYED_SEQUENCE


class SequenceGap(SequenceError):
    """The sequence number skips ahead of the expected one."""

    code = ErrorCode.SEQUENCE_GAP


class SequenceWrapped(SequenceError):
    """The peer sent past the last sequence number of the epoch without a KEY_UPDATE."""

    code = ErrorCode.SEQUENCE_WRAPPED


class UnexpectedFrame(RemoteProtocolError):
    """The frame type is not allowed in the current state or on this channel."""

    code = ErrorCode.UNEXPECTED_FRAME


class KeyUpdateError(RemoteProtocolError):
    """A KEY_UPDATE or KEY_UPDATE_ACK carried a bad or unexpected epoch marker."""

    code = ErrorCode.KEY_UPDATE_ERROR


class PeerReportedError(RemoteProtocolError):
    """The peer sent an ERROR frame and ended the association."""

    code = ErrorCode.PEER_ERROR
    reply = Reply.NONE


class HandshakeFailure(RemoteProtocolError):
    """The handshake failed; the handshake module raises subclasses of this."""

    code = ErrorCode.HANDSHAKE_FAILURE
    reply = Reply.ABORT


@contextmanager
def map_exceptions(
    target: type[NpampError] = FrameDecodeError, what: str = "decode failed"
) -> Iterator[None]:
    """Re-raise low-level decoding exceptions as ``target`` (``InvalidTag`` as AeadFailure).

    Args:
        target: The N-PAMP error class to raise for structural failures.
        what: Prefix of the error message.

    Raises:
        AeadFailure: For ``cryptography.exceptions.InvalidTag``.
        NpampError: ``target`` for ``struct.error``, ``IndexError``, ``ValueError`` (which
            includes ``UnicodeDecodeError``) and ``OverflowError``.
    """
    try:
        yield
    except NpampError:
        raise
    except InvalidTag as exc:
        raise AeadFailure(f"{what}: authentication tag mismatch") from exc
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise target(f"{what}: {exc}") from exc
