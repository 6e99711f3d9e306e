"""CC-STREAM session: a client and an agent session run against each other in memory."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.bridge import AGUI_PROTOCOL_ID, BridgeSession
from iobridge.npamp.bridge import envelope as b
from iobridge.npamp.bridge import session as session_module
from iobridge.npamp.bridge.events import (
    BridgeErrorReceived,
    BridgeFrameRejected,
    CancelAcked,
    CancelRequested,
    Event,
    ResumeRequested,
    RunRequested,
    StreamDataReceived,
    StreamEnded,
)
from iobridge.npamp.bridge.state import (
    TRANSITIONS,
    CorrelationIdInUse,
    EventIdNotIncreasing,
    Role,
    StreamInput,
    StreamState,
    StreamStateViolation,
    UnknownStream,
    next_state,
)
from iobridge.npamp.errors import InvalidState

FT = b.BridgeFrameType
RUN_INPUT = b'{"threadId":"t1","runId":"run-1","messages":[]}'
EVENTS = [b'{"type":"RUN_STARTED"}', b'{"type":"TEXT_MESSAGE_CONTENT","delta":"hi"}']


def pump(src: BridgeSession, dst: BridgeSession) -> list[Event]:
    """Deliver everything ``src`` queued to ``dst``; return ``dst``'s events."""
    events: list[Event] = []
    for frame_type, payload in src.data_to_send():
        events.extend(dst.receive_frame(frame_type, payload))
    return events


