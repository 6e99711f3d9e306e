"""NPAMP-BRIDGE payload codec: corpus vectors, every rejection rule, TLV pairs, fuzz."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.bridge import envelope as b
from iobridge.npamp.errors import LocalProtocolError, NpampError, RemoteProtocolError

VECTORS = json.loads((Path(__file__).parent / "vectors" / "bridge.json").read_text())

CORPUS_FLAG_ERRORS: dict[str, type[b.EnvelopeMalformed]] = {
    "EnvelopeAbsent": b.EnvelopeNotFirst,
    "EnvelopeTruncated": b.EnvelopeMalformed,
    "MessageKindMismatch": b.MessageKindMismatch,
    "CorrelationRule": b.EnvelopeMalformed,
    "SafetyLabelMalformed": b.SafetyLabelMalformed,
    "NotABridgeFrame": b.NotABridgeFrame,
}

FT = b.BridgeFrameType


def env(
    kind: b.MessageKind = b.MessageKind.REQUEST,
    corr: bytes = b"r1",
    method: str = "run",
    protocol_id: int = 0x35,
    flags: int = 0,
) -> b.BridgeEnvelope:
    return b.BridgeEnvelope(
        protocol_id=protocol_id,
        message_kind=kind,
        content_type=b.ContentType.JSON,
        flags=flags,
        correlation_id=corr,
        method=method,
    )


def fields(msg: b.BridgeMessage) -> dict[str, Any]:
    """The corpus adapter's field view of a decoded message."""
    label = msg.safety_label
    return {
        "protocol_id": msg.envelope.protocol_id,
        "message_kind": msg.envelope.message_kind,
        "content_type": msg.envelope.content_type,
        "flags": msg.envelope.flags,
        "final": msg.envelope.final,
        "corr": msg.envelope.correlation_id.hex(),
        "method": msg.envelope.method,
        "safety": None if label is None else {"effect": label.effect, "scope": label.scope},
        "foreign": msg.body.hex(),
    }


def reject(frame_type: int, payload: bytes, **kw: bool) -> b.BridgeProtocolError:
    with pytest.raises(b.BridgeProtocolError) as info:
        b.pull_bridge_message(frame_type, payload, **kw)
    return info.value


# --- corpus vectors, both ways -------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["decode_valid"], ids=lambda c: f"tc{c['tcId']}")
def test_corpus_decode_then_encode_same_bytes(case: dict[str, Any]) -> None:
    payload = bytes.fromhex(case["payload"])
    msg = b.pull_bridge_message(case["frameType"], payload)
    assert fields(msg) == case["expected"]
    assert b.push_bridge_message(msg) == payload


@pytest.mark.parametrize("case", VECTORS["decode_invalid"], ids=lambda c: f"tc{c['tcId']}")
def test_corpus_must_reject(case: dict[str, Any]) -> None:
    err = reject(case["frameType"], bytes.fromhex(case["payload"]))
    assert isinstance(err, CORPUS_FLAG_ERRORS[case["flag"]])
    assert err.transport_code is b.TransportErrorCode.ENVELOPE_MALFORMED


@pytest.mark.parametrize("case", VECTORS["correlate"], ids=lambda c: f"tc{c['tcId']}")
def test_corpus_correlate(case: dict[str, Any]) -> None:
    req = b.pull_bridge_message(case["requestFrameType"], bytes.fromhex(case["requestPayload"]))
    rep = b.pull_bridge_message(case["replyFrameType"], bytes.fromhex(case["replyPayload"]))
    assert b.correlates(req.envelope, rep.envelope) is case["match"]


@pytest.mark.parametrize("name", sorted(set(VECTORS["agui"]) - {"comment"}))
def test_agui_worked_examples_round_trip(name: str) -> None:
    payload = bytes.fromhex(VECTORS["agui"][name])
    frame_type = {1: FT.BRIDGE_REQUEST, 4: FT.BRIDGE_ERROR, 6: FT.BRIDGE_STREAM_END}[payload[5]]
    msg = b.pull_bridge_message(frame_type, payload, stream_control_required=True)
    assert msg.envelope.protocol_id == 0x35
    assert b.push_bridge_message(msg) == payload


def test_clause1_protocol_id_and_content_type() -> None:
    """MAP-AGUI clause 1: 0x35, content_type 0x01, foreign message octet-for-octet."""
    body = b'{"threadId":"t1", "runId":"r1" ,"x":1.50}'  # odd spacing survives untouched
    msg = b.BridgeMessage(
        frame_type=FT.BRIDGE_REQUEST,
        envelope=env(),
        safety_label=b.SafetyLabel(effect=b.Effect.DESTRUCTIVE),
        body=body,
    )
    payload = b.push_bridge_message(msg)
    assert payload[4] == 0x35 and payload[6] == 0x01
    assert payload.endswith(body)
    assert b.pull_bridge_message(FT.BRIDGE_REQUEST, payload).body == body


