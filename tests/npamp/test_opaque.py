"""NPAMP-CC-OPAQUE session (sans-IO) and the AG-UI event array it carries."""

from __future__ import annotations

import json

import pytest

from iobridge.npamp.bridge import BridgeFrameRejected, BridgeFrameType, Role, TransportErrorCode
from iobridge.npamp.bridge.agui_opaque import (
    EventArrayReader,
    EventArrayWriter,
    MalformedEventArray,
    Route,
    cancel_route,
    parse_route,
    tool_result_route,
)
from iobridge.npamp.bridge.envelope import (
    BridgeEnvelope,
    BridgeMessage,
    MessageKind,
    pull_bridge_error_body,
    pull_bridge_message,
    push_bridge_message,
)
from iobridge.npamp.bridge.opaque import (
    ContentTypeChanged,
    ExchangeState,
    OpaqueErrorReceived,
    OpaqueNotified,
    OpaqueRequested,
    OpaqueResponse,
    OpaqueSession,
    OpaqueStreamData,
    OpaqueStreamEnded,
)
from iobridge.npamp.errors import InvalidState

PID = 0x50


def pair() -> tuple[OpaqueSession, OpaqueSession]:
    return OpaqueSession(protocol_id=PID), OpaqueSession(protocol_id=PID)


def pump(src: OpaqueSession, dst: OpaqueSession) -> list[object]:
    events: list[object] = []
    for ft, payload in src.data_to_send():
        events += dst.receive_frame(ft, payload)
    return events


def test_request_answered_by_a_stream_carries_the_octets_untouched() -> None:
    client, server = pair()
    client.request(b"c1", b'{"a":1}', method="POST /run")
    (req,) = pump(client, server)
    assert isinstance(req, OpaqueRequested) and req.body == b'{"a":1}'
    assert req.method == "POST /run" and req.effect == 3  # no label: destructive (BRIDGE §7)
    server.send_data(b"c1", b"\x00[{\xff")
    server.send_data(b"c1", b"")
    server.end(b"c1", b"tail")
    events = pump(server, client)
    assert events == [
        OpaqueStreamData(correlation_id=b"c1", data=b"\x00[{\xff"),
        OpaqueStreamData(correlation_id=b"c1", data=b""),
        OpaqueStreamEnded(correlation_id=b"c1", data=b"tail"),
    ]
    assert client.state_of(Role.CONSUMER, b"c1") is None  # forgotten once terminated
    assert server.state_of(Role.PRODUCER, b"c1") is None


def test_response_and_foreign_error_and_transport_error() -> None:
    client, server = pair()
    for corr in (b"a", b"b", b"c"):
        client.request(corr, b"{}")
    pump(client, server)
    server.respond(b"a", b'{"ok":true}')
    server.fail_foreign(b"b", b'{"error":{"code":"X"}}')
    server.fail(b"c", TransportErrorCode.NOT_DELIVERED, "busy")
    ok, foreign, transport = pump(server, client)
    assert ok == OpaqueResponse(correlation_id=b"a", content_type=1, body=b'{"ok":true}')
    assert isinstance(foreign, OpaqueErrorReceived) and foreign.code is None
    assert foreign.body == b'{"error":{"code":"X"}}'
    assert isinstance(transport, OpaqueErrorReceived)
    assert (transport.code, transport.message) == (TransportErrorCode.NOT_DELIVERED, "busy")


def test_frames_carry_no_stream_control_and_the_agreed_id() -> None:
    client, server = pair()
    client.request(b"c1", b"{}")
    pump(client, server)
    server.send_data(b"c1", b"x")
    server.end(b"c1")
    data, end = (pull_bridge_message(ft, p) for ft, p in server.data_to_send())
    assert data.stream_control is None and end.stream_control is None
    assert data.envelope.protocol_id == end.envelope.protocol_id == PID
    assert end.envelope.final and not data.envelope.final