def decode(frames: list[tuple[int, bytes]]) -> list[b.BridgeMessage]:
    return [b.pull_bridge_message(ft, p, stream_control_required=True) for ft, p in frames]


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on both session paths: the compiled data runs and the Python reference."""
    if request.param == "reference":
        monkeypatch.setattr(session_module, "_speedups", None)
    return str(request.param)


@pytest.fixture
def client() -> BridgeSession:
    return BridgeSession(protocol_id=AGUI_PROTOCOL_ID)


@pytest.fixture
def agent() -> BridgeSession:
    return BridgeSession(protocol_id=AGUI_PROTOCOL_ID, resumable=True)


def started(client: BridgeSession, agent: BridgeSession, corr: bytes = b"c1") -> RunRequested:
    client.start_run(corr, RUN_INPUT)
    (event,) = pump(client, agent)
    assert isinstance(event, RunRequested)
    return event


def data_frame(corr: bytes, event_id: int, body: bytes = b"{}") -> bytes:
    return b.push_bridge_message(
        b.BridgeMessage(
            frame_type=FT.BRIDGE_STREAM_DATA,
            envelope=b.BridgeEnvelope(
                protocol_id=0x35, message_kind=5, content_type=1, correlation_id=corr
            ),
            stream_control=b.StreamControl(event_id=event_id, resumable=True),
            body=body,
        )
    )


# --- the mapping's conformance clauses ------------------------------------------------------


def test_clause2_run_request_and_event_stream_frames(
    client: BridgeSession, agent: BridgeSession
) -> None:
    client.start_run(b"c1", RUN_INPUT)
    (request,) = decode(client.data_to_send())
    assert request.frame_type is FT.BRIDGE_REQUEST and request.envelope.message_kind == 0x01
    assert request.envelope.method == "run" and request.body == RUN_INPUT
    assert request.stream_control is None  # fresh run: no StreamControl (digest §10.8)
    client.start_run(b"c2", RUN_INPUT)
    agent.receive_frame(*client.data_to_send()[0])

    ids = [agent.send_event(b"c2", e) for e in EVENTS]
    end_id = agent.end_stream(b"c2")
    frames = agent.data_to_send()
    msgs = decode(frames)
    assert ids == [1, 2] and end_id == 3
    assert [m.frame_type for m in msgs] == [FT.BRIDGE_STREAM_DATA] * 2 + [FT.BRIDGE_STREAM_END]
    assert [m.envelope.message_kind for m in msgs] == [5, 5, 6]
    assert all(m.envelope.correlation_id == b"c2" and m.envelope.method == "" for m in msgs)
    assert [m.envelope.final for m in msgs] == [False, False, True]
    assert all(m.safety_label is None for m in msgs)  # no label on stream frames (§6.1)

    got = [client.receive_frame(*f)[0] for f in frames]
    assert got == [
        StreamDataReceived(correlation_id=b"c2", event_id=1, data=EVENTS[0], resumable=True),
        StreamDataReceived(correlation_id=b"c2", event_id=2, data=EVENTS[1], resumable=True),
        StreamEnded(correlation_id=b"c2", event_id=3, data=b"", resumable=True),
    ]
    assert client.state_of(Role.CONSUMER, b"c2") is StreamState.ENDED


def test_clause3_run_error_is_an_ordinary_event(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    run_error = b'{"type":"RUN_ERROR","message":"boom","code":"X"}'
    agent.send_event(b"c1", run_error)
    agent.end_stream(b"c1")
    events = pump(agent, client)
    assert events[0] == StreamDataReceived(
        correlation_id=b"c1", event_id=1, data=run_error, resumable=True
    )
    assert isinstance(events[1], StreamEnded)


def test_clause3_uncarried_protocol_gets_protocol_unsupported(client: BridgeSession) -> None:
    no_agreement = BridgeSession(protocol_id=None)
    client.start_run(b"c1", RUN_INPUT)
    (rejected,) = pump(client, no_agreement)
    assert isinstance(rejected, BridgeFrameRejected) and rejected.replied
    assert isinstance(rejected.error, b.ProtocolUnsupported)
    (error,) = pump(no_agreement, client)
    assert error == BridgeErrorReceived(
        correlation_id=b"c1",
        role=Role.CONSUMER,
        code=b.TransportErrorCode.PROTOCOL_UNSUPPORTED,
        message=str(rejected.error),
        body=error.body if isinstance(error, BridgeErrorReceived) else b"",
    )
    with pytest.raises(InvalidState):
        no_agreement.start_run(b"x", RUN_INPUT)  # never emit 0x35 without agreement


def test_clause3_not_delivered_is_reported_never_success(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.fail(b"c1", b.TransportErrorCode.NOT_DELIVERED, "agent unavailable")
    (event,) = pump(agent, client)
    assert isinstance(event, BridgeErrorReceived)
    assert event.code is b.TransportErrorCode.NOT_DELIVERED
    assert client.state_of(Role.CONSUMER, b"c1") is StreamState.FAILED
    with pytest.raises(InvalidState):
        agent.send_event(b"c1", b"{}")


def test_clause5_cancel_acked_once_with_last_event_sent(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.send_event(b"c1", EVENTS[0])
    pump(agent, client)
    agent.send_event(b"c1", EVENTS[1])  # in flight when the client cancels
    in_flight = agent.data_to_send()

    client.cancel_run(b"c1")
    (cancel,) = decode(client.data_to_send())
    assert cancel.frame_type is FT.BRIDGE_STREAM_END and cancel.envelope.final
    assert cancel.stream_control == b.StreamControl(control=b.Control.CANCEL, event_id=1)

    events = agent.receive_frame(FT.BRIDGE_STREAM_END, b.push_bridge_message(cancel))
    assert events == [CancelRequested(correlation_id=b"c1", cursor=1, tail_event_id=2)]
    acks = agent.data_to_send()
    assert len(acks) == 1
    (ack,) = decode(acks)
    assert ack.envelope.final and ack.stream_control is not None
    assert ack.stream_control.cancel_ack and ack.stream_control.event_id == 2
    with pytest.raises(InvalidState):
        agent.send_event(b"c1", b"{}")  # nothing after the final END
    with pytest.raises(InvalidState):
        agent.end_stream(b"c1")
    assert agent.data_to_send() == []

    assert client.receive_frame(*in_flight[0]) == []  # discarded after cancel (§7.1)
    assert client.receive_frame(*acks[0]) == [CancelAcked(correlation_id=b"c1", event_id=2)]
    assert client.state_of(Role.CONSUMER, b"c1") is StreamState.CANCELLED


def test_clause5_cancel_after_natural_end_is_moot(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.end_stream(b"c1")
    (end_frame,) = agent.data_to_send()
    client.cancel_run(b"c1")
    assert pump(client, agent) == []
    assert agent.data_to_send() == []  # no second terminating frame
    (ended,) = client.receive_frame(*end_frame)
    assert isinstance(ended, StreamEnded)  # the cancel is moot, not an error


def test_clause5_resume_request_shape_and_duplicates_discarded(agent: BridgeSession) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    label = b.SafetyLabel(effect=b.Effect.NON_IDEMPOTENT_WRITE, scope="t1")
    client.resume_run(b"c1", RUN_INPUT, cursor=2, safety_label=label)
    frames = client.data_to_send()
    (req,) = decode(frames)
    assert req.frame_type is FT.BRIDGE_REQUEST and req.envelope.correlation_id == b"c1"
    assert req.envelope.method == "run" and req.safety_label == label
    assert req.stream_control == b.StreamControl(control=b.Control.RESUME, event_id=2)

    (event,) = agent.receive_frame(*frames[0])
    assert event == ResumeRequested(
        correlation_id=b"c1", cursor=2, body=RUN_INPUT, safety_label=label, effect=label.effect
    )
    assert agent.send_event(b"c1", b'{"n":3}') == 3  # strictly above the cursor

    assert client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 2)) == []
    (got,) = pump(agent, client)
    assert isinstance(got, StreamDataReceived) and got.event_id == 3


def test_clause6_missing_safety_label_is_destructive(agent: BridgeSession) -> None:
    payload = b.push_bridge_message(
        b.BridgeMessage(
            frame_type=FT.BRIDGE_REQUEST,
            envelope=b.BridgeEnvelope(
                protocol_id=0x35, message_kind=1, content_type=1, correlation_id=b"c9", method="run"
            ),
            body=RUN_INPUT,
        )
    )
    (event,) = agent.receive_frame(FT.BRIDGE_REQUEST, payload)
    assert isinstance(event, RunRequested)
    assert event.safety_label is None and event.effect == b.Effect.DESTRUCTIVE


def test_clause6_every_run_request_carries_a_label(client: BridgeSession) -> None:
    client.start_run(b"c1", RUN_INPUT)
    client.resume_run(b"c2", cursor=0)
    labels = [m.safety_label for m in decode(client.data_to_send())]
    assert labels == [b.SafetyLabel(effect=b.Effect.DESTRUCTIVE)] * 2


# --- event_id invariant --------------------------------------------------------------------


@pytest.mark.parametrize("second", [1, 0])
def test_consumer_rejects_non_increasing_event_id(
    client: BridgeSession, agent: BridgeSession, second: int
) -> None:
    started(client, agent)
    assert client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 1))
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", second))
    assert isinstance(rejected, BridgeFrameRejected) and rejected.replied
    assert isinstance(rejected.error, EventIdNotIncreasing)
    assert client.state_of(Role.CONSUMER, b"c1") is StreamState.FAILED
    (upstream,) = pump(client, agent)  # the producer learns its stream was rejected
    assert isinstance(upstream, BridgeErrorReceived) and upstream.role is Role.PRODUCER
    assert upstream.code is b.TransportErrorCode.ENVELOPE_MALFORMED
    assert agent.state_of(Role.PRODUCER, b"c1") is StreamState.FAILED


def test_first_event_id_zero_is_rejected(client: BridgeSession, agent: BridgeSession) -> None:
    started(client, agent)
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 0))
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, EventIdNotIncreasing)


def test_end_event_id_must_exceed_every_data_id(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 5))
    end = b.push_bridge_message(
        b.BridgeMessage(
            frame_type=FT.BRIDGE_STREAM_END,
            envelope=b.BridgeEnvelope(
                protocol_id=0x35, message_kind=6, content_type=1, flags=1, correlation_id=b"c1"
            ),
            stream_control=b.StreamControl(event_id=5),
        )
    )
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_END, end)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, EventIdNotIncreasing)


def test_producer_event_ids_strictly_increase(agent: BridgeSession, client: BridgeSession) -> None:
    started(client, agent)
    ids = [agent.send_event(b"c1", b"{}") for _ in range(50)]
    assert ids == list(range(1, 51))
    assert agent.end_stream(b"c1") == 51


# --- resume --------------------------------------------------------------------------------


def test_resume_in_session_after_end(client: BridgeSession, agent: BridgeSession) -> None:
    started(client, agent)
    agent.send_event(b"c1", EVENTS[0])
    agent.end_stream(b"c1")
    pump(agent, client)
    with pytest.raises(InvalidState):
        client.resume_run(b"c1", cursor=2)  # more than was received
    client.resume_run(b"c1")
    (event,) = pump(client, agent)
    assert isinstance(event, ResumeRequested) and event.cursor == 1


def test_consumer_must_not_resume_non_resumable(client: BridgeSession) -> None:
    plain = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)  # resumable=False
    started(client, plain)
    plain.end_stream(b"c1")
    (ended,) = pump(plain, client)
    assert isinstance(ended, StreamEnded) and not ended.resumable
    with pytest.raises(InvalidState):
        client.resume_run(b"c1")


def test_refused_resume_reports_not_resumable(agent: BridgeSession) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.resume_run(b"c1", cursor=4)
    pump(client, agent)
    agent.fail(b"c1", b.TransportErrorCode.NOT_RESUMABLE)
    (event,) = pump(agent, client)
    assert isinstance(event, BridgeErrorReceived)
    assert event.code is b.TransportErrorCode.NOT_RESUMABLE


def test_resuming_a_cancelled_stream_is_refused(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    client.cancel_run(b"c1")
    pump(client, agent)
    pump(agent, client)
    with pytest.raises(InvalidState):
        client.resume_run(b"c1", cursor=0)  # a consumer never resumes what it cancelled
    other = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    other.resume_run(b"c1", cursor=0)
    (rejected,) = pump(other, agent)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.ResumeRefused)
    (answer,) = pump(agent, other)
    assert isinstance(answer, BridgeErrorReceived)
    assert answer.code is b.TransportErrorCode.NOT_RESUMABLE


# --- correlation and carriage rules --------------------------------------------------------


def test_both_directions_may_use_the_same_correlation_id(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent, b"r1")
    agent.start_run(b"r1", RUN_INPUT)  # the agent's own request (BRIDGE §5)
    (event,) = pump(agent, client)
    assert isinstance(event, RunRequested)
    assert client.state_of(Role.PRODUCER, b"r1") is StreamState.PRODUCING
    assert client.state_of(Role.CONSUMER, b"r1") is StreamState.CONSUMING


def test_outstanding_correlation_id_cannot_be_reused(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    with pytest.raises(InvalidState):
        client.start_run(b"c1", RUN_INPUT)
    other = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    other.start_run(b"c1", RUN_INPUT)
    (rejected,) = pump(other, agent)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, CorrelationIdInUse)
    assert agent.state_of(Role.PRODUCER, b"c1") is StreamState.PRODUCING  # untouched


def test_other_methods_are_unsupported(agent: BridgeSession) -> None:
    payload = b.push_bridge_message(
        b.BridgeMessage(
            frame_type=FT.BRIDGE_REQUEST,
            envelope=b.BridgeEnvelope(
                protocol_id=0x35, message_kind=1, content_type=1, correlation_id=b"c", method="x"
            ),
        )
    )
    (rejected,) = agent.receive_frame(FT.BRIDGE_REQUEST, payload)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.MethodUnsupported)
    body = decode(agent.data_to_send())[0].body
    assert b.pull_bridge_error_body(body) is not None


def test_unaccepted_content_type_is_rejected(agent: BridgeSession) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.start_run(b"c1", RUN_INPUT)
    ((ft, payload),) = client.data_to_send()
    payload = payload[:6] + b"\x02" + payload[7:]  # content_type CBOR, not agreed
    (rejected,) = agent.receive_frame(ft, payload)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.ContentTypeUnsupported)


def test_stream_frame_without_stream_control_is_rejected(client: BridgeSession) -> None:
    client.start_run(b"c1", RUN_INPUT)
    payload = b.push_envelope(
        b.BridgeEnvelope(protocol_id=0x35, message_kind=5, content_type=1, correlation_id=b"c1")
    )
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_DATA, payload + b"{}")
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.StreamControlMissing)


def test_strict_mode_rejects_a_method_on_stream_frames() -> None:
    strict = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, strict_stream_method=True)
    strict.start_run(b"c1", RUN_INPUT)
    payload = b.push_envelope(
        b.BridgeEnvelope(
            protocol_id=0x35, message_kind=5, content_type=1, correlation_id=b"c1", method="run"
        )
    ) + b.push_stream_control(b.StreamControl(event_id=1))
    (rejected,) = strict.receive_frame(FT.BRIDGE_STREAM_DATA, payload)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.MethodOnStreamFrame)


def test_unknown_stream_and_notifications(client: BridgeSession) -> None:
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"zz", 1))
    assert isinstance(rejected, BridgeFrameRejected) and isinstance(rejected.error, UnknownStream)
    notify = b.push_envelope(b.BridgeEnvelope(protocol_id=0x35, message_kind=3, content_type=1))
    client.data_to_send()
    (dropped,) = client.receive_frame(FT.BRIDGE_NOTIFY, notify)
    assert isinstance(dropped, BridgeFrameRejected) and not dropped.replied
    assert client.data_to_send() == []  # a notification is never answered


def test_response_to_a_run_is_a_state_violation(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    payload = b.push_envelope(
        b.BridgeEnvelope(protocol_id=0x35, message_kind=2, content_type=1, correlation_id=b"c1")
    )
    (rejected,) = client.receive_frame(FT.BRIDGE_RESPONSE, payload)
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, StreamStateViolation)
    assert client.state_of(Role.CONSUMER, b"c1") is StreamState.ERROR


def test_closed_streams_are_bounded(agent: BridgeSession) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, max_closed_streams=3)
    for i in range(10):
        corr = f"c{i}".encode()
        client.start_run(corr, RUN_INPUT)
        pump(client, agent)
        agent.end_stream(corr)
        pump(agent, client)
    known = [client.state_of(Role.CONSUMER, f"c{i}".encode()) for i in range(10)]
    assert known == [None] * 7 + [StreamState.ENDED] * 3


# --- the machine and fuzz ------------------------------------------------------------------


@given(st.sampled_from(list(StreamState)), st.sampled_from(list(StreamInput)), st.booleans())
def test_every_state_input_pair_is_a_transition_or_an_error(
    state: StreamState, event: StreamInput, local: bool
) -> None:
    try:
        nxt = next_state(state, event, local=local)
    except InvalidState:
        assert local and (state, event) not in TRANSITIONS
    except StreamStateViolation:
        assert not local and (state, event) not in TRANSITIONS
    else:
        assert TRANSITIONS[(state, event)] is nxt
        assert state is not StreamState.ERROR


@given(st.lists(st.tuples(st.integers(0x0100, 0x0106), st.binary(max_size=60)), max_size=8))
def test_fuzz_receive_frame_never_raises(frames: list[tuple[int, bytes]]) -> None:
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    session.start_run(b"r1", RUN_INPUT)
    prefix = b"\x00\x10\x00\x08\x35"
    for frame_type, tail in frames:
        for payload in (tail, prefix + tail):
            for event in session.receive_frame(frame_type, payload):
                assert not isinstance(event, BridgeFrameRejected) or isinstance(
                    event.error, b.BridgeProtocolError
                )
    session.data_to_send()


def test_consumer_fast_path_matches_the_checked_decoder(
    client: BridgeSession, agent: BridgeSession
) -> None:
    """After one checked data frame, frames with the same envelope take the per-event path;
    anything it does not recognise still gets the checked decoder's exact answer."""
    started(client, agent)
    data = FT.BRIDGE_STREAM_DATA
    for event_id in (1, 2):
        (event,) = client.receive_frame(data, data_frame(b"c1", event_id, b'{"n":%d}' % event_id))
        assert event == StreamDataReceived(
            correlation_id=b"c1", event_id=event_id, data=b'{"n":%d}' % event_id, resumable=True
        )
    # A SafetyLabel after the StreamControl is not part of the event.
    label = b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY))
    framed = data_frame(b"c1", 3, b"")
    (event,) = client.receive_frame(data, framed + label + b'{"n":3}')
    assert isinstance(event, StreamDataReceived) and event.data == b'{"n":3}'
    # cancel_ack on a data frame, and a repeated event_id: refused as before.
    bad_ack = bytearray(data_frame(b"c1", 4))
    flags_at = 4 + bad_ack[3] + 4 + 2  # envelope TLV, StreamControl type/length, version, control
    bad_ack[flags_at] |= 0x02
    (rejected,) = client.receive_frame(data, bytes(bad_ack))
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.StreamControlMisplaced)
    client.data_to_send()
    started(client, agent, b"c2")
    client.receive_frame(data, data_frame(b"c2", 5))
    (again,) = client.receive_frame(data, data_frame(b"c2", 5))
    assert isinstance(again, BridgeFrameRejected)
    assert isinstance(again.error, EventIdNotIncreasing)
    assert client.state_of(Role.CONSUMER, b"c2") is StreamState.FAILED
    (late,) = client.receive_frame(data, data_frame(b"c2", 6))  # the failed stream: not fast
    assert isinstance(late, BridgeFrameRejected)


