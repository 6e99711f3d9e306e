"""Events an N-PAMP association reports to its user (past-tense protocol facts).

:meth:`~iobridge.npamp.association.connection.NpampConnection.receive_data` returns a list of
these. They are frozen, keyword-only, slotted dataclasses; they validate on construction, carry
no behaviour and are not meant to be subclassed. :class:`HandshakeCompleted` is defined by the
handshake module and re-exported here so that every association event has one import path.
"""

from __future__ import annotations

from dataclasses import dataclass

from iobridge.npamp.errors import LocalProtocolError, NpampError
from iobridge.npamp.handshake.machine import HandshakeCompleted

__all__ = [
    "CloseReceived",
    "ConnectionTerminated",
    "Event",
    "FrameDropped",
    "FrameReceived",
    "HandshakeCompleted",
    "KeyUpdated",
    "PongReceived",
]


def _check_u16(name: str, value: int) -> None:
    if not 0 <= value <= 0xFFFF:
        raise LocalProtocolError(f"{name} {value!r} does not fit in u16")


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameReceived:
    """An authenticated application frame arrived."""

    #: Channel id the frame arrived on.
    channel: int
    #: u16 frame type (interpreted per channel).
    frame_type: int
    #: Decrypted payload (TLVs followed by the body); AEAD-verified.
    payload: bytes
    #: The frame's sequence number within its (channel, direction, epoch).
    seq: int
    #: Whether the sender set URG.
    urgent: bool = False

    def __post_init__(self) -> None:
        _check_u16("channel", self.channel)
        _check_u16("frame_type", self.frame_type)


@dataclass(frozen=True, kw_only=True, slots=True)
class PongReceived:
    """The peer answered a PING."""

    #: Channel the PONG arrived on.
    channel: int
    #: The PONG payload (our PING payload echoed back).
    payload: bytes

    def __post_init__(self) -> None:
        _check_u16("channel", self.channel)


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyUpdated:
    """One direction of one channel moved to a new key epoch."""

    #: Channel whose keys rotated.
    channel: int
    #: The new epoch.
    epoch: int
    #: ``True`` for our sending keys (reported when the peer's KEY_UPDATE_ACK arrives),
    #: ``False`` for the peer's sending keys (reported on its KEY_UPDATE).
    local: bool

    def __post_init__(self) -> None:
        _check_u16("channel", self.channel)
        if not 0 < self.epoch < 2**64:
            raise LocalProtocolError(f"epoch {self.epoch!r} must be a positive u64")


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameDropped:
    """A frame was ignored without being decrypted (GREASE or not-enabled channel)."""

    #: Channel the frame arrived on.
    channel: int
    #: Its frame type.
    frame_type: int
    #: Why: ``"grease"`` or ``"channel not enabled"``.
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CloseReceived:
    """The peer sent an authenticated CLOSE on the Control channel; CLOSE_ACK is queued."""

    #: The CLOSE payload (undefined by the spec; usually empty).
    payload: bytes = b""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectionTerminated:
    """The association ended; nothing more will be sent or received."""

    #: ``None`` for a graceful CLOSE/CLOSE_ACK exchange, else the error that ended it (ours
    #: for a peer violation; a :class:`~iobridge.npamp.errors.RemoteProtocolError` built from
    #: the peer's ERROR frame otherwise).
    error: NpampError | None = None
    #: Code carried by the peer's ERROR frame (first two octets, BE), if it sent one.
    remote_code: int | None = None


#: Any event :meth:`~iobridge.npamp.association.connection.NpampConnection.receive_data` may return.
Event = (
    HandshakeCompleted
    | FrameReceived
    | PongReceived
    | KeyUpdated
    | FrameDropped
    | CloseReceived
    | ConnectionTerminated
)