def test_local_misuse_raises() -> None:
    client, server = pair()
    with pytest.raises(InvalidState):
        client.request(b"", b"{}")
    client.request(b"c1", b"{}")
    with pytest.raises(InvalidState):
        client.request(b"c1", b"{}")
    with pytest.raises(InvalidState):
        server.respond(b"c1", b"{}")  # nothing was received
    pump(client, server)
    server.respond(b"c1", b"{}")
    with pytest.raises(InvalidState):
        server.send_data(b"c1", b"late")


def _frame(ft: BridgeFrameType, corr: bytes, *, content_type: int = 1, pid: int = PID) -> bytes:
    kinds = {
        BridgeFrameType.BRIDGE_REQUEST: MessageKind.REQUEST,
        BridgeFrameType.BRIDGE_RESPONSE: MessageKind.RESPONSE,
        BridgeFrameType.BRIDGE_STREAM_DATA: MessageKind.STREAM_DATA,
        BridgeFrameType.BRIDGE_STREAM_END: MessageKind.STREAM_END,
        BridgeFrameType.BRIDGE_NOTIFY: MessageKind.NOTIFICATION,
    }
    env = BridgeEnvelope(
        protocol_id=pid,
        message_kind=kinds[ft],
        content_type=content_type,
        flags=1 if ft is BridgeFrameType.BRIDGE_STREAM_END else 0,
        correlation_id=corr,
    )
    return push_bridge_message(BridgeMessage(frame_type=ft, envelope=env, body=b"x"))


def _rejected(session: OpaqueSession, ft: BridgeFrameType, payload: bytes) -> BridgeFrameRejected:
    (event,) = session.receive_frame(ft, payload)
    assert isinstance(event, BridgeFrameRejected)
    return event


def test_a_stream_may_not_change_its_content_type() -> None:
    client = OpaqueSession(protocol_id=PID, content_types=frozenset({1, 2}))
    client.request(b"c1", b"{}")
    client.data_to_send()
    data = BridgeFrameType.BRIDGE_STREAM_DATA
    assert client.receive_frame(data, _frame(data, b"c1")) == [
        OpaqueStreamData(correlation_id=b"c1", data=b"x")
    ]
    event = _rejected(client, data, _frame(data, b"c1", content_type=2))
    assert isinstance(event.error, ContentTypeChanged) and event.replied
    assert client.state_of(Role.CONSUMER, b"c1") is None  # the exchange failed


def test_peer_violations_are_answered_or_dropped() -> None:
    client = OpaqueSession(protocol_id=PID)
    data, resp = BridgeFrameType.BRIDGE_STREAM_DATA, BridgeFrameType.BRIDGE_RESPONSE
    # a stream frame for nothing outstanding: answered EnvelopeMalformed
    event = _rejected(client, data, _frame(data, b"zz"))
    ((ft, payload),) = client.data_to_send()
    reply = pull_bridge_message(ft, payload)
    body = pull_bridge_error_body(reply.body)
    assert body is not None and body.code is TransportErrorCode.ENVELOPE_MALFORMED
    assert reply.envelope.correlation_id == b"zz" and reply.envelope.protocol_id == PID
    # a response after stream data: the exchange fails; replies are never answered
    client.request(b"c1", b"{}")
    client.data_to_send()
    client.receive_frame(data, _frame(data, b"c1"))
    event = _rejected(client, resp, _frame(resp, b"c1"))
    assert not event.replied and client.data_to_send() == []
    assert client.state_of(Role.CONSUMER, b"c1") is None


def test_another_protocol_id_is_unsupported_and_unassigned_content_type_malformed() -> None:
    server = OpaqueSession(protocol_id=PID)
    req = BridgeFrameType.BRIDGE_REQUEST
    other = _rejected(server, req, _frame(req, b"a", pid=0x35))
    assert other.error.transport_code is TransportErrorCode.PROTOCOL_UNSUPPORTED
    odd = _rejected(server, req, _frame(req, b"b", content_type=0x09))
    assert odd.error.transport_code is TransportErrorCode.ENVELOPE_MALFORMED
    assert len(server.data_to_send()) == 2  # both answered
    assert server.state_of(Role.PRODUCER, b"a") is None
    assert server.state_of(Role.PRODUCER, b"b") is None