def test_receive_frames_gives_the_events_receive_frame_would() -> None:
    """The consumer's batch path: one batch mixing fast data frames, a duplicate, a malformed
    frame, a second stream and the END yields, in order, exactly what feeding the frames one
    by one does, and queues the same BRIDGE_ERROR replies."""
    data = FT.BRIDGE_STREAM_DATA
    batch = [
        (data, data_frame(b"c1", 1, b'{"n":1}')),  # checked (learns the envelope)
        (data, data_frame(b"c1", 2, b'{"n":2}')),  # fast
        (data, data_frame(b"c2", 1)),  # the other stream's first frame
        (data, data_frame(b"c1", 2)),  # repeated event_id: refused, c1 fails
        (data, b"\x00\x10"),  # truncated envelope: EnvelopeMalformed answered
        (data, data_frame(b"c2", 2, b'{"n":22}')),  # fast on c2
        (FT.BRIDGE_STREAM_END, end_frame(b"c2", 3)),
    ]
    results = []
    for batched in (False, True):
        consumer, producer = BridgeSession(protocol_id=AGUI_PROTOCOL_ID), BridgeSession(
            protocol_id=AGUI_PROTOCOL_ID, resumable=True
        )
        started(consumer, producer, b"c1")
        started(consumer, producer, b"c2")
        if batched:
            events = consumer.receive_frames(batch)
        else:
            events = [e for ft, p in batch for e in consumer.receive_frame(ft, p)]
        states = [consumer.state_of(Role.CONSUMER, c) for c in (b"c1", b"c2")]
        results.append((events, consumer.data_to_send(), states))
    (one_by_one, replies, states), batched_result = results
    assert batched_result[1] == replies and batched_result[2] == states
    assert [type(e) for e in batched_result[0]] == [type(e) for e in one_by_one]
    for got, want in zip(batched_result[0], one_by_one, strict=True):
        if isinstance(want, BridgeFrameRejected):
            assert isinstance(got, BridgeFrameRejected)
            assert type(got.error) is type(want.error) and str(got.error) == str(want.error)
        else:
            assert got == want
    assert [e.data for e in one_by_one if isinstance(e, StreamDataReceived)] == [
        b'{"n":1}', b'{"n":2}', b"{}", b'{"n":22}'
    ]
    assert len(replies) == 2 and states == [StreamState.FAILED, StreamState.ENDED]