# --- every rejection rule, one test each ---------------------------------------------------


def test_not_a_bridge_frame() -> None:
    err = reject(0x0001, b.push_envelope(env()))
    assert isinstance(err, b.NotABridgeFrame) and b.error_reply(err) is None


@pytest.mark.parametrize("payload", [b"", b"\x00\x10\x00"])
def test_envelope_missing(payload: bytes) -> None:
    assert isinstance(reject(FT.BRIDGE_REQUEST, payload), b.EnvelopeMissing)


def test_envelope_not_first() -> None:
    payload = b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY)) + b.push_envelope(env())
    assert isinstance(reject(FT.BRIDGE_REQUEST, payload), b.EnvelopeNotFirst)


def test_envelope_tlv_overrun() -> None:
    payload = b.push_envelope(env())[:-1]
    assert isinstance(reject(FT.BRIDGE_REQUEST, payload), b.EnvelopeTlvOverrun)


def test_companion_tlv_overrun_after_envelope() -> None:
    payload = b.push_envelope(env()) + b"\x00\x13\x00\x09\x02"
    assert isinstance(reject(FT.BRIDGE_REQUEST, payload), b.EnvelopeTlvOverrun)


@pytest.mark.parametrize(
    "value", [b"\x35\x01\x01\x00\x02r", b"\x35\x01\x01\x00\x02r1\x05run", b"\x35\x01\x01"]
)
def test_envelope_value_truncated(value: bytes) -> None:
    with pytest.raises(b.EnvelopeValueTruncated):
        b.pull_envelope(value)


def test_envelope_trailing_octets() -> None:
    with pytest.raises(b.EnvelopeTrailingOctets):
        b.pull_envelope(b"\x35\x01\x01\x00\x02r1\x03runX")


def test_method_not_utf8() -> None:
    with pytest.raises(b.MethodNotUtf8):
        b.pull_envelope(b"\x35\x01\x01\x00\x02r1\x02\xff\xfe")


def test_null_protocol_id_is_malformed_not_unsupported() -> None:
    payload = b.push_envelope(env(protocol_id=0x00))
    err = reject(FT.BRIDGE_REQUEST, payload)
    assert isinstance(err, b.NullProtocolId)
    assert err.transport_code is b.TransportErrorCode.ENVELOPE_MALFORMED
    # 0x00 may not be used as a protocol_id (NPAMP-REG §4): the reply carries the id this side
    # carries, so it is itself a valid Bridge frame that correlates.
    reply = b.error_reply(err, protocol_id=0x35)
    assert reply is not None and reply[0] is FT.BRIDGE_ERROR
    msg = b.pull_bridge_message(*reply)
    assert msg.envelope.protocol_id == 0x35 and msg.envelope.correlation_id == b"r1"
    body = b.pull_bridge_error_body(msg.body)
    assert body is not None and body.code is b.TransportErrorCode.ENVELOPE_MALFORMED
    # With no agreed id there is no valid protocol_id to reply with (NPAMP-REG §7.1).
    assert b.error_reply(err) is None


@pytest.mark.parametrize("frame_type", list(FT))
def test_message_kind_mismatch_every_frame_type(frame_type: b.BridgeFrameType) -> None:
    wrong = next(k for k in b.MessageKind if k is not b.FRAME_MESSAGE_KIND[frame_type])
    err = reject(frame_type, b.push_envelope(env(kind=wrong)))
    assert isinstance(err, b.MessageKindMismatch)


def test_message_kind_pairing_is_not_arithmetic() -> None:
    assert b.FRAME_MESSAGE_KIND[FT.BRIDGE_ERROR] == 0x04
    assert b.FRAME_MESSAGE_KIND[FT.BRIDGE_NOTIFY] == 0x03


@pytest.mark.parametrize(
    "frame_type", [f for f in FT if f is not FT.BRIDGE_NOTIFY], ids=lambda f: f.name
)
def test_correlation_id_missing(frame_type: b.BridgeFrameType) -> None:
    kind = b.FRAME_MESSAGE_KIND[frame_type]
    err = reject(frame_type, b.push_envelope(env(kind=kind, corr=b"")))
    assert isinstance(err, b.CorrelationIdMissing)
    reply = b.error_reply(err)
    if frame_type in (FT.BRIDGE_RESPONSE, FT.BRIDGE_ERROR):
        assert reply is None  # replies are never answered
        return
    # Rejecting is answering: the BRIDGE_ERROR echoes the (empty) id it could recover.
    assert reply is not None and reply[0] is FT.BRIDGE_ERROR
    tlv_len = int.from_bytes(reply[1][2:4], "big")
    answer = b.pull_envelope(reply[1][4 : 4 + tlv_len])
    assert (answer.protocol_id, answer.message_kind, answer.correlation_id) == (0x35, 4, b"")
    body = b.pull_bridge_error_body(reply[1][4 + tlv_len :])
    assert body is not None and body.code is b.TransportErrorCode.ENVELOPE_MALFORMED


