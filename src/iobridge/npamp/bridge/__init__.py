"""The Bridge channel: envelope codec and its errors, SafetyLabel policy, the CC-STREAM session.

Also the Discovery protocol record, the one Discovery payload iobridge builds and reads.
"""

from iobridge.npamp.bridge.discovery import (
    DISCOVERY_CHANNEL,
    ProtocolRecord,
    agui_record,
    pull_protocol_record,
    push_protocol_record,
)
from iobridge.npamp.bridge.envelope import (
    BRIDGE_CHANNEL,
    BridgeEnvelope,
    BridgeFrameType,
    BridgeMessage,
    ContentType,
    Control,
    Effect,
    MessageKind,
    SafetyLabel,
    StreamControl,
    correlates,
    error_reply,
    pull_bridge_message,
    push_bridge_message,
)
from iobridge.npamp.bridge.errors import (
    BridgeProtocolError,
    EnvelopeMalformed,
    ProtocolUnsupported,
    SafetyPolicyViolation,
    TransportErrorCode,
)
from iobridge.npamp.bridge.events import (
    BridgeErrorReceived,
    BridgeFrameRejected,
    CancelAcked,
    CancelRequested,
    ResumeRequested,
    RunRequested,
    StreamDataReceived,
    StreamEnded,
)
from iobridge.npamp.bridge.session import AGUI_PROTOCOL_ID, RUN_METHOD, BridgeSession
from iobridge.npamp.bridge.state import Role, StreamState

__all__ = [
    "AGUI_PROTOCOL_ID",
    "BRIDGE_CHANNEL",
    "DISCOVERY_CHANNEL",
    "RUN_METHOD",
    "BridgeEnvelope",
    "BridgeErrorReceived",
    "BridgeFrameRejected",
    "BridgeFrameType",
    "BridgeMessage",
    "BridgeProtocolError",
    "BridgeSession",
    "CancelAcked",
    "CancelRequested",
    "ContentType",
    "Control",
    "Effect",
    "EnvelopeMalformed",
    "MessageKind",
    "ProtocolRecord",
    "ProtocolUnsupported",
    "ResumeRequested",
    "Role",
    "RunRequested",
    "SafetyLabel",
    "SafetyPolicyViolation",
    "StreamControl",
    "StreamDataReceived",
    "StreamEnded",
    "StreamState",
    "TransportErrorCode",
    "agui_record",
    "correlates",
    "error_reply",
    "pull_bridge_message",
    "pull_protocol_record",
    "push_bridge_message",
    "push_protocol_record",
]