@pytest.mark.parametrize("resumable", [True, False])
def test_send_events_queues_the_frames_send_event_would(resumable: bool) -> None:
    """The batch producer path gives octet-identical frames and event ids, also when the
    batch opens the stream (its first frame goes through the checked encoder)."""
    events, frames = [b'{"type":"CUSTOM","n":%d}' % i for i in range(5)], []
    for batched in (False, True):
        consumer = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
        producer = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, resumable=resumable)
        started(consumer, producer)
        if batched:
            assert producer.send_events(b"c1", events[:2]) == 2
            assert producer.send_events(b"c1", []) == 2
            assert producer.send_events(b"c1", events[2:]) == len(events)
        else:
            assert [producer.send_event(b"c1", e) for e in events] == list(
                range(1, len(events) + 1)
            )
        frames.append(producer.data_to_send())
        producer.end_stream(b"c1")
        frames.append(producer.data_to_send())
    assert frames[0] == frames[2] and frames[1] == frames[3]
    received = [m.body for m in decode(frames[2])]
    assert received == events


def test_send_events_on_a_stream_that_is_not_producing_queues_nothing(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.end_stream(b"c1")
    agent.data_to_send()
    with pytest.raises(InvalidState):
        agent.send_events(b"c1", EVENTS)
    with pytest.raises(InvalidState):
        agent.send_events(b"nope", EVENTS)
    assert agent.data_to_send() == []


# --- what the peer and the caller are told (mutation-checked) ------------------------------


def reply_error(session: BridgeSession) -> tuple[b.TransportErrorCode, str]:
    """The transport error code and reason of the one BRIDGE_ERROR ``session`` queued."""
    ((ft, payload),) = session.data_to_send()
    assert ft == FT.BRIDGE_ERROR
    body = b.pull_bridge_error_body(b.pull_bridge_message(ft, payload).body)
    assert body is not None
    return body.code, body.message


def request_payload(
    corr: bytes = b"c1", method: str = "run", protocol_id: int = 0x35, content_type: int = 1
) -> bytes:
    envelope = b.BridgeEnvelope(
        protocol_id=protocol_id,
        message_kind=1,
        content_type=content_type,
        correlation_id=corr,
        method=method,
    )
    msg = b.BridgeMessage(frame_type=FT.BRIDGE_REQUEST, envelope=envelope, body=RUN_INPUT)
    return b.push_bridge_message(msg)


def end_frame(
    corr: bytes, event_id: int, *, cancel_ack: bool = False, resumable: bool = False
) -> bytes:
    envelope = b.BridgeEnvelope(
        protocol_id=0x35, message_kind=6, content_type=1, flags=1, correlation_id=corr
    )
    sc = b.StreamControl(event_id=event_id, cancel_ack=cancel_ack, resumable=resumable)
    msg = b.BridgeMessage(frame_type=FT.BRIDGE_STREAM_END, envelope=envelope, stream_control=sc)
    return b.push_bridge_message(msg)


def test_run_requested_carries_the_request(client: BridgeSession, agent: BridgeSession) -> None:
    label = b.SafetyLabel(effect=b.Effect.READ_ONLY, scope="t1")
    client.start_run(b"c1", RUN_INPUT, safety_label=label)
    assert pump(client, agent) == [
        RunRequested(correlation_id=b"c1", body=RUN_INPUT, safety_label=label, effect=label.effect)
    ]


@pytest.mark.parametrize("resume", [False, True], ids=["run", "resume"])
def test_the_stream_answers_in_the_request_content_type(resume: bool) -> None:
    both = frozenset({b.ContentType.JSON, b.ContentType.CBOR})
    agent = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, content_types=both)
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, content_types=both)
    client.start_run(b"c0", RUN_INPUT)  # a JSON consumer stream, so the client expects c1 next
    if resume:
        payload = request_payload(content_type=b.ContentType.CBOR)
        sc = b.push_stream_control(b.StreamControl(control=b.Control.RESUME, event_id=0))
        at = len(b.push_envelope(b.pull_bridge_message(FT.BRIDGE_REQUEST, payload).envelope))
        payload = payload[:at] + sc + payload[at:]
    else:
        payload = request_payload(content_type=b.ContentType.CBOR)
    agent.receive_frame(FT.BRIDGE_REQUEST, payload)
    agent.send_event(b"c1", b"\xa0")
    agent.end_stream(b"c1")
    assert [m.envelope.content_type for m in decode(agent.data_to_send())] == [2, 2]


