"""The compiled per-event paths (``iobridge.npamp._speedups``) against their Python references.

Each compiled function takes a leading run of items it can prove valid and stops at the first
one it cannot; the reference then takes that item. So for any input both must give the same
events, replies, stream states, frames and errors, in the same order: these tests feed the
same input to both (and, for the consumer, frame by frame) and compare everything.
"""

from __future__ import annotations

import gc
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp import _speedups
from iobridge.npamp.association import FrameReceived
from iobridge.npamp.bridge import AGUI_PROTOCOL_ID, BridgeSession
from iobridge.npamp.bridge import envelope as b
from iobridge.npamp.bridge import session as session_module
from iobridge.npamp.bridge.events import (
    BridgeFrameRejected,
    Event,
    StreamDataReceived,
    StreamEnded,
)
from iobridge.npamp.bridge.state import EventIdNotIncreasing, Role, StreamState
from iobridge.npamp.errors import InvalidState, LocalProtocolError, NpampError, PayloadTooLarge
from iobridge.npamp.wire.frame import FrameType
from iobridge.npamp_server import client as agui_client

from .test_connection import BRIDGE, make_pair
from .test_stream import RUN_INPUT, data_frame, end_frame

FT = b.BridgeFrameType
DATA = FT.BRIDGE_STREAM_DATA
STREAMS = (b"c1", b"c2")


class Spy:
    """``_speedups`` with a count of the calls of one of its functions."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, 0

    def __getattr__(self, attr: str) -> Any:
        real = getattr(_speedups, attr)
        if attr != self.name:
            return real

        def counted(*args: Any) -> Any:
            self.calls += 1
            return real(*args)

        return counted


def consumer(*, compiled: bool, corrs: tuple[bytes, ...] = STREAMS) -> BridgeSession:
    """A consumer session with a run started for each of ``corrs``."""
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, compiled=compiled)
    for corr in corrs:
        session.start_run(corr, RUN_INPUT)
    session.data_to_send()
    return session


def outcome(events: list[Event]) -> list[Any]:
    """Events in comparable form: a rejection by its error's type and message."""
    return [
        (type(e.error), str(e.error)) if isinstance(e, BridgeFrameRejected) else e for e in events
    ]


def observed(session: BridgeSession, events: list[Event]) -> tuple[Any, ...]:
    states = [session.state_of(Role.CONSUMER, c) for c in STREAMS]
    return outcome(events), session.data_to_send(), states


# --- consumer: BridgeSession.receive_frames ------------------------------------------------

KINDS = [
    "data", "not_resumable", "reserved_flag", "cancel_ack", "version", "short_control",
    "control_resume", "control_undefined", "label_after", "control_twice", "truncated",
    "body_like_label", "other_content_type", "end", "cancel_ack_end", "unknown_stream",
]


def mutated(kind: str, corr: bytes, event_id: int, body: bytes) -> tuple[int, bytes]:
    """One Bridge frame of ``corr``: a valid data frame, or one of the ways to spoil one."""
    good = data_frame(corr, event_id, body)
    sc = 4 + int.from_bytes(good[2:4], "big")  # where the StreamControl TLV starts
    frame = bytearray(good)
    if kind == "not_resumable":
        frame[sc + 6] = 0
    elif kind == "reserved_flag":
        frame[sc + 6] |= 0x04  # reserved bits are ignored (CC-STREAM §5.2)
    elif kind == "cancel_ack":
        frame[sc + 6] |= 0x02
    elif kind == "version":
        frame[sc + 4] = 2
    elif kind == "short_control":
        frame[sc + 3] = 10
        del frame[sc + 14]
    elif kind == "control_resume":
        frame[sc + 5] = 1
    elif kind == "control_undefined":
        frame[sc + 5] = 3
    elif kind == "label_after":
        label = b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY))
        frame[sc + 15 : sc + 15] = label
    elif kind == "control_twice":
        frame[sc + 15 : sc + 15] = good[sc : sc + 15]
    elif kind == "truncated":
        del frame[sc + 9 :]
    elif kind == "body_like_label":
        frame[sc + 15 :] = b"\x00\x13\x00\x02\x01\x00" + body
    elif kind == "other_content_type":
        frame[4 + 2] = 0x02
    elif kind == "end":
        return FT.BRIDGE_STREAM_END, end_frame(corr, event_id)
    elif kind == "cancel_ack_end":
        return FT.BRIDGE_STREAM_END, end_frame(corr, event_id, cancel_ack=True)
    elif kind == "unknown_stream":
        return DATA, data_frame(b"c9", event_id, body)
    return int(DATA), bytes(frame)