def test_notify_with_correlation_id() -> None:
    payload = b.push_envelope(env(kind=b.MessageKind.NOTIFICATION))
    err = reject(FT.BRIDGE_NOTIFY, payload)
    assert isinstance(err, b.NotifyCorrelationId)
    assert b.error_reply(err) is None  # a notification is never answered


def test_duplicate_companion_tlv() -> None:
    label = b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY))
    err = reject(FT.BRIDGE_REQUEST, b.push_envelope(env()) + label + label)
    assert isinstance(err, b.DuplicateBridgeTlv)


@pytest.mark.parametrize(
    "value", [b"\x02", b"\x02\x05f", b"\x02\x00x", b"\x04\x00", b"\x02\x02\xff\xfe"]
)
def test_safety_label_malformed(value: bytes) -> None:
    payload = b.push_envelope(env()) + b"\x00\x13" + len(value).to_bytes(2, "big") + value
    err = reject(FT.BRIDGE_REQUEST, payload)
    assert isinstance(err, b.SafetyLabelMalformed)
    assert err.envelope == env()  # parsed first, so the reply can echo it


def sc_tlv(value: bytes) -> bytes:
    return b"\x00\x11" + len(value).to_bytes(2, "big") + value


def data_envelope() -> bytes:
    return b.push_envelope(env(kind=b.MessageKind.STREAM_DATA, method=""))


@pytest.mark.parametrize("size", [0, 10, 12])
def test_stream_control_wrong_length(size: int) -> None:
    err = reject(FT.BRIDGE_STREAM_DATA, data_envelope() + sc_tlv(b"\x01" * size))
    assert isinstance(err, b.StreamControlLength)


def test_stream_control_unknown_version() -> None:
    value = b"\x02\x00\x00" + (1).to_bytes(8, "big")
    err = reject(FT.BRIDGE_STREAM_DATA, data_envelope() + sc_tlv(value))
    assert isinstance(err, b.StreamControlVersion)


@pytest.mark.parametrize("control", [0x03, 0x80, 0xFF])
def test_stream_control_undefined_control(control: int) -> None:
    value = bytes((1, control, 0)) + (1).to_bytes(8, "big")
    err = reject(FT.BRIDGE_STREAM_DATA, data_envelope() + sc_tlv(value))
    assert isinstance(err, b.StreamControlUndefined)


def test_stream_control_missing_when_required() -> None:
    payload = data_envelope() + b"{}"
    assert b.pull_bridge_message(FT.BRIDGE_STREAM_DATA, payload).stream_control is None
    err = reject(FT.BRIDGE_STREAM_DATA, payload, stream_control_required=True)
    assert isinstance(err, b.StreamControlMissing)


@pytest.mark.parametrize(
    ("frame_type", "sc"),
    [
        (FT.BRIDGE_STREAM_DATA, b.StreamControl(control=b.Control.CANCEL)),
        (FT.BRIDGE_STREAM_DATA, b.StreamControl(control=b.Control.RESUME)),
        (FT.BRIDGE_STREAM_DATA, b.StreamControl(event_id=1, cancel_ack=True)),
        (FT.BRIDGE_STREAM_END, b.StreamControl(control=b.Control.RESUME)),
        (FT.BRIDGE_STREAM_END, b.StreamControl(control=b.Control.CANCEL, cancel_ack=True)),
        (FT.BRIDGE_REQUEST, b.StreamControl(control=b.Control.DATA)),
        (FT.BRIDGE_REQUEST, b.StreamControl(control=b.Control.CANCEL)),
        (FT.BRIDGE_RESPONSE, b.StreamControl()),
    ],
)
def test_stream_control_misplaced(frame_type: b.BridgeFrameType, sc: b.StreamControl) -> None:
    kind = b.FRAME_MESSAGE_KIND[frame_type]
    payload = b.push_envelope(env(kind=kind)) + b.push_stream_control(sc)
    assert isinstance(reject(frame_type, payload), b.StreamControlMisplaced)


def test_reserved_flag_bits_are_ignored_not_rejected() -> None:
    sc = b.pull_stream_control(bytes((1, 0, 0xFD)) + (7).to_bytes(8, "big"))
    assert sc.resumable and not sc.cancel_ack and sc.event_id == 7
    e = b.pull_envelope(b"\x35\x05\x01\xfe\x02r1\x00")
    assert e.flags == 0xFE and not e.final