@pytest.mark.parametrize(
    ("payload", "code", "reason"),
    [
        (
            lambda: request_payload(protocol_id=0x36),
            b.TransportErrorCode.PROTOCOL_UNSUPPORTED,
            "protocol_id 0x36 is not carried",
        ),
        (
            lambda: request_payload(content_type=2),
            b.TransportErrorCode.ENVELOPE_MALFORMED,
            "content_type 0x02 not accepted",
        ),
        (
            lambda: request_payload(method="stop"),
            b.TransportErrorCode.METHOD_UNSUPPORTED,
            "AG-UI carries only 'run', not 'stop'",
        ),
    ],
    ids=["protocol", "content-type", "method"],
)
def test_a_refused_request_is_answered_with_its_reason(
    agent: BridgeSession, payload: Any, code: b.TransportErrorCode, reason: str
) -> None:
    (rejected,) = agent.receive_frame(FT.BRIDGE_REQUEST, payload())
    assert isinstance(rejected, BridgeFrameRejected) and str(rejected.error) == reason
    assert reply_error(agent) == (code, reason)
    assert agent.state_of(Role.PRODUCER, b"c1") is None  # nothing was opened


def test_no_agreement_refuses_even_our_own_protocol_id() -> None:
    none = BridgeSession(protocol_id=None)
    (rejected,) = none.receive_frame(FT.BRIDGE_REQUEST, request_payload())
    assert str(rejected.error) == "protocol_id 0x35 is not carried"  # type: ignore[union-attr]


