"""Events of the AG-UI Bridge session: past-tense facts, frozen and slotted (style §6.2)."""

from __future__ import annotations

from dataclasses import dataclass

from iobridge.npamp.bridge.envelope import (
    BridgeFrameType,
    BridgeMessage,
    BridgeProtocolError,
    SafetyLabel,
    TransportErrorCode,
    error_reply,
)
from iobridge.npamp.bridge.state import Role

__all__ = [
    "BridgeErrorReceived",
    "BridgeFrameRejected",
    "CancelAcked",
    "CancelRequested",
    "Event",
    "ResumeRequested",
    "RunRequested",
    "StreamDataReceived",
    "StreamEnded",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequested:
    """The peer asked us to start an AG-UI run (we are the producer)."""

    #: Stream key; echo it on every frame of the run.
    correlation_id: bytes
    #: The RunAgentInput octets, untouched.
    body: bytes
    #: The label as sent, or ``None``.
    safety_label: SafetyLabel | None
    #: Effect to enforce: the label's, or destructive when absent (fail-safe, BRIDGE §7).
    effect: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeRequested:
    """The peer asked to continue a run after ``cursor``; answer by sending or refusing."""

    #: The stream being resumed.
    correlation_id: bytes
    #: Last event_id the consumer durably consumed (0 = from the first event).
    cursor: int
    #: The re-sent RunAgentInput, possibly empty (digest §10.6).
    body: bytes
    #: The label as sent, or ``None``.
    safety_label: SafetyLabel | None
    #: Effect to enforce; a resume carries the same obligation as the run (CC-STREAM §12).
    effect: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested:
    """The consumer cancelled; the session already queued the single cancel_ack END."""

    #: The cancelled stream.
    correlation_id: bytes
    #: Highest event_id the consumer said it consumed.
    cursor: int
    #: The event_id the cancel_ack carried: the last event we actually sent.
    tail_event_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamDataReceived:
    """One AG-UI event arrived in order (duplicates at or below a resume cursor are dropped)."""

    #: The run's stream.
    correlation_id: bytes
    #: Its event_id; persist it as the resume cursor once the event is durably consumed.
    event_id: int
    #: The AG-UI event JSON, octet-for-octet.
    data: bytes
    #: The producer says this stream may be resumed.
    resumable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnded:
    """The producer ended the stream naturally (the cancel may have been moot)."""

    #: The run's stream.
    correlation_id: bytes
    #: The terminal event_id.
    event_id: int
    #: Octets carried on the END itself (normally empty; digest §10.12).
    data: bytes
    #: The producer says this stream may be resumed.
    resumable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelAcked:
    """The producer acknowledged our cancel; a normal completion, not an error (§7.3)."""

    #: The cancelled stream.
    correlation_id: bytes
    #: The last event_id the producer emitted.
    event_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeErrorReceived:
    """A BRIDGE_ERROR arrived for one of our streams."""

    #: The stream it terminates.
    correlation_id: bytes
    #: CONSUMER: our run failed; PRODUCER: the consumer rejected our stream.
    role: Role
    #: The transport error, or ``None`` when the body is a foreign error object.
    code: TransportErrorCode | None
    #: The transport error's reason ("" for a foreign error).
    message: str
    #: The BRIDGE_ERROR body, octet-for-octet.
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeFrameRejected:
    """We refused a peer's frame; ``replied`` says whether a BRIDGE_ERROR was queued."""

    #: The frame's correlation_id, when its envelope could be read.
    correlation_id: bytes | None
    #: The rule that failed.
    error: BridgeProtocolError
    #: Whether a BRIDGE_ERROR answer is waiting in :meth:`BridgeSession.data_to_send`.
    replied: bool


def reject_frame(
    exc: BridgeProtocolError, msg: BridgeMessage | None, *, protocol_id: int | None
) -> tuple[tuple[BridgeFrameType, bytes] | None, BridgeFrameRejected]:
    """The BRIDGE_ERROR (if any) a refused frame gets, and the event that reports it.

    ``msg`` is the frame as far as it was read: a rule that failed after the envelope
    parsed names that envelope, so the answer echoes its correlation_id.
    """
    if msg is not None and exc.envelope is None:
        exc.frame_type, exc.envelope = msg.frame_type, msg.envelope
        exc.recovered = msg.envelope
    reply = error_reply(exc, protocol_id=protocol_id)
    known = exc.envelope if exc.envelope is not None else exc.recovered
    corr = None if known is None else known.correlation_id
    return reply, BridgeFrameRejected(correlation_id=corr, error=exc, replied=reply is not None)


Event = (
    RunRequested
    | ResumeRequested
    | CancelRequested
    | StreamDataReceived
    | StreamEnded
    | CancelAcked
    | BridgeErrorReceived
    | BridgeFrameRejected
)