def test_non_bridge_tlv_after_envelope_starts_the_foreign_message() -> None:
    body = b"\x00\x12\x00\x00tail"  # AnomalyCharge-looking octets belong to the body
    msg = b.pull_bridge_message(FT.BRIDGE_REQUEST, b.push_envelope(env()) + body)
    assert msg.body == body


# --- replies -------------------------------------------------------------------------------


def test_error_reply_echoes_correlation_and_code() -> None:
    payload = b.push_envelope(env(kind=b.MessageKind.RESPONSE))
    err = reject(FT.BRIDGE_REQUEST, payload)
    reply = b.error_reply(err)
    assert reply is not None and reply[0] is FT.BRIDGE_ERROR
    msg = b.pull_bridge_message(*reply)
    assert msg.envelope.correlation_id == b"r1" and msg.envelope.method == ""
    assert msg.envelope.message_kind == b.MessageKind.ERROR
    body = b.pull_bridge_error_body(msg.body)
    assert body is not None and body.code is b.TransportErrorCode.ENVELOPE_MALFORMED


@pytest.mark.parametrize("frame_type", [FT.BRIDGE_RESPONSE, FT.BRIDGE_ERROR])
def test_replies_are_never_answered(frame_type: b.BridgeFrameType) -> None:
    payload = b.push_envelope(env(kind=b.FRAME_MESSAGE_KIND[frame_type])) + b.push_stream_control(
        b.StreamControl()
    )
    err = reject(frame_type, payload)
    assert b.error_reply(err) is None


@pytest.mark.parametrize("code", list(b.TransportErrorCode))
def test_transport_error_code_round_trip(code: b.TransportErrorCode) -> None:
    err = b.BridgeErrorBody(code=code, message="why ✓")
    raw = b.push_bridge_error_body(err)
    assert raw[0] == code and raw[1] == len("why ✓".encode())
    assert b.pull_bridge_error_body(raw) == err
    frame = b.BridgeMessage(
        frame_type=FT.BRIDGE_ERROR, envelope=env(kind=b.MessageKind.ERROR, method=""), body=raw
    )
    decoded = b.pull_bridge_message(FT.BRIDGE_ERROR, b.push_bridge_message(frame))
    assert b.pull_bridge_error_body(decoded.body) == err


def test_transport_error_codes_are_the_spec_values() -> None:
    assert [(c.name, c.value) for c in b.TransportErrorCode] == [
        ("ENVELOPE_MALFORMED", 1),
        ("PROTOCOL_UNSUPPORTED", 2),
        ("METHOD_UNSUPPORTED", 3),
        ("NOT_DELIVERED", 4),
        ("SAFETY_POLICY", 5),
        ("NOT_RESUMABLE", 6),
    ]


@pytest.mark.parametrize(
    "body", [b'{"code":-32601}', b"", b"\x07\x00", b"\x02\x05ab", b"\x02\x01\xff", b"\x00\x00"]
)
def test_foreign_error_bodies_are_not_transport_errors(body: bytes) -> None:
    assert b.pull_bridge_error_body(body) is None


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (b.ProtocolUnsupported, 2),
        (b.MethodUnsupported, 3),
        (b.SafetyPolicyViolation, 5),
        (b.ResumeRefused, 6),
    ],
)
def test_refusal_classes_carry_their_codes(cls: type[b.BridgeProtocolError], code: int) -> None:
    assert cls.transport_code == code and issubclass(cls, RemoteProtocolError)


# --- TLV codecs both ways ------------------------------------------------------------------


def test_envelope_pull_push() -> None:
    e = env(kind=b.MessageKind.STREAM_END, flags=1, method="")
    raw = b.push_envelope(e)
    assert raw.hex() == "0010000835060101027231" + "00"
    assert b.pull_envelope(raw[4:]) == e and e.final


def test_stream_control_pull_push() -> None:
    sc = b.StreamControl(control=b.Control.DATA, event_id=2**64 - 1, resumable=True)
    raw = b.push_stream_control(sc)
    assert raw.hex() == "0011000b" + "010001" + "ff" * 8
    assert b.pull_stream_control(raw[4:]) == sc