ops = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.sampled_from(STREAMS),
        st.sampled_from([1, 1, 1, 0, -1, 2, 1000]),  # event_id step: mostly the next one
    ),
    max_size=24,
)


@given(ops, st.lists(st.integers(0, 30), max_size=3))
def test_receive_frames_compiled_reference_and_one_by_one_agree(
    steps: list[tuple[str, bytes, int]], cuts: list[int]
) -> None:
    """Random batches mixing valid data frames of two streams with every way the compiled
    path must refuse one (which the full decoder then accepts or rejects precisely)."""
    frames = [(int(DATA), data_frame(c, 1, b'{"first":1}')) for c in STREAMS]  # learn both
    last = dict.fromkeys(STREAMS, 1)
    for n, (kind, corr, step) in enumerate(steps):
        last[corr] = max(0, last[corr] + step)
        frames.append(mutated(kind, corr, last[corr], b'{"n":%d}' % n))
    bounds = [0, *sorted(min(c, len(frames)) for c in cuts), len(frames)]
    batches = [frames[i:j] for i, j in itertools.pairwise(bounds)]
    fast, slow, single = (consumer(compiled=c) for c in (True, False, False))
    got = [e for batch in batches for e in fast.receive_frames(batch)]
    ref = [e for batch in batches for e in slow.receive_frames(batch)]
    one = [e for ft, p in frames for e in single.receive_frame(ft, p)]
    assert observed(fast, got) == observed(slow, ref) == observed(single, one)


