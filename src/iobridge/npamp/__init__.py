"""N-PAMP for iobridge, one subpackage per layer (lower layers never import higher ones).

- :mod:`~iobridge.npamp.wire`: frame header, CRC32C and TLV codecs.
- :mod:`~iobridge.npamp.record`: key schedule and AEAD record layer.
- :mod:`~iobridge.npamp.handshake`: the hybrid handshake, profiles and identity keys.
- :mod:`~iobridge.npamp.association`: the sans-IO connection and its events.
- :mod:`~iobridge.npamp.bridge`: Bridge envelope, SafetyLabel, CC-STREAM session, Discovery record.
- :mod:`~iobridge.npamp.aio`: the asyncio TCP + TLS 1.3 shell (the only one doing I/O).

:mod:`~iobridge.npamp.errors` is the error tree shared by every layer; this namespace re-exports
it and nothing else, so ``import iobridge.npamp`` pulls in no event loop or socket code.
"""

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
    TransportError,
)

__all__ = [
    "AeadFailure",
    "ErrorCode",
    "FrameDecodeError",
    "HandshakeFailure",
    "InvalidState",
    "LocalProtocolError",
    "NpampError",
    "RemoteProtocolError",
    "Reply",
    "TransportError",
]