def test_safety_label_pull_push() -> None:
    label = b.SafetyLabel(effect=b.Effect.NON_IDEMPOTENT_WRITE, scope="fs:/tmp")
    raw = b.push_safety_label(label)
    assert raw.hex() == "00130009020766733a2f746d70"
    assert b.pull_safety_label(raw[4:]) == label


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: b.BridgeEnvelope(protocol_id=256, message_kind=1, content_type=1),
            "protocol_id 256 does not fit in u8",
        ),
        (
            lambda: b.BridgeEnvelope(protocol_id=1, message_kind=256, content_type=1),
            "message_kind 256 does not fit in u8",
        ),
        (
            lambda: b.BridgeEnvelope(protocol_id=1, message_kind=1, content_type=-1),
            "content_type -1 does not fit in u8",
        ),
        (lambda: env(flags=256), "flags 256 does not fit in u8"),
        (lambda: env(corr=b"x" * 256), "correlation_id is longer than 255 octets"),
        (lambda: env(method="m" * 256), "method is longer than 255 octets"),
        (lambda: env(method="é" * 128), "method is longer than 255 octets"),  # 256 octets
        (lambda: env(method="\ud800"), "method is not encodable as UTF-8"),
        (lambda: b.StreamControl(event_id=2**64), f"event_id {2**64} does not fit in u64"),
        (lambda: b.StreamControl(event_id=-1), "event_id -1 does not fit in u64"),
        (lambda: b.StreamControl(control=-1), "control -1 does not fit in u8"),
        (lambda: b.StreamControl(version=256), "version 256 does not fit in u8"),
        (
            lambda: b.SafetyLabel(effect=b.Effect.READ_ONLY, scope="s" * 256),
            "SafetyLabel scope is longer than 255 octets",
        ),
        (
            lambda: b.SafetyLabel(effect=b.Effect.READ_ONLY, scope="\udfff"),
            "SafetyLabel scope is not encodable as UTF-8",
        ),
        (
            lambda: b.BridgeErrorBody(code=b.TransportErrorCode.NOT_DELIVERED, message="m" * 256),
            "transport error message is longer than 255 octets",
        ),
    ],
)
def test_local_values_out_of_range_raise_local_errors(build: Any, message: str) -> None:
    with pytest.raises(LocalProtocolError) as info:
        build()
    assert str(info.value) == message


def test_local_values_at_their_limits_are_accepted() -> None:
    envelope = b.BridgeEnvelope(
        protocol_id=255,
        message_kind=255,
        content_type=0,
        flags=255,
        correlation_id=b"x" * 255,
        method="é" * 127 + "m",  # 255 octets
    )
    assert b.pull_envelope(b.push_envelope(envelope)[4:]) == envelope
    sc = b.StreamControl(control=255, event_id=0, version=0)
    assert b.push_stream_control(sc)[4:] == bytes((0, 255, 0)) + bytes(8)
    assert b.StreamControl(event_id=2**64 - 1).event_id == 2**64 - 1
    label = b.SafetyLabel(effect=b.Effect.READ_ONLY, scope="s" * 255)
    assert b.pull_safety_label(b.push_safety_label(label)[4:]) == label
    err = b.BridgeErrorBody(code=b.TransportErrorCode.NOT_DELIVERED, message="m" * 255)
    assert b.pull_bridge_error_body(b.push_bridge_error_body(err)) == err


def test_stream_control_tlv_defaults_to_no_flags_version_1() -> None:
    assert b.stream_control_tlv(b.Control.DATA, 7) == b.push_stream_control(
        b.StreamControl(event_id=7)
    )
    assert b.stream_control_tlv(b.Control.DATA, 7).hex() == "0011000b" + "010000" + "07".zfill(16)


def sc_data(event_id: int = 9, *, flags: int = 0, version: int = 1, control: int = 0) -> bytes:
    return (
        bytes.fromhex("0011000b") + bytes((version, control, flags)) + event_id.to_bytes(8, "big")
    )


@pytest.mark.parametrize("pos", [0, 3])
def test_peek_reads_a_plain_data_stream_control(pos: int) -> None:
    lead = b"\xee" * pos
    assert b.peek_data_stream_control(lead + sc_data(9), pos) == (9, False, pos + 15)
    assert b.peek_data_stream_control(lead + sc_data(9, flags=1) + b"{}", pos) == (
        9,
        True,
        pos + 15,
    )
    assert b.peek_data_stream_control(lead + sc_data(9, flags=0x80), pos) == (9, False, pos + 15)
    # the foreign message may start with octets that are no Bridge TLV type
    assert b.peek_data_stream_control(lead + sc_data(9) + b"\x00\x12ab", pos) == (
        9,
        False,
        pos + 15,
    )


@pytest.mark.parametrize(
    "payload",
    [
        sc_data()[:-1],  # one octet short
        b"\x00\x13" + sc_data()[2:],  # another TLV type
        sc_data()[:2] + b"\x00\x0c" + sc_data()[4:] + b"\x00",  # Length 12
        sc_data(version=2),
        sc_data(control=b.Control.CANCEL),
        sc_data(flags=2),  # cancel_ack
        sc_data(flags=3),
        sc_data() + b"\x00\x11\x00\x00",  # a second StreamControl follows
        sc_data() + b"\x00\x13\x00\x02",  # a SafetyLabel follows
    ],
    ids=[
        "short",
        "type",
        "length",
        "version",
        "control",
        "cancel-ack",
        "ack-resumable",
        "then-stream-control",
        "then-safety-label",
    ],
)
def test_peek_leaves_everything_else_to_the_checked_decoder(payload: bytes) -> None:
    assert b.peek_data_stream_control(payload, 0) is None
    assert b.peek_data_stream_control(b"\xee\xee" + payload, 2) is None