def test_a_malformed_frame_mid_batch_gets_the_precise_rejection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five fast frames, a data frame with cancel_ack, three more: the compiled run stops at
    the bad frame, the decoder rejects it with its own error and BRIDGE_ERROR, and the rest is
    handled as frame-by-frame handling handles it."""
    spy = Spy("stream_data")
    monkeypatch.setattr(session_module, "_speedups", spy)
    frames = [(int(DATA), data_frame(b"c1", i, b'{"n":%d}' % i)) for i in range(1, 7)]
    frames.append(mutated("cancel_ack", b"c1", 7, b"{}"))
    frames += [(int(DATA), data_frame(b"c1", i)) for i in range(7, 10)]
    session = consumer(compiled=True, corrs=(b"c1",))
    events = session.receive_frames(frames)
    assert spy.calls >= 1
    assert [e.event_id for e in events[:6] if isinstance(e, StreamDataReceived)] == [
        1, 2, 3, 4, 5, 6
    ]
    rejected = events[6]
    assert isinstance(rejected, BridgeFrameRejected)
    assert isinstance(rejected.error, b.StreamControlMisplaced)
    ((reply_type, reply),) = session.data_to_send()
    body = b.pull_bridge_error_body(b.pull_bridge_message(reply_type, reply).body)
    assert reply_type == FT.BRIDGE_ERROR and body is not None
    assert body.code == b.TransportErrorCode.ENVELOPE_MALFORMED
    reference = consumer(compiled=False, corrs=(b"c1",))
    assert outcome(events) == outcome([e for f in frames for e in reference.receive_frame(*f)])


def test_a_repeated_event_id_mid_run_fails_the_stream_on_both_paths() -> None:
    frames = [(int(DATA), data_frame(b"c1", i)) for i in (1, 2, 3, 3, 4)]
    results = []
    for compiled in (True, False):
        session = consumer(compiled=compiled)
        results.append(observed(session, session.receive_frames(frames)))
    assert results[0] == results[1]
    events, replies, states = results[0]
    assert [type(e) for e in events] == [StreamDataReceived] * 3 + [tuple, tuple]
    assert events[3][0] is EventIdNotIncreasing  # then the failed stream's frame is refused
    assert len(replies) == 2 and states[0] is StreamState.ERROR  # both frames answered


def test_the_compiled_data_run_stops_at_items_it_does_not_know() -> None:
    """Direct: anything but a (BRIDGE_STREAM_DATA, bytes) pair ends the run untouched."""
    good = data_frame(b"c1", 2)
    envelope = good[: 4 + good[3]]
    make = session_module._make_stream_data
    for odd in ([good], (DATA, good, 1), (DATA, bytearray(good)), ("x", good), (2**70, good)):
        out: list[Any] = []
        items: list[Any] = [(int(DATA), good), odd, (int(DATA), data_frame(b"c1", 3))]
        assert _speedups.stream_data(items, 0, envelope, 1, b"c1", make, out) == (1, 2, True)
        assert [e.event_id for e in out] == [2]
    out = []
    assert _speedups.stream_data([(DATA, good)], 0, envelope, 2, b"c1", make, out) == (0, 2, False)
    assert out == []  # event_id 2 does not exceed the last one


# --- producer: BridgeSession.send_events, NpampConnection.send_frames ---------------------


def producer(*, compiled: bool, cursor: int | None = None, resumable: bool = True) -> BridgeSession:
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID, resumable=resumable, compiled=compiled)
    peer = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    if cursor is None:
        peer.start_run(b"c1", RUN_INPUT)
    else:
        peer.resume_run(b"c1", cursor=cursor)
    session.receive_frames(peer.data_to_send())
    return session


@pytest.mark.parametrize("resumable", [True, False])
def test_send_events_compiled_and_reference_queue_the_same_frames(resumable: bool) -> None:
    events: list[Any] = [b'{"n":%d}' % i for i in range(6)]
    events[3] = bytearray(b'{"n":"not bytes"}')  # the compiled call stops; the reference goes on
    frames = []
    for compiled in (True, False):
        session = producer(compiled=compiled, resumable=resumable)
        assert session.send_events(b"c1", events[:1]) == 1
        assert session.send_events(b"c1", iter(events[1:])) == len(events)
        frames.append(session.data_to_send())
    assert frames[0] == frames[1]
    assert [type(p) for _, p in frames[0]] == [bytes] * len(events)
    messages = [b.pull_bridge_message(ft, p, stream_control_required=True) for ft, p in frames[0]]
    assert [m.body for m in messages] == [bytes(e) for e in events]
    assert [m.stream_control.event_id for m in messages if m.stream_control] == [1, 2, 3, 4, 5, 6]


def test_send_events_at_the_end_of_the_u64_space_on_both_paths() -> None:
    """The compiled call stops before the exhausted id; the reference raises there, having
    queued the frames before it, exactly as event-by-event sending does."""
    results = []
    for compiled in (True, False):
        session = producer(compiled=compiled, cursor=2**64 - 5)
        with pytest.raises(InvalidState, match="u64 event_id space is exhausted"):
            session.send_events(b"c1", [b"{}"] * 6)
        results.append(session.data_to_send())
        assert session.send_events(b"c1", []) == 2**64 - 1
    assert results[0] == results[1] and len(results[0]) == 4


@pytest.mark.parametrize(
    ("channel", "frames", "error"),
    [
        (BRIDGE, [(0x0104, b"ok"), (FrameType.PING, b"")], LocalProtocolError),
        (BRIDGE, [(0x0104, b"ok"), (0, b"")], LocalProtocolError),
        (BRIDGE, [(0x0104, b"ok"), (0x10000, b"")], LocalProtocolError),
        (BRIDGE, [(0x0104, b"ok"), (0x0104, bytes(1 << 24))], PayloadTooLarge),
        (0x0000, [(0x0104, b"ok"), (FrameType.CLOSE, b"")], LocalProtocolError),
        (0x0000, [(0x0104, b"ok"), (FrameType.PING, b"")], LocalProtocolError),
    ],
)
def test_send_frames_refuses_a_bad_frame_of_a_batch_before_sealing_any(
    channel: int, frames: list[tuple[int, bytes]], error: type[NpampError],
) -> None:
    _, server = make_pair()
    with pytest.raises(error) as raised:
        server.send_frames(channel, frames)
    assert server.data_to_send() == b""
    one_by_one = make_pair()[1]
    with pytest.raises(error) as alone:  # the error send_frame gives the first bad frame
        for frame in frames:
            one_by_one.send_frame(channel, *frame)
    assert str(raised.value) == str(alone.value)


def test_send_frames_seals_other_payload_types_like_bytes() -> None:
    frames: list[Any] = [(0x0104, b"a"), (0x0104, bytearray(b"b")), (0x0105, b"c")]
    client, server = make_pair()
    server.send_frames(BRIDGE, frames)
    events = client.receive_data(server.data_to_send())
    received = [(e.frame_type, e.payload, e.seq) for e in events if isinstance(e, FrameReceived)]
    assert received == [(0x0104, b"a", 0), (0x0104, b"b", 1), (0x0105, b"c", 2)]


# --- the AG-UI client: AgUiClient._handle over a compiled or a reference session ---------


def handled(
    monkeypatch: pytest.MonkeyPatch, compiled: bool, batch: list[tuple[int, int, bytes]]
) -> tuple[dict[bytes, list[Any]], list[bytes], BaseException | None]:
    """What one batch of frames ``(channel, frame_type, payload)`` queues on the streams
    ``c1`` and ``c2`` of a client (its session compiled or the reference), the Discovery
    payloads it kept, and the error raised, if any."""
    client = agui_client.AgUiClient.__new__(agui_client.AgUiClient)  # no association needed
    client.channel, client.announcements = BRIDGE, []
    client.session = consumer(compiled=compiled)
    client._streams = {c: agui_client.RunStream(client, c, None) for c in STREAMS}
    received = [
        FrameReceived(channel=ch, frame_type=ft, payload=p, seq=n)
        for n, (ch, ft, p) in enumerate(batch)
    ]
    error = None
    try:
        client._handle(received)
    except ValueError as exc:
        error = exc
    queued = {c: list(stream._items) for c, stream in client._streams.items()}
    monkeypatch.undo()
    return queued, client.announcements, error


def test_handled_batches_queue_the_reference_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two interleaved streams, JSON orjson refuses (the json fallback decodes it), a
    Discovery frame and an END: the same items on the same streams on both paths."""
    big = b'{"type":"CUSTOM","value":NaN,"big":123456789012345678901234567890}'
    bodies = [b'{"type":"RUN_STARTED"}', big, b'{"delta":"\\u00e9"}', b'{"n":4}', b'{"n":5}']
    batch = [(BRIDGE, int(DATA), data_frame(b"c1", i + 1, body)) for i, body in enumerate(bodies)]
    batch.insert(2, (BRIDGE, int(DATA), data_frame(b"c2", 1, b'{"other":1}')))
    batch.insert(4, (0x0010, 0x0103, b"announce"))
    batch.append((BRIDGE, int(FT.BRIDGE_STREAM_END), end_frame(b"c1", 6, resumable=True)))
    results = [handled(monkeypatch, compiled, batch) for compiled in (True, False)]
    assert results[0] == results[1]
    queued, announcements, error = results[0]
    assert error is None and announcements == [b"announce"]
    made = queued[b"c1"][:-1]
    assert [(e.event_id, e.raw) for e in made] == list(enumerate(bodies, 1))
    assert json.dumps(made[1].data) == json.dumps(json.loads(big))
    assert made[2].data == {"delta": "\u00e9"}
    assert isinstance(queued[b"c1"][-1], StreamEnded)
    assert [(e.event_id, e.data) for e in queued[b"c2"]] == [(1, {"other": 1})]


