"""NPAMP-CC-OPAQUE carriage: a sans-IO session for octet-exact exchanges under a private id.

Theory of operation
-------------------
Opaque carriage is the fallback for a peer agreed on a private protocol_id but not on a
structured mapping (MAP-AGUI §2, CC-OPAQUE §3): payloads are carried octet for octet with
their declared content type and the plain NPAMP-BRIDGE contract (frame types, correlation,
errors, SafetyLabel), and nothing else. There is no StreamControl, no event_id, no resume and
no stream cancel: those belong to CC-STREAM, which is not in use.

:class:`OpaqueSession` holds the exchanges of one channel for both roles, keyed by
``(role, correlation_id)`` (ids are unique per direction, BRIDGE §5). Each exchange runs the
machine in :data:`TRANSITIONS`::

    requester: IDLE --SEND_REQUEST--> AWAITING --RECV_RESPONSE--> DONE
               AWAITING|STREAMING --RECV_DATA--> STREAMING --RECV_END--> DONE
               AWAITING|STREAMING --RECV_ERROR|SEND_ERROR--> FAILED
    responder: IDLE --RECV_REQUEST--> REQUESTED --SEND_RESPONSE--> DONE
               REQUESTED|STREAMING --SEND_DATA--> STREAMING --SEND_END--> DONE
               REQUESTED|STREAMING --SEND_ERROR|RECV_ERROR--> FAILED

A terminated exchange is forgotten at once (nothing can resume it), so the session holds only
outstanding exchanges. The session reads no payload: what a request means, and how a streamed
reply's octets are framed, is the application's business (CC-OPAQUE §1.3, §7.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from iobridge.npamp.bridge.envelope import (
    FRAME_MESSAGE_KIND,
    BridgeEnvelope,
    BridgeErrorBody,
    BridgeFrameType,
    BridgeMessage,
    BridgeProtocolError,
    ContentType,
    ContentTypeUnsupported,
    EnvelopeMalformed,
    ProtocolUnsupported,
    SafetyLabel,
    TransportErrorCode,
    pull_bridge_error_body,
    pull_bridge_message,
    push_bridge_error_body,
    push_bridge_message,
)
from iobridge.npamp.bridge.events import BridgeFrameRejected, reject_frame
from iobridge.npamp.bridge.safety import effective_effect
from iobridge.npamp.bridge.state import CorrelationIdInUse, Role, UnknownStream
from iobridge.npamp.errors import InvalidState

__all__ = [
    "TRANSITIONS",
    "ContentTypeChanged",
    "ExchangeInput",
    "ExchangeState",
    "OpaqueErrorReceived",
    "OpaqueEvent",
    "OpaqueNotified",
    "OpaqueRequested",
    "OpaqueResponse",
    "OpaqueSession",
    "OpaqueStreamData",
    "OpaqueStreamEnded",
    "StreamControlUnderOpaque",
]


class ExchangeState(Enum):
    """Per-exchange states of opaque carriage."""

    IDLE = "idle"
    #: Requester: request sent, no reply yet.
    AWAITING = "awaiting"
    #: Responder: request received, not answered yet.
    REQUESTED = "requested"
    #: Either side: a streamed reply is under way.
    STREAMING = "streaming"
    #: Answered by a BRIDGE_RESPONSE or a BRIDGE_STREAM_END.
    DONE = "done"
    #: Answered or aborted by a BRIDGE_ERROR.
    FAILED = "failed"


class ExchangeInput(Enum):
    """Inputs of the exchange machine."""

    SEND_REQUEST = "send_request"
    RECV_REQUEST = "recv_request"
    SEND_RESPONSE = "send_response"
    RECV_RESPONSE = "recv_response"
    SEND_DATA = "send_data"
    RECV_DATA = "recv_data"
    SEND_END = "send_end"
    RECV_END = "recv_end"
    SEND_ERROR = "send_error"
    RECV_ERROR = "recv_error"


_S, _I = ExchangeState, ExchangeInput
#: The whole machine: (state, input) -> next state. Anything else is an error.
TRANSITIONS: dict[tuple[ExchangeState, ExchangeInput], ExchangeState] = {
    (_S.IDLE, _I.SEND_REQUEST): _S.AWAITING,
    (_S.AWAITING, _I.RECV_RESPONSE): _S.DONE,
    (_S.AWAITING, _I.RECV_DATA): _S.STREAMING,
    (_S.AWAITING, _I.RECV_END): _S.DONE,
    (_S.AWAITING, _I.RECV_ERROR): _S.FAILED,
    (_S.STREAMING, _I.RECV_DATA): _S.STREAMING,
    (_S.STREAMING, _I.RECV_END): _S.DONE,
    (_S.STREAMING, _I.RECV_ERROR): _S.FAILED,
    (_S.IDLE, _I.RECV_REQUEST): _S.REQUESTED,
    (_S.REQUESTED, _I.SEND_RESPONSE): _S.DONE,
    (_S.REQUESTED, _I.SEND_DATA): _S.STREAMING,
    (_S.REQUESTED, _I.SEND_END): _S.DONE,
    (_S.REQUESTED, _I.SEND_ERROR): _S.FAILED,
    (_S.REQUESTED, _I.RECV_ERROR): _S.FAILED,
    (_S.STREAMING, _I.SEND_DATA): _S.STREAMING,
    (_S.STREAMING, _I.SEND_END): _S.DONE,
    (_S.STREAMING, _I.SEND_ERROR): _S.FAILED,
}
_TERMINAL = frozenset({ExchangeState.DONE, ExchangeState.FAILED})
_STREAM_FRAMES = frozenset({BridgeFrameType.BRIDGE_STREAM_DATA, BridgeFrameType.BRIDGE_STREAM_END})


class StreamControlUnderOpaque(EnvelopeMalformed):
    """A StreamControl TLV on an opaque frame: the peer is not using the class agreed."""


class ContentTypeChanged(EnvelopeMalformed):
    """A stream frame declares another content type than its exchange (CC-OPAQUE §7.3)."""


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueRequested:
    """The peer sent a request; answer it with respond, send_data/end or fail."""

    correlation_id: bytes
    #: The envelope's operation name, as sent ("" when none).
    method: str
    #: The payload's declared content type (an enumerated BridgeEnvelope value).
    content_type: int
    #: The payload, octet for octet.
    body: bytes
    #: The label as sent, or ``None``.
    safety_label: SafetyLabel | None
    #: Effect to enforce: the label's, or destructive when absent (BRIDGE §7).
    effect: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueNotified:
    """A one-way message arrived (never answered, BRIDGE §8)."""

    method: str
    content_type: int
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueResponse:
    """Our request was answered by one BRIDGE_RESPONSE."""

    correlation_id: bytes
    content_type: int
    body: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueStreamData:
    """One chunk of a streamed reply; chunk boundaries mean nothing (CC-OPAQUE §7.4)."""

    correlation_id: bytes
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueStreamEnded:
    """The streamed reply ended; ``data`` is its last chunk (possibly empty)."""

    correlation_id: bytes
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaqueErrorReceived:
    """A BRIDGE_ERROR ended one of our exchanges (either role)."""

    correlation_id: bytes
    #: CONSUMER (we requested): our request failed; PRODUCER: the requester aborted our reply.
    role: Role
    #: The transport error, or ``None`` when ``body`` is the foreign error object.
    code: TransportErrorCode | None
    message: str
    #: The error body, octet for octet.
    body: bytes


OpaqueEvent = (
    OpaqueRequested
    | OpaqueNotified
    | OpaqueResponse
    | OpaqueStreamData
    | OpaqueStreamEnded
    | OpaqueErrorReceived
    | BridgeFrameRejected
)


# --- the session ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Exchange:
    role: Role
    correlation_id: bytes
    content_type: int
    state: ExchangeState = ExchangeState.IDLE

    def step(self, event: ExchangeInput, *, local: bool) -> None:
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            text = f"{event.name} is not allowed in state {self.state.name}"
            if local:
                raise InvalidState(text)
            self.state = ExchangeState.FAILED
            raise _Violation(text)
        self.state = nxt


class _Violation(EnvelopeMalformed):
    """The peer sent a frame its exchange's state does not allow (e.g. a second reply)."""