def test_refused_resumes_are_answered_with_their_reason(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.send_event(b"c1", b"{}")
    agent.data_to_send()
    other = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    other.resume_run(b"c1", cursor=1)
    assert [type(e) for e in pump(other, agent)] == [BridgeFrameRejected]
    assert reply_error(agent) == (
        b.TransportErrorCode.NOT_RESUMABLE,
        "cannot resume a stream that is PRODUCING",
    )
    agent.end_stream(b"c1")  # the END is event 2: a cursor of 2 is what was sent, 3 is not
    agent.data_to_send()
    late = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    late.resume_run(b"c1", cursor=3)
    assert [type(e) for e in pump(late, agent)] == [BridgeFrameRejected]
    assert reply_error(agent) == (
        b.TransportErrorCode.NOT_RESUMABLE,
        "cursor 3 is beyond the last event sent",
    )
    exact = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    exact.resume_run(b"c1", cursor=2)
    assert pump(exact, agent) == [
        ResumeRequested(
            correlation_id=b"c1",
            cursor=2,
            body=b"",
            safety_label=b.SafetyLabel(effect=b.Effect.DESTRUCTIVE),
            effect=b.Effect.DESTRUCTIVE,
        )
    ]


def test_bad_stream_frames_are_answered_with_their_reason(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 4))
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 4))
    assert reply_error(client)[1] == "event_id 4 does not exceed 4"
    client.start_run(b"c2", RUN_INPUT)
    pump(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c2", 4))
    client.receive_frame(FT.BRIDGE_STREAM_END, end_frame(b"c2", 3))
    assert reply_error(client)[1] == "END event_id 3 does not exceed data event_id 4"
    client.start_run(b"c3", RUN_INPUT)
    pump(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c3", 4))
    client.cancel_run(b"c3")
    client.data_to_send()
    client.receive_frame(FT.BRIDGE_STREAM_END, end_frame(b"c3", 3, cancel_ack=True))
    assert reply_error(client)[1] == "cancel_ack tail 3 is below event 4"
    assert client.state_of(Role.CONSUMER, b"c3") is StreamState.FAILED
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"zz", 1))
    assert reply_error(client)[1] == "no consumer stream with correlation_id b'zz'"
    bare = b.push_envelope(
        b.BridgeEnvelope(protocol_id=0x35, message_kind=5, content_type=1, correlation_id=b"c1")
    )
    client.data_to_send()
    client.receive_frame(FT.BRIDGE_STREAM_DATA, bare)
    assert reply_error(client)[1] == "BRIDGE_STREAM_DATA of an AG-UI run lacks StreamControl"