def test_encoder_refuses_what_a_receiver_would_reject() -> None:
    msg = b.BridgeMessage(frame_type=FT.BRIDGE_REQUEST, envelope=env(corr=b""))
    with pytest.raises(b.InvalidBridgeMessage):
        b.push_bridge_message(msg)


# --- fuzz: only NpampError may escape ------------------------------------------------------

frame_types = st.one_of(st.sampled_from(list(FT)), st.integers(0, 0xFFFF))


@given(frame_types, st.binary(max_size=80), st.booleans())
def test_fuzz_pull_bridge_message(frame_type: int, payload: bytes, required: bool) -> None:
    try:
        msg = b.pull_bridge_message(frame_type, payload, stream_control_required=required)
    except NpampError as exc:
        assert isinstance(exc, b.BridgeProtocolError)
        b.error_reply(exc)  # building the reply must not fail either
    else:  # what we accept, we can re-emit, and it decodes to the same message
        again = b.push_bridge_message(msg, stream_control_required=required)
        assert b.pull_bridge_message(frame_type, again) == msg


companion = st.sampled_from([b"\x00\x11", b"\x00\x13"])


@given(st.sampled_from(list(FT)), st.lists(st.tuples(companion, st.binary(max_size=14))))
def test_fuzz_after_a_valid_envelope(
    frame_type: b.BridgeFrameType, tlvs: list[tuple[bytes, bytes]]
) -> None:
    payload = b.push_envelope(env(kind=b.FRAME_MESSAGE_KIND[frame_type]))
    for tag, value in tlvs:
        payload += tag + len(value).to_bytes(2, "big") + value
    with contextlib.suppress(NpampError):
        b.pull_bridge_message(frame_type, payload, stream_control_required=True)


@given(st.binary(max_size=300))
def test_fuzz_value_decoders(value: bytes) -> None:
    for decoder in (b.pull_envelope, b.pull_stream_control, b.pull_safety_label):
        with contextlib.suppress(NpampError):
            decoder(value)
    b.pull_bridge_error_body(value)  # total: never raises