def test_json_that_json_refuses_is_refused_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [b'{"type":"A"}', b'{"type":', b'{"type":"C"}']
    batch = [(BRIDGE, int(DATA), data_frame(b"c1", i + 1, body)) for i, body in enumerate(bodies)]
    for compiled in (True, False):
        queued, _, error = handled(monkeypatch, compiled, batch)
        assert isinstance(error, json.JSONDecodeError)
        assert [e.event_id for e in queued[b"c1"]] == [1]


# --- the compiled positional maker and the cyclic GC ---------------------------------------


def test_made_objects_of_atoms_are_left_to_reference_counting() -> None:
    """An event whose values cannot hold a cycle is not tracked by the cyclic GC (thousands
    queued on a stream would make every collection walk them); one that can, is."""
    data = session_module._make_stream_data(b"c1", 1, b"{}", False)
    assert isinstance(data, StreamDataReceived) and not gc.is_tracked(data)
    freed: list[bool] = []

    class Canary:
        def __del__(self) -> None:
            freed.append(True)

    # A dict of atoms is untracked by CPython until a container goes into it: the event
    # holding it stays tracked, so a cycle made through it later is still collected.
    flat = agui_client._make_event(1, b"{}", {"type": "X"})
    assert gc.is_tracked(flat)
    flat.data["self"], flat.data["canary"] = flat, Canary()
    del flat
    gc.collect()
    assert freed == [True]
    marker = object()
    nested: dict[str, Any] = {"type": "X", "value": [marker]}
    holder = agui_client._make_event(2, b"{}", nested)
    assert gc.is_tracked(holder)
    nested["value"].append(holder)  # a cycle through the event: the collector frees it
    del nested, holder
    gc.collect()
    assert not [
        o for o in gc.get_objects()
        if isinstance(o, agui_client.AgUiEvent) and marker in o.data.get("value", ())
    ]