class OpaqueSession:
    """Every opaque exchange of one channel with one peer, for both roles.

    Args:
        protocol_id: The private protocol_id agreed with this peer for opaque carriage
            (CC-OPAQUE §3); frames naming another id are answered ProtocolUnsupported.
        content_types: Content types we dispatch (CC-OPAQUE §9.5); others are refused.
        max_exchanges: Outstanding exchanges the peer may hold open with us; a request beyond
            it is answered NotDelivered, bounding the session's memory.
    """

    def __init__(
        self,
        *,
        protocol_id: int,
        content_types: frozenset[int] = frozenset({ContentType.JSON}),
        max_exchanges: int = 1024,
    ) -> None:
        self.protocol_id = protocol_id
        self.content_types = content_types
        self.max_exchanges = max_exchanges
        self._exchanges: dict[tuple[Role, bytes], _Exchange] = {}
        self._outbox: list[tuple[int, bytes]] = []

    # -- I/O surface ------------------------------------------------------------------------

    def data_to_send(self) -> list[tuple[int, bytes]]:
        """Drain the queued ``(frame_type, plaintext payload)`` pairs, in order."""
        out, self._outbox = self._outbox, []
        return out

    def state_of(self, role: Role, correlation_id: bytes) -> ExchangeState | None:
        """The state of an outstanding exchange, or ``None`` (unknown or terminated)."""
        exchange = self._exchanges.get((role, correlation_id))
        return None if exchange is None else exchange.state

    def receive_frame(self, frame_type: int, payload: bytes) -> list[OpaqueEvent]:
        """Process one decrypted Bridge-channel frame.

        Returns:
            The events it produced; a refused frame yields :class:`BridgeFrameRejected` and,
            where BRIDGE §4 calls for one, a queued BRIDGE_ERROR.
        """
        msg: BridgeMessage | None = None
        try:
            msg = pull_bridge_message(frame_type, payload)
            self._check_carriage(msg)
            return self._dispatch(msg)
        except BridgeProtocolError as exc:
            self._drop_failed()
            reply, rejected = reject_frame(exc, msg, protocol_id=self.protocol_id)
            if reply is not None:
                self._outbox.append(reply)
            return [rejected]

    # -- requester API ----------------------------------------------------------------------

    def request(
        self,
        correlation_id: bytes,
        body: bytes,
        *,
        method: str = "",
        content_type: int = ContentType.JSON,
        safety_label: SafetyLabel | None = None,
    ) -> None:
        """Queue a BRIDGE_REQUEST (attach a label to any state-mutating request, BRIDGE §7).

        Raises:
            InvalidState: empty or outstanding correlation_id.
        """
        if not correlation_id:
            raise InvalidState("a request needs a non-empty correlation_id")
        exchange = self._open(Role.CONSUMER, correlation_id, content_type, local=True)
        exchange.step(ExchangeInput.SEND_REQUEST, local=True)
        self._emit(
            exchange, BridgeFrameType.BRIDGE_REQUEST, body, method=method, label=safety_label
        )

    # -- responder API ----------------------------------------------------------------------

    def respond(self, correlation_id: bytes, body: bytes) -> None:
        """Answer a request with one BRIDGE_RESPONSE."""
        self._answer(
            correlation_id, ExchangeInput.SEND_RESPONSE, BridgeFrameType.BRIDGE_RESPONSE, body
        )

    def send_data(self, correlation_id: bytes, data: bytes) -> None:
        """Queue one chunk of a streamed reply."""
        ft = BridgeFrameType.BRIDGE_STREAM_DATA
        self._answer(correlation_id, ExchangeInput.SEND_DATA, ft, data)

    def end(self, correlation_id: bytes, data: bytes = b"") -> None:
        """End a streamed reply with its single BRIDGE_STREAM_END (``final``)."""
        self._answer(
            correlation_id, ExchangeInput.SEND_END, BridgeFrameType.BRIDGE_STREAM_END, data
        )

    def fail(self, correlation_id: bytes, code: TransportErrorCode, message: str = "") -> None:
        """Answer (or abort the stream of) a request with a transport error (BRIDGE §6)."""
        body = push_bridge_error_body(BridgeErrorBody(code=code, message=message))
        self._answer(correlation_id, ExchangeInput.SEND_ERROR, BridgeFrameType.BRIDGE_ERROR, body)

    def fail_foreign(self, correlation_id: bytes, error_object: bytes) -> None:
        """Answer a request with the foreign protocol's own error object, verbatim (§8.1)."""
        ft = BridgeFrameType.BRIDGE_ERROR
        self._answer(correlation_id, ExchangeInput.SEND_ERROR, ft, error_object)

    # -- internals --------------------------------------------------------------------------

    def _check_carriage(self, msg: BridgeMessage) -> None:
        env = msg.envelope
        if env.protocol_id != self.protocol_id:
            raise ProtocolUnsupported(f"protocol_id 0x{env.protocol_id:02x} is not carried")
        if env.content_type not in ContentType._value2member_map_:
            # No OpaqueContentType TLV code point is assigned, so an unenumerated value is
            # unrecognized: a malformed envelope (CC-OPAQUE §4.4, §10).
            raise EnvelopeMalformed(f"content_type 0x{env.content_type:02x} is not assigned")
        if env.content_type not in self.content_types:
            raise ContentTypeUnsupported(f"content_type 0x{env.content_type:02x} not accepted")
        if msg.stream_control is not None:
            raise StreamControlUnderOpaque("StreamControl is CC-STREAM; not used under opaque")

    def _dispatch(self, msg: BridgeMessage) -> list[OpaqueEvent]:
        env, ft = msg.envelope, msg.frame_type
        if ft is BridgeFrameType.BRIDGE_NOTIFY:
            return [OpaqueNotified(method=env.method, content_type=env.content_type, body=msg.body)]
        corr = env.correlation_id
        if ft is BridgeFrameType.BRIDGE_REQUEST:
            opened = self._open(Role.PRODUCER, corr, env.content_type, local=False)
            opened.step(ExchangeInput.RECV_REQUEST, local=False)
            label = msg.safety_label
            return [
                OpaqueRequested(
                    correlation_id=corr,
                    method=env.method,
                    content_type=env.content_type,
                    body=msg.body,
                    safety_label=label,
                    effect=effective_effect(label),
                )
            ]
        if ft is BridgeFrameType.BRIDGE_ERROR:
            return [self._recv_error(corr, msg.body)]
        exchange = self._exchanges.get((Role.CONSUMER, corr))
        if exchange is None:
            raise UnknownStream(f"no request with correlation_id {corr!r} is outstanding")
        if ft in _STREAM_FRAMES and env.content_type != exchange.content_type:
            self._abort(exchange)
            raise ContentTypeChanged(
                f"content_type 0x{env.content_type:02x} differs from the exchange's"
            )
        if ft is BridgeFrameType.BRIDGE_RESPONSE:
            exchange.step(ExchangeInput.RECV_RESPONSE, local=False)
            self._forget(exchange)
            return [
                OpaqueResponse(correlation_id=corr, content_type=env.content_type, body=msg.body)
            ]
        if ft is BridgeFrameType.BRIDGE_STREAM_DATA:
            if exchange.state is ExchangeState.AWAITING:
                exchange.content_type = env.content_type  # the stream's first frame declares it
            exchange.step(ExchangeInput.RECV_DATA, local=False)
            return [OpaqueStreamData(correlation_id=corr, data=msg.body)]
        exchange.step(ExchangeInput.RECV_END, local=False)
        self._forget(exchange)
        return [OpaqueStreamEnded(correlation_id=corr, data=msg.body)]

    def _recv_error(self, corr: bytes, body: bytes) -> OpaqueErrorReceived:
        exchange = self._exchanges.get((Role.CONSUMER, corr))
        if exchange is None:
            exchange = self._exchanges.get((Role.PRODUCER, corr))
        if exchange is None:
            raise UnknownStream(f"no exchange with correlation_id {corr!r}")
        exchange.step(ExchangeInput.RECV_ERROR, local=False)
        self._forget(exchange)
        transport = pull_bridge_error_body(body)
        return OpaqueErrorReceived(
            correlation_id=corr,
            role=exchange.role,
            code=None if transport is None else transport.code,
            message="" if transport is None else transport.message,
            body=body,
        )

    def _open(self, role: Role, corr: bytes, content_type: int, *, local: bool) -> _Exchange:
        key = (role, corr)
        if key in self._exchanges:
            if local:
                raise InvalidState(f"correlation_id {corr!r} names an outstanding request")
            raise CorrelationIdInUse(f"correlation_id {corr!r} names an outstanding request")
        if not local and len(self._exchanges) >= self.max_exchanges:
            raise _TooMany(f"more than {self.max_exchanges} outstanding exchanges")
        exchange = _Exchange(role=role, correlation_id=corr, content_type=content_type)
        self._exchanges[key] = exchange
        return exchange

    def _answer(self, corr: bytes, event: ExchangeInput, ft: BridgeFrameType, body: bytes) -> None:
        exchange = self._exchanges.get((Role.PRODUCER, corr))
        if exchange is None:
            raise InvalidState(f"no outstanding request with correlation_id {corr!r}")
        exchange.step(event, local=True)
        self._emit(exchange, ft, body)
        if exchange.state in _TERMINAL:
            self._forget(exchange)

    def _drop_failed(self) -> None:
        """Forget exchanges a rejected frame failed (a violation ends the exchange)."""
        for key in [k for k, x in self._exchanges.items() if x.state is ExchangeState.FAILED]:
            del self._exchanges[key]

    def _abort(self, exchange: _Exchange) -> None:
        """We reject a bad frame of a reply we receive: the exchange fails."""
        exchange.state = ExchangeState.FAILED
        self._forget(exchange)

    def _forget(self, exchange: _Exchange) -> None:
        self._exchanges.pop((exchange.role, exchange.correlation_id), None)

    def _emit(
        self,
        exchange: _Exchange,
        ft: BridgeFrameType,
        body: bytes,
        *,
        method: str = "",
        label: SafetyLabel | None = None,
    ) -> None:
        envelope = BridgeEnvelope(
            protocol_id=self.protocol_id,
            message_kind=FRAME_MESSAGE_KIND[ft],
            content_type=exchange.content_type,
            flags=0x01 if ft is BridgeFrameType.BRIDGE_STREAM_END else 0x00,
            correlation_id=exchange.correlation_id,
            method=method,
        )
        msg = BridgeMessage(frame_type=ft, envelope=envelope, safety_label=label, body=body)
        self._outbox.append((ft, push_bridge_message(msg)))


class _TooMany(BridgeProtocolError):
    """A request beyond ``max_exchanges``: not delivered (the session stays bounded)."""

    transport_code = TransportErrorCode.NOT_DELIVERED
