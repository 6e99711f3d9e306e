"""One association: the sans-IO connection, its state table and the events it reports."""

from iobridge.npamp.association.connection import (
    DEFAULT_CHANNELS,
    AssociationConfig,
    NpampConnection,
)
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
from iobridge.npamp.association.state import AssociationState

__all__ = [
    "DEFAULT_CHANNELS",
    "AssociationConfig",
    "AssociationState",
    "CloseReceived",
    "ConnectionTerminated",
    "Event",
    "FrameDropped",
    "FrameReceived",
    "HandshakeCompleted",
    "KeyUpdated",
    "NpampConnection",
    "PongReceived",
]
