"""N-PAMP for iobridge: sans-IO wire codecs, record layer, handshake and association.

Import :mod:`iobridge.npamp.aio` (asyncio TCP + TLS 1.3 shell) and :mod:`iobridge.npamp.tls`
explicitly; this package namespace only re-exports the sans-IO parts, so importing it pulls in
no event loop or socket code. Higher layers (Bridge, CC-STREAM, adapters) live in their own
modules.
"""

from __future__ import annotations

from iobridge.npamp.connection import AssociationConfig, NpampConnection
from iobridge.npamp.connection_state import AssociationState
from iobridge.npamp.errors import (
    AeadFailure,
    ErrorCode,
    FrameDecodeError,
    HandshakeFailure,
    InvalidState,
    LocalProtocolError,
    NpampError,
    RemoteProtocolError,
    Reply,
)
from iobridge.npamp.events import (
    CloseReceived,
    ConnectionTerminated,
    Event,
    FrameDropped,
    FrameReceived,
    HandshakeCompleted,
    KeyUpdated,
    PongReceived,
)
from iobridge.npamp.frame import (
    Channel,
    Flags,
    Frame,
    FrameHeader,
    FrameReader,
    FrameType,
    pull_frame,
    pull_frame_header,
    push_frame,
    push_frame_header,
)
from iobridge.npamp.handshake import ClientHandshake, HandshakeConfig, ServerHandshake
from iobridge.npamp.record import ReceiveState, RecordCipher, SendState, open_frame, seal_frame
from iobridge.npamp.tlv import Tlv, TlvType, pull_tlv, pull_tlvs, push_tlv, push_tlvs

__all__ = [
    "AeadFailure",
    "AssociationConfig",
    "AssociationState",
    "Channel",
    "ClientHandshake",
    "CloseReceived",
    "ConnectionTerminated",
    "ErrorCode",
    "Event",
    "Flags",
    "Frame",
    "FrameDecodeError",
    "FrameDropped",
    "FrameHeader",
    "FrameReader",
    "FrameReceived",
    "FrameType",
    "HandshakeCompleted",
    "HandshakeConfig",
    "HandshakeFailure",
    "InvalidState",
    "KeyUpdated",
    "LocalProtocolError",
    "NpampConnection",
    "NpampError",
    "PongReceived",
    "ReceiveState",
    "RecordCipher",
    "RemoteProtocolError",
    "Reply",
    "SendState",
    "ServerHandshake",
    "Tlv",
    "TlvType",
    "open_frame",
    "pull_frame",
    "pull_frame_header",
    "pull_tlv",
    "pull_tlvs",
    "push_frame",
    "push_frame_header",
    "push_tlv",
    "push_tlvs",
    "seal_frame",
]
