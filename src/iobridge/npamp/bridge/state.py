"""The CC-STREAM per-stream state machine, as data (style: h11 ``_state.py``).

This module never sees bytes. :data:`TRANSITIONS` is the whole machine: it maps
``(state, input)`` to the next state and is role-agnostic, so a stream we produce and a stream
we consume are judged by the same table and simply visit different states. A pair missing from
the table is an error: :func:`next_state` moves the stream to ``ERROR`` and raises
:class:`~iobridge.npamp.errors.InvalidState` for our own input or
:class:`StreamStateViolation` for the peer's.

Producer (responder, CC-STREAM §2)::

    IDLE --RECV_REQUEST--> PRODUCING --SEND_DATA*--> PRODUCING --SEND_END--> ENDED
    PRODUCING --RECV_CANCEL--> CANCEL_RECEIVED --SEND_CANCEL_ACK--> CANCELLED
    IDLE|ENDED|FAILED --RECV_RESUME--> RESUME_RECEIVED --SEND_DATA|SEND_END|SEND_ERROR--> ...

Consumer (requester)::

    IDLE --SEND_REQUEST--> CONSUMING --RECV_DATA*--> CONSUMING --RECV_END--> ENDED
    CONSUMING --SEND_CANCEL--> CANCELLING --RECV_CANCEL_ACK--> CANCELLED  (or RECV_END: moot)
    IDLE|ENDED|FAILED --SEND_RESUME--> RESUMING --RECV_DATA--> CONSUMING
"""

from __future__ import annotations

from enum import Enum

from iobridge.npamp.bridge.envelope import EnvelopeMalformed
from iobridge.npamp.errors import InvalidState

__all__ = [
    "TERMINAL_STATES",
    "TRANSITIONS",
    "CorrelationIdInUse",
    "EventIdNotIncreasing",
    "Role",
    "StreamInput",
    "StreamState",
    "StreamStateViolation",
    "UnknownStream",
    "next_state",
]


class Role(Enum):
    """Our side of one exchange (BRIDGE §5: roles are per exchange, not per association)."""

    #: We answered the request and emit the stream.
    PRODUCER = "producer"
    #: We sent the request and receive the stream.
    CONSUMER = "consumer"


class StreamState(Enum):
    """Per-stream states; each names what the stream is doing or waiting for."""

    #: No frame yet.
    IDLE = "idle"
    #: Producer: run accepted, emitting events.
    PRODUCING = "producing"
    #: Producer: resume request received, the engine has not answered yet.
    RESUME_RECEIVED = "resume_received"
    #: Producer: cancel observed, the single cancel_ack END is being sent.
    CANCEL_RECEIVED = "cancel_received"
    #: Consumer: run request sent, receiving events.
    CONSUMING = "consuming"
    #: Consumer: resume request sent, waiting for events above the cursor.
    RESUMING = "resuming"
    #: Consumer: cancel sent, discarding in-flight events until the ack (CC-STREAM §7.1).
    CANCELLING = "cancelling"
    #: Terminated by a natural BRIDGE_STREAM_END.
    ENDED = "ended"
    #: Terminated by a cancel_ack END; never resumed (CC-STREAM §7.2).
    CANCELLED = "cancelled"
    #: Terminated by a BRIDGE_ERROR in either direction.
    FAILED = "failed"
    #: An input arrived that the table does not allow; every later input raises.
    ERROR = "error"


class StreamInput(Enum):
    """Inputs of the stream machine, in SEND/RECV pairs."""

    SEND_REQUEST = "send_request"
    RECV_REQUEST = "recv_request"
    SEND_RESUME = "send_resume"
    RECV_RESUME = "recv_resume"
    SEND_DATA = "send_data"
    RECV_DATA = "recv_data"
    SEND_END = "send_end"
    RECV_END = "recv_end"
    SEND_CANCEL = "send_cancel"
    RECV_CANCEL = "recv_cancel"
    SEND_CANCEL_ACK = "send_cancel_ack"
    RECV_CANCEL_ACK = "recv_cancel_ack"
    SEND_ERROR = "send_error"
    RECV_ERROR = "recv_error"
    RECV_RESPONSE = "recv_response"


#: States after which only a fresh request (or, for ENDED/FAILED, a resume) is valid.
TERMINAL_STATES = frozenset({StreamState.ENDED, StreamState.CANCELLED, StreamState.FAILED})