def test_outstanding_exchanges_are_bounded() -> None:
    server = OpaqueSession(protocol_id=PID, max_exchanges=2)
    req = BridgeFrameType.BRIDGE_REQUEST
    for corr in (b"1", b"2"):
        (ok,) = server.receive_frame(req, _frame(req, corr))
        assert isinstance(ok, OpaqueRequested)
    over = _rejected(server, req, _frame(req, b"3"))
    assert over.error.transport_code is TransportErrorCode.NOT_DELIVERED and over.replied
    assert server.state_of(Role.PRODUCER, b"1") is ExchangeState.REQUESTED
    assert server.state_of(Role.PRODUCER, b"3") is None
    reused = _rejected(server, req, _frame(req, b"1"))  # an outstanding id
    assert reused.error.transport_code is TransportErrorCode.ENVELOPE_MALFORMED


def test_notifications_are_delivered_never_answered() -> None:
    server = OpaqueSession(protocol_id=PID)
    note = BridgeFrameType.BRIDGE_NOTIFY
    assert server.receive_frame(note, _frame(note, b"")) == [
        OpaqueNotified(method="", content_type=1, body=b"x")
    ]
    assert server.data_to_send() == []


# --- the event array -----------------------------------------------------------------------

EVENTS = [
    b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}',
    b'{"type":"TEXT_MESSAGE_CONTENT","delta":"a } ] \\" { [ \\\\"}',
    b'{"type":"STATE_SNAPSHOT","snapshot":{"a":[1,{"b":"\xc3\xa9"}],"c":[]}}',
    b'{"type":"RUN_FINISHED"}',
]


def test_writer_output_is_one_json_array() -> None:
    writer = EventArrayWriter()
    whole = b"".join([writer.chunk(e) for e in EVENTS] + [writer.close()])
    assert json.loads(whole) == [json.loads(e) for e in EVENTS]
    assert EventArrayWriter().close() == b"[]"


def test_reader_returns_exact_octets_for_every_split() -> None:
    writer = EventArrayWriter()
    whole = b"".join([writer.chunk(e) for e in EVENTS] + [writer.close()])
    for cut in range(len(whole) + 1):
        for cut2 in (cut, min(len(whole), cut + 7)):
            reader = EventArrayReader()
            got = reader.feed(whole[:cut]) + reader.feed(whole[cut:cut2])
            got += reader.feed(whole[cut2:])
            assert got == EVENTS and reader.closed, cut
    spaced = EventArrayReader()
    assert spaced.feed(b" [ \n" + EVENTS[0] + b" , " + EVENTS[3] + b" ] ") == [EVENTS[0], EVENTS[3]]
    empty = EventArrayReader()
    assert empty.feed(b"[]") == [] and empty.closed


@pytest.mark.parametrize(
    "data",
    [b'{"a":1}', b"[1]", b'[{"a":1}{"b":2}]', b'[{"a":1},]', b"[,", b'[{"a":1}]x', b"]"],
)
def test_reader_refuses_what_is_not_an_array_of_objects(data: bytes) -> None:
    with pytest.raises(MalformedEventArray):
        EventArrayReader().feed(data)


def test_reader_bounds_one_event() -> None:
    at_limit = b'{"a":"012345678"}'  # 17 octets
    assert EventArrayReader(max_event_bytes=17).feed(b"[" + at_limit + b"]") == [at_limit]
    with pytest.raises(MalformedEventArray, match="exceeds 16"):
        EventArrayReader(max_event_bytes=16).feed(b"[" + at_limit)
    with pytest.raises(MalformedEventArray, match="exceeds 16"):  # still incomplete
        EventArrayReader(max_event_bytes=16).feed(b'[{"a":"01234567890123456789')


def test_routes_round_trip_with_escaped_segments() -> None:
    assert parse_route("POST /run") == Route("run")
    assert parse_route(tool_result_route("r/1 x", "c?2")) == Route("tool_result", "r/1 x", "c?2")
    assert parse_route(cancel_route("r%1")) == Route("cancel", "r%1")
    for method in ("run", "GET /run", "POST /runs//cancel", "POST /runs/a/b/cancel", ""):
        assert parse_route(method) is None
