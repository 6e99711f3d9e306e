"""Record layer: the HKDF key schedule and AEAD sealing of frames, with per-direction sequences."""

from iobridge.npamp.record.cipher import (
    TAG_SIZE,
    ReceiveState,
    RecordCipher,
    SendState,
    open_frame,
    seal_frame,
)
from iobridge.npamp.record.keyschedule import Direction, application_keys, traffic_keys

__all__ = [
    "TAG_SIZE",
    "Direction",
    "ReceiveState",
    "RecordCipher",
    "SendState",
    "application_keys",
    "open_frame",
    "seal_frame",
    "traffic_keys",
]