def test_a_cancel_ack_tail_equal_to_the_last_event_is_accepted(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 4))
    client.cancel_run(b"c1")
    events = client.receive_frame(FT.BRIDGE_STREAM_END, end_frame(b"c1", 4, cancel_ack=True))
    assert events == [CancelAcked(correlation_id=b"c1", event_id=4)]


def test_strict_mode_names_the_method_it_refuses() -> None:
    strict = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, strict_stream_method=True)
    strict.start_run(b"c1", RUN_INPUT)
    strict.data_to_send()
    envelope = b.BridgeEnvelope(
        protocol_id=0x35, message_kind=5, content_type=1, correlation_id=b"c1", method="run"
    )
    payload = b.push_envelope(envelope) + b.push_stream_control(b.StreamControl(event_id=1))
    strict.receive_frame(FT.BRIDGE_STREAM_DATA, payload)
    assert reply_error(strict)[1] == "BRIDGE_STREAM_DATA carries method 'run'"
    lenient = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)  # the default accepts it (§10.11)
    lenient.start_run(b"c1", RUN_INPUT)
    (event,) = lenient.receive_frame(FT.BRIDGE_STREAM_DATA, payload)
    assert isinstance(event, StreamDataReceived)


def test_a_notification_is_dropped_with_its_reason(client: BridgeSession) -> None:
    notify = b.push_envelope(b.BridgeEnvelope(protocol_id=0x35, message_kind=3, content_type=1))
    (dropped,) = client.receive_frame(FT.BRIDGE_NOTIFY, notify)
    assert isinstance(dropped, BridgeFrameRejected)
    assert str(dropped.error) == "AG-UI defines no notifications; dropped (never answered)"


@pytest.mark.parametrize(
    "frame",
    [
        lambda: end_frame(b"c1", 9, cancel_ack=True),  # an ack for a cancel never sent
        lambda: end_frame(b"c1", 9),  # a second END
    ],
    ids=["cancel-ack-after-end", "second-end"],
)
def test_stream_frames_the_state_forbids_are_refused_not_raised(
    client: BridgeSession, agent: BridgeSession, frame: Any
) -> None:
    started(client, agent)
    agent.end_stream(b"c1")
    pump(agent, client)
    (rejected,) = client.receive_frame(FT.BRIDGE_STREAM_END, frame())
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, StreamStateViolation)


def test_a_second_cancel_and_a_late_error_are_refused_not_raised(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    client.cancel_run(b"c1")
    (cancel,) = client.data_to_send()
    agent.receive_frame(*cancel)
    agent.data_to_send()
    (rejected,) = agent.receive_frame(*cancel)  # the stream is CANCELLED now
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, StreamStateViolation)
    assert str(rejected.error) == "RECV_CANCEL is not allowed in state CANCELLED"
    started(client, agent, b"c2")
    agent.end_stream(b"c2")
    agent.data_to_send()
    error = b.BridgeEnvelope(protocol_id=0x35, message_kind=4, content_type=1, correlation_id=b"c2")
    body = b.push_bridge_error_body(b.BridgeErrorBody(code=b.TransportErrorCode.NOT_DELIVERED))
    msg = b.BridgeMessage(frame_type=FT.BRIDGE_ERROR, envelope=error, body=body)
    (late,) = agent.receive_frame(FT.BRIDGE_ERROR, b.push_bridge_message(msg))
    assert isinstance(late, BridgeFrameRejected)
    assert isinstance(late.error, StreamStateViolation)


def test_a_received_error_reports_its_code_message_and_body(
    client: BridgeSession, agent: BridgeSession
) -> None:
    started(client, agent)
    agent.fail(b"c1", b.TransportErrorCode.NOT_DELIVERED, "agent unavailable")
    (event,) = pump(agent, client)
    body = b.push_bridge_error_body(
        b.BridgeErrorBody(code=b.TransportErrorCode.NOT_DELIVERED, message="agent unavailable")
    )
    assert event == BridgeErrorReceived(
        correlation_id=b"c1",
        role=Role.CONSUMER,
        code=b.TransportErrorCode.NOT_DELIVERED,
        message="agent unavailable",
        body=body,
    )
    started(client, agent, b"c2")
    agent.fail(b"c2", b.TransportErrorCode.NOT_DELIVERED)
    (bare,) = pump(agent, client)
    assert isinstance(bare, BridgeErrorReceived) and bare.message == ""
    assert bare.body == bytes((b.TransportErrorCode.NOT_DELIVERED, 0))
    started(client, agent, b"c3")
    foreign = b'{"code":-32000}'  # a foreign error object, not a transport error
    error = b.BridgeEnvelope(protocol_id=0x35, message_kind=4, content_type=1, correlation_id=b"c3")
    msg = b.BridgeMessage(frame_type=FT.BRIDGE_ERROR, envelope=error, body=foreign)
    (got,) = client.receive_frame(FT.BRIDGE_ERROR, b.push_bridge_message(msg))
    assert got == BridgeErrorReceived(
        correlation_id=b"c3", role=Role.CONSUMER, code=None, message="", body=foreign
    )