# Every rule's reason, as the peer reads it in the BRIDGE_ERROR transport error (or, for the
# frames never answered, only in our own rejection).
REASONS = [
    (
        "not-bridge",
        0x0106,
        lambda: b.push_envelope(env()),
        {},
        b.NotABridgeFrame,
        "frame type 0x0106 is not a Bridge frame",
        True,
    ),
    (
        "missing",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10",
        {},
        b.EnvelopeMissing,
        "payload too short to hold the BridgeEnvelope TLV",
        True,
    ),
    (
        "not-first",
        FT.BRIDGE_REQUEST,
        lambda: (
            b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY)) + b.push_envelope(env())
        ),
        {},
        b.EnvelopeNotFirst,
        "the first TLV is not the BridgeEnvelope (0x0010)",
        True,
    ),
    (
        "overrun",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env())[:-1],
        {},
        b.EnvelopeTlvOverrun,
        "TLV 0x0010 Length 11 runs past the payload end",
        True,
    ),
    (
        "companion-overrun",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + b"\x00\x11\x00\x0b\x01",
        {},
        b.EnvelopeTlvOverrun,
        "TLV 0x0011 Length 11 runs past the payload end",
        True,
    ),
    (
        "value-short",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10\x00\x05\x35\x01\x01\x00\x00",
        {},
        b.EnvelopeValueTruncated,
        "envelope value of 5 octets, need at least 6",
        True,
    ),
    (
        "corr-past",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10\x00\x07\x35\x01\x01\x00\x02r1",
        {},
        b.EnvelopeValueTruncated,
        "corr_len 2 runs past the envelope value",
        True,
    ),
    (
        "method-past",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10\x00\x09\x35\x01\x01\x00\x02r1\x04run",
        {},
        b.EnvelopeValueTruncated,
        "method_len 4 runs past the envelope value",
        True,
    ),
    (
        "trailing",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10\x00\x0c\x35\x01\x01\x00\x02r1\x03runxx",
        {},
        b.EnvelopeTrailingOctets,
        "1 trailing octets in the envelope",
        True,
    ),
    (
        "method-utf8",
        FT.BRIDGE_REQUEST,
        lambda: b"\x00\x10\x00\x09\x35\x01\x01\x00\x02r1\x01\xff",
        {},
        b.MethodNotUtf8,
        "envelope method is not UTF-8",
        True,
    ),
    (
        "null-protocol",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env(protocol_id=0)),
        {},
        b.NullProtocolId,
        "protocol_id 0x00 is the null identifier",
        True,
    ),
    (
        "kind",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env(kind=b.MessageKind.RESPONSE)),
        {},
        b.MessageKindMismatch,
        "message_kind 0x02 contradicts frame type BRIDGE_REQUEST",
        True,
    ),
    (
        "notify-corr",
        FT.BRIDGE_NOTIFY,
        lambda: b.push_envelope(env(kind=b.MessageKind.NOTIFICATION)),
        {},
        b.NotifyCorrelationId,
        "BRIDGE_NOTIFY must set corr_len = 0",
        False,
    ),
    (
        "corr-missing",
        FT.BRIDGE_RESPONSE,
        lambda: b.push_envelope(env(kind=b.MessageKind.RESPONSE, corr=b"")),
        {},
        b.CorrelationIdMissing,
        "BRIDGE_RESPONSE needs a non-empty correlation_id",
        False,
    ),
    (
        "duplicate",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + b.push_stream_control(b.StreamControl()) * 2,
        {},
        b.DuplicateBridgeTlv,
        "TLV 0x0011 appears twice",
        True,
    ),
    (
        "sc-missing",
        FT.BRIDGE_STREAM_END,
        lambda: b.push_envelope(env(kind=b.MessageKind.STREAM_END, method="")),
        {"stream_control_required": True},
        b.StreamControlMissing,
        "BRIDGE_STREAM_END of a CC-STREAM stream lacks StreamControl",
        True,
    ),
    (
        "sc-misplaced",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + b.push_stream_control(b.StreamControl(control=b.Control.CANCEL)),
        {},
        b.StreamControlMisplaced,
        "StreamControl control 2 on BRIDGE_STREAM_DATA",
        True,
    ),
    (
        "sc-on-request",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env()) + b.push_stream_control(b.StreamControl()),
        {},
        b.StreamControlMisplaced,
        "StreamControl control 0 on BRIDGE_REQUEST",
        True,
    ),
    (
        "ack-misplaced",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + b.push_stream_control(b.StreamControl(cancel_ack=True)),
        {},
        b.StreamControlMisplaced,
        "cancel_ack is only valid on a downstream BRIDGE_STREAM_END",
        True,
    ),
    (
        "sc-length",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + sc_tlv(bytes(10)),
        {},
        b.StreamControlLength,
        "StreamControl Length 10, must be 11",
        True,
    ),
    (
        "sc-version",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + sc_tlv(bytes((2, 0, 0)) + bytes(8)),
        {},
        b.StreamControlVersion,
        "StreamControl version 2 is not implemented",
        True,
    ),
    (
        "sc-control",
        FT.BRIDGE_STREAM_DATA,
        lambda: data_envelope() + sc_tlv(bytes((1, 3, 0)) + bytes(8)),
        {},
        b.StreamControlUndefined,
        "StreamControl control 0x03 is reserved",
        True,
    ),
    (
        "label-short",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env()) + b"\x00\x13\x00\x01\x02",
        {},
        b.SafetyLabelMalformed,
        "SafetyLabel value of 1 octets, need 2",
        True,
    ),
    (
        "label-length",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env()) + b"\x00\x13\x00\x03\x02\x05f",
        {},
        b.SafetyLabelMalformed,
        "scope_len 5 disagrees with 1",
        True,
    ),
    (
        "label-effect",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env()) + b"\x00\x13\x00\x02\x04\x00",
        {},
        b.SafetyLabelMalformed,
        "SafetyLabel effect 0x04 is undefined",
        True,
    ),
    (
        "label-utf8",
        FT.BRIDGE_REQUEST,
        lambda: b.push_envelope(env()) + b"\x00\x13\x00\x03\x02\x01\xff",
        {},
        b.SafetyLabelMalformed,
        "SafetyLabel scope is not UTF-8",
        True,
    ),
]


def reply_reason(err: b.BridgeProtocolError) -> str | None:
    """The transport error message of the BRIDGE_ERROR ``err`` is answered with, if any."""
    reply = b.error_reply(err, protocol_id=0x35)
    if reply is None:
        return None
    frame_type, payload = reply
    assert frame_type is FT.BRIDGE_ERROR
    end = 4 + int.from_bytes(payload[2:4], "big")
    body = b.pull_bridge_error_body(payload[end:])
    assert body is not None and body.code is err.transport_code
    return body.message


@pytest.mark.parametrize(
    ("frame_type", "build", "kw", "error", "reason", "answered"),
    [case[1:] for case in REASONS],
    ids=[case[0] for case in REASONS],
)
def test_each_rejection_names_its_rule(
    frame_type: int,
    build: Any,
    kw: dict[str, bool],
    error: type[b.BridgeProtocolError],
    reason: str,
    answered: bool,
) -> None:
    err = reject(frame_type, build(), **kw)
    assert type(err) is error and str(err) == reason
    assert reply_reason(err) == (reason if answered else None)