_S, _I = StreamState, StreamInput
#: The whole stream machine: (state, input) -> next state. Anything else is an error.
TRANSITIONS: dict[tuple[StreamState, StreamInput], StreamState] = {
    # producer (responder)
    (_S.IDLE, _I.RECV_REQUEST): _S.PRODUCING,
    (_S.IDLE, _I.RECV_RESUME): _S.RESUME_RECEIVED,
    (_S.ENDED, _I.RECV_RESUME): _S.RESUME_RECEIVED,
    (_S.FAILED, _I.RECV_RESUME): _S.RESUME_RECEIVED,
    (_S.RESUME_RECEIVED, _I.SEND_DATA): _S.PRODUCING,
    (_S.RESUME_RECEIVED, _I.SEND_END): _S.ENDED,
    (_S.RESUME_RECEIVED, _I.SEND_ERROR): _S.FAILED,
    (_S.RESUME_RECEIVED, _I.RECV_CANCEL): _S.CANCEL_RECEIVED,
    (_S.PRODUCING, _I.SEND_DATA): _S.PRODUCING,
    (_S.PRODUCING, _I.SEND_END): _S.ENDED,
    (_S.PRODUCING, _I.SEND_ERROR): _S.FAILED,
    (_S.PRODUCING, _I.RECV_ERROR): _S.FAILED,
    (_S.PRODUCING, _I.RECV_CANCEL): _S.CANCEL_RECEIVED,
    (_S.CANCEL_RECEIVED, _I.SEND_CANCEL_ACK): _S.CANCELLED,
    # a cancel crossing our natural END or our error is moot (CC-STREAM §7.2)
    (_S.ENDED, _I.RECV_CANCEL): _S.ENDED,
    (_S.FAILED, _I.RECV_CANCEL): _S.FAILED,
    # consumer (requester)
    (_S.IDLE, _I.SEND_REQUEST): _S.CONSUMING,
    (_S.IDLE, _I.SEND_RESUME): _S.RESUMING,
    (_S.ENDED, _I.SEND_RESUME): _S.RESUMING,
    (_S.FAILED, _I.SEND_RESUME): _S.RESUMING,
    (_S.CONSUMING, _I.RECV_DATA): _S.CONSUMING,
    (_S.RESUMING, _I.RECV_DATA): _S.CONSUMING,
    (_S.CONSUMING, _I.RECV_END): _S.ENDED,
    (_S.RESUMING, _I.RECV_END): _S.ENDED,
    (_S.CONSUMING, _I.RECV_ERROR): _S.FAILED,
    (_S.RESUMING, _I.RECV_ERROR): _S.FAILED,
    (_S.CONSUMING, _I.SEND_ERROR): _S.FAILED,
    (_S.RESUMING, _I.SEND_ERROR): _S.FAILED,
    (_S.CONSUMING, _I.SEND_CANCEL): _S.CANCELLING,
    (_S.RESUMING, _I.SEND_CANCEL): _S.CANCELLING,
    (_S.CANCELLING, _I.RECV_DATA): _S.CANCELLING,
    (_S.CANCELLING, _I.RECV_CANCEL_ACK): _S.CANCELLED,
    (_S.CANCELLING, _I.RECV_END): _S.ENDED,
    (_S.CANCELLING, _I.RECV_ERROR): _S.FAILED,
    (_S.CANCELLING, _I.SEND_ERROR): _S.FAILED,
}


class StreamStateViolation(EnvelopeMalformed):
    """The peer sent a frame its stream's state does not allow (e.g. data after END)."""


class EventIdNotIncreasing(EnvelopeMalformed):
    """An event_id does not exceed the stream's previous one (CC-STREAM §5.1, §9)."""


class CorrelationIdInUse(EnvelopeMalformed):
    """A request reuses the correlation_id of an outstanding request (BRIDGE §5)."""


class UnknownStream(EnvelopeMalformed):
    """A stream frame or error names no stream this session knows."""


def next_state(state: StreamState, event: StreamInput, *, local: bool) -> StreamState:
    """Look up one transition.

    Args:
        state: The stream's current state.
        event: The input.
        local: Whether the input is our own action (else the peer's frame).

    Returns:
        The next state.

    Raises:
        InvalidState: ``local`` and the pair is not in the table.
        StreamStateViolation: The peer's input is not in the table.
    """
    nxt = TRANSITIONS.get((state, event))
    if nxt is None:
        text = f"{event.name} is not allowed in state {state.name}"
        if local:
            raise InvalidState(text)
        raise StreamStateViolation(text)
    return nxt