def test_local_misuse_raises_invalid_state_with_its_reason(
    client: BridgeSession, agent: BridgeSession
) -> None:
    lacks = r"^cursor is required to resume a stream this session lacks$"
    with pytest.raises(InvalidState, match=lacks):
        client.resume_run(b"c1")
    with pytest.raises(InvalidState, match=r"^a request needs a non-empty correlation_id$"):
        client.resume_run(b"", cursor=0)
    with pytest.raises(InvalidState, match=r"^no AG-UI protocol_id is agreed with this peer"):
        BridgeSession(protocol_id=None).resume_run(b"c1", cursor=0)
    with pytest.raises(InvalidState, match=r"^no consumer stream with correlation_id b'zz'$"):
        client.cancel_run(b"zz")
    with pytest.raises(InvalidState, match=r"^no producer stream with correlation_id b'zz'$"):
        agent.send_event(b"zz", b"{}")
    started(client, agent)
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c1", 1))  # resumable=True
    with pytest.raises(InvalidState, match=r"^SEND_RESUME is not allowed in state CONSUMING$"):
        client.resume_run(b"c1")  # the stream is still running
    started(client, agent, b"c2")
    client.receive_frame(FT.BRIDGE_STREAM_DATA, data_frame(b"c2", 1))
    client.receive_frame(FT.BRIDGE_STREAM_END, end_frame(b"c2", 2, resumable=True))
    with pytest.raises(InvalidState, match=r"^cursor 3 exceeds the last event received$"):
        client.resume_run(b"c2", cursor=3)
    with pytest.raises(InvalidState, match=r"^SEND_CANCEL is not allowed in state ENDED$"):
        client.cancel_run(b"c2")
    agent.end_stream(b"c2")
    with pytest.raises(InvalidState, match=r"^SEND_ERROR is not allowed in state ENDED$"):
        agent.fail(b"c2", b.TransportErrorCode.NOT_DELIVERED)
    plain = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)  # a producer that retains nothing
    started(client, plain, b"c3")
    plain.end_stream(b"c3")
    pump(plain, client)
    with pytest.raises(
        InvalidState, match=r"^the stream was not advertised resumable \(CC-STREAM §6\.1\)$"
    ):
        client.resume_run(b"c3")


def test_resume_cursor_is_a_u64() -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.resume_run(b"c1", cursor=2**64 - 1)  # the largest u64 is a valid cursor
    (req,) = decode(client.data_to_send())
    assert req.stream_control == b.StreamControl(control=b.Control.RESUME, event_id=2**64 - 1)
    with pytest.raises(InvalidState, match=rf"^cursor {2**64} is not a u64$"):
        client.resume_run(b"c2", cursor=2**64)
    with pytest.raises(InvalidState, match=r"^cursor -1 is not a u64$"):
        client.resume_run(b"c3", cursor=-1)


@pytest.mark.parametrize("cursor", [2**64 - 2, 2**64 - 1])
def test_a_producer_stops_at_the_last_u64_event_id(agent: BridgeSession, cursor: int) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.resume_run(b"c1", cursor=cursor)
    pump(client, agent)
    if cursor == 2**64 - 2:
        assert agent.send_event(b"c1", b"{}") == 2**64 - 1  # through the checked encoder
    exhausted = r"^the stream's u64 event_id space is exhausted$"
    with pytest.raises(InvalidState, match=exhausted):
        agent.send_event(b"c1", b"{}")
    with pytest.raises(InvalidState, match=exhausted):
        agent.end_stream(b"c1")


def test_the_fast_path_starts_after_the_producer_last_checked_event(agent: BridgeSession) -> None:
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.resume_run(b"c1", cursor=2**64 - 3)
    pump(client, agent)
    assert [agent.send_event(b"c1", b"{}") for _ in range(2)] == [2**64 - 2, 2**64 - 1]
    with pytest.raises(InvalidState, match=r"^the stream's u64 event_id space is exhausted$"):
        agent.send_event(b"c1", b"{}")


def test_a_cancel_and_its_ack_carry_no_body(client: BridgeSession, agent: BridgeSession) -> None:
    started(client, agent)
    assert not client.wants_to_send()
    client.cancel_run(b"c1")
    assert client.wants_to_send()
    (cancel,) = client.data_to_send()
    assert decode([cancel])[0].body == b""
    agent.receive_frame(*cancel)
    (ack,) = decode(agent.data_to_send())
    assert ack.body == b"" and ack.stream_control is not None and ack.stream_control.cancel_ack


def test_a_255_octet_correlation_id_streams_on_both_paths() -> None:
    """The envelope TLV is then longer than 255 octets: its Length needs both octets."""
    corr = b"c" * 255
    client = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    agent = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    client.start_run(corr, RUN_INPUT)
    pump(client, agent)
    ids = [agent.send_event(corr, e) for e in EVENTS * 2]
    agent.end_stream(corr)
    events = pump(agent, client)
    assert [e.event_id for e in events if isinstance(e, StreamDataReceived)] == ids
    assert isinstance(events[-1], StreamEnded) and events[-1].correlation_id == corr