# --- answering what cannot be parsed -------------------------------------------------------


def test_recover_envelope_reads_what_a_malformed_payload_still_holds() -> None:
    whole = b.push_envelope(env(flags=1))
    label = b.push_safety_label(b.SafetyLabel(effect=b.Effect.READ_ONLY, scope="s"))
    sc = b.push_stream_control(b.StreamControl())
    fixed = {"protocol_id": 0x35, "message_kind": 1, "content_type": 1, "flags": 1}
    assert b.recover_envelope(whole + b"{}") == b.BridgeEnvelope(**fixed, correlation_id=b"r1")
    # after companion TLVs in any order (the method is never recovered)
    assert b.recover_envelope(label + sc + whole) == b.BridgeEnvelope(**fixed, correlation_id=b"r1")
    # corr_len promises more than the value holds: the fixed fields only
    short = b"\x00\x10\x00\x07\x35\x01\x01\x01\x05r1"
    assert b.recover_envelope(short) == b.BridgeEnvelope(**fixed)
    # the correlation_id is exact: corr_len 1 of "r1" is "r"
    assert b.recover_envelope(b"\x00\x10\x00\x08\x35\x01\x01\x01\x01r1") == b.BridgeEnvelope(
        **fixed, correlation_id=b"r"
    )
    # a value cut inside the fixed fields: the missing ones read as zero
    assert b.recover_envelope(b"\x00\x10\x00\x02\x36\x02") == b.BridgeEnvelope(
        protocol_id=0x36, message_kind=2, content_type=0, flags=0
    )
    assert b.recover_envelope(b"\x00\x10\x00\x04\x36\x02\x03\x04") == b.BridgeEnvelope(
        protocol_id=0x36, message_kind=2, content_type=3, flags=4
    )
    assert b.recover_envelope(b"\x00\x10\x00\x05\x36\x02\x03\x04\x00") == b.BridgeEnvelope(
        protocol_id=0x36, message_kind=2, content_type=3, flags=4
    )


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x00\x10\x00", b'{"a":1}', b"\x00\x12\x00\x00" + b"\x00\x10\x00\x00", b"\x00\x11"],
    ids=["empty", "short", "json", "other-tlv-first", "short-companion"],
)
def test_recover_envelope_finds_none_where_no_envelope_starts(payload: bytes) -> None:
    assert b.recover_envelope(payload) is None
    sc = b.push_stream_control(b.StreamControl())
    assert b.recover_envelope(sc + payload) is None  # nor after a companion TLV


def test_a_reply_echoes_the_recovered_correlation_and_content_type() -> None:
    cbor = b.BridgeEnvelope(protocol_id=0x35, message_kind=1, content_type=2, correlation_id=b"q")
    payload = b.push_envelope(cbor)[:-1] + b"\x09"  # method_len 9 runs past the value
    err = reject(FT.BRIDGE_REQUEST, payload)
    reply = b.error_reply(err)
    assert reply is not None
    msg = b.pull_bridge_message(*reply)
    assert (msg.envelope.correlation_id, msg.envelope.content_type) == (b"q", 2)
    missing = reject(FT.BRIDGE_REQUEST, b"")
    reply = b.error_reply(missing, protocol_id=0x35)
    assert reply is not None
    answer = b.pull_envelope(reply[1][4 : 4 + int.from_bytes(reply[1][2:4], "big")])
    assert (answer.protocol_id, answer.correlation_id, answer.content_type) == (0x35, b"", 1)


def test_a_reply_to_an_exception_built_with_its_envelope() -> None:
    """error_reply is public: an error raised with ``envelope=`` (no recovery) is answered."""
    err = b.MethodUnsupported("é" * 200, frame_type=FT.BRIDGE_REQUEST, envelope=env())
    reply = b.error_reply(err)
    assert reply is not None
    msg = b.pull_bridge_message(*reply)
    assert msg.envelope.correlation_id == b"r1"
    body = b.pull_bridge_error_body(msg.body)
    # cut to 255 octets, never inside a character: 127 two-octet characters
    assert body == b.BridgeErrorBody(
        code=b.TransportErrorCode.METHOD_UNSUPPORTED, message="é" * 127
    )


@pytest.mark.parametrize("frame_type", [0x0001, 0x00FF])
def test_core_frame_types_are_never_answered(frame_type: int) -> None:
    err = reject(frame_type, b.push_envelope(env()))
    assert isinstance(err, b.NotABridgeFrame) and err.recovered is not None
    assert b.error_reply(err, protocol_id=0x35) is None


def test_an_undefined_bridge_type_is_answered_only_with_an_envelope() -> None:
    answered = reject(0x0106, b.push_envelope(env()))
    assert b.error_reply(answered) is not None
    silent = reject(0x0106, b'{"a":1}')
    assert b.error_reply(silent, protocol_id=0x35) is None
