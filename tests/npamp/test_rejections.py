"""Every MUST-reject of the Bridge layer answers as docs/npamp-agui.md's table says (sans-IO).

One case per table row: the frame is fed to an agreed :class:`BridgeSession` (or one without
agreement, where the row says so) and the queued answer is checked field by field. An answer is
always a BRIDGE_ERROR whose envelope is valid: non-null protocol_id, message_kind error, and the
correlation_id that could be recovered from the rejected frame (empty when none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iobridge.npamp.bridge import AGUI_PROTOCOL_ID, BridgeSession
from iobridge.npamp.bridge import envelope as b
from iobridge.npamp.bridge.events import BridgeFrameRejected

FT = b.BridgeFrameType
EM = b.TransportErrorCode.ENVELOPE_MALFORMED
BODY = b'{"threadId":"t1","runId":"r1"}'
LABEL = b.push_safety_label(b.SafetyLabel(effect=b.Effect.NON_IDEMPOTENT_WRITE))
DOC = Path(__file__).parents[2] / "docs" / "npamp-agui.md"


def envelope_tlv(
    *, pid: int = 0x35, kind: int = 0x01, ct: int = 0x01, corr: bytes = b"r1", method: str = "run"
) -> bytes:
    return b.push_envelope(
        b.BridgeEnvelope(
            protocol_id=pid, message_kind=kind, content_type=ct, correlation_id=corr, method=method
        )
    )


def raw_envelope(value: bytes) -> bytes:
    """An envelope TLV around an arbitrary (possibly malformed) value."""
    return b"\x00\x10" + len(value).to_bytes(2, "big") + value


def run_request(**kw: object) -> bytes:
    return envelope_tlv(**kw) + LABEL + BODY  # type: ignore[arg-type]


def stream_control(**kw: object) -> bytes:
    return b.push_stream_control(b.StreamControl(**kw))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    """One rule of the table; ``answer`` is ``(code, correlation_id, protocol_id)`` or None."""

    frame_type: int
    payload: bytes
    answer: tuple[b.TransportErrorCode, bytes, int] | None
    agreed: bool = True
    before: list[tuple[int, bytes]] = field(default_factory=list)


ROWS: dict[str, Row] = {
    "envelope absent": Row(FT.BRIDGE_REQUEST, b"", (EM, b"", 0x35)),
    "envelope not first (SafetyLabel before it)": Row(
        FT.BRIDGE_REQUEST, LABEL + envelope_tlv() + BODY, (EM, b"r1", 0x35)
    ),
    "envelope TLV runs past the payload": Row(
        FT.BRIDGE_REQUEST, envelope_tlv()[:-1], (EM, b"r1", 0x35)
    ),
    "envelope field truncated": Row(
        FT.BRIDGE_REQUEST, raw_envelope(b"\x35\x01\x01\x00\x09r1") + BODY, (EM, b"", 0x35)
    ),
    "trailing octet in the envelope": Row(
        FT.BRIDGE_REQUEST,
        raw_envelope(b"\x35\x01\x01\x00\x02r1\x03runX") + LABEL + BODY,
        (EM, b"r1", 0x35),
    ),
    "method not UTF-8": Row(
        FT.BRIDGE_REQUEST, raw_envelope(b"\x35\x01\x01\x00\x02r1\x02\xff\xfe"), (EM, b"r1", 0x35)
    ),
    "protocol_id 0x00": Row(FT.BRIDGE_REQUEST, run_request(pid=0x00), (EM, b"r1", 0x35)),
    "protocol_id 0x00 from a peer without agreement": Row(
        FT.BRIDGE_REQUEST, run_request(pid=0x00), None, agreed=False
    ),
    "message_kind contradicts the frame type": Row(
        FT.BRIDGE_REQUEST, run_request(kind=0x02), (EM, b"r1", 0x35)
    ),
    "undefined message_kind": Row(FT.BRIDGE_REQUEST, run_request(kind=0x07), (EM, b"r1", 0x35)),
    "undefined Bridge frame type (0x0106 and up)": Row(0x0106, run_request(), (EM, b"r1", 0x35)),
    "core or companion frame type below 0x0100": Row(0x0030, run_request(), None),
    "empty correlation_id on a request": Row(
        FT.BRIDGE_REQUEST, run_request(corr=b""), (EM, b"", 0x35)
    ),
    "empty correlation_id on a stream frame": Row(
        FT.BRIDGE_STREAM_DATA,
        envelope_tlv(kind=0x05, corr=b"", method="") + stream_control(event_id=1) + b"{}",
        (EM, b"", 0x35),
    ),
    "correlation_id on a notification": Row(
        FT.BRIDGE_NOTIFY, envelope_tlv(kind=0x03, corr=b"n1") + b"{}", None
    ),
    "duplicate SafetyLabel or StreamControl": Row(
        FT.BRIDGE_REQUEST, envelope_tlv() + LABEL + LABEL + BODY, (EM, b"r1", 0x35)
    ),
    "companion TLV runs past the payload": Row(
        FT.BRIDGE_REQUEST, envelope_tlv() + b"\x00\x13\x00\x09\x02", (EM, b"r1", 0x35)
    ),
    "SafetyLabel malformed": Row(
        FT.BRIDGE_REQUEST, envelope_tlv() + b"\x00\x13\x00\x02\x09\x00" + BODY, (EM, b"r1", 0x35)
    ),
    "StreamControl malformed (length, version, control)": Row(
        FT.BRIDGE_REQUEST,
        envelope_tlv() + b"\x00\x11\x00\x0b\x02\x01\x00" + bytes(8) + LABEL + BODY,
        (EM, b"r1", 0x35),
    ),
    "StreamControl missing on a stream frame": Row(
        FT.BRIDGE_STREAM_DATA,
        envelope_tlv(kind=0x05, corr=b"s1", method="") + b"{}",
        (EM, b"s1", 0x35),
    ),
    "content_type not accepted": Row(FT.BRIDGE_REQUEST, run_request(ct=0x02), (EM, b"r1", 0x35)),
    "protocol_id not carried": Row(
        FT.BRIDGE_REQUEST,
        run_request(pid=0x36),
        (b.TransportErrorCode.PROTOCOL_UNSUPPORTED, b"r1", 0x36),
    ),
    "any request from a peer without agreement": Row(
        FT.BRIDGE_REQUEST,
        run_request(),
        (b.TransportErrorCode.PROTOCOL_UNSUPPORTED, b"r1", 0x35),
        agreed=False,
    ),
    "method other than run": Row(
        FT.BRIDGE_REQUEST,
        run_request(method="connect"),
        (b.TransportErrorCode.METHOD_UNSUPPORTED, b"r1", 0x35),
    ),
    "resume of a live stream": Row(
        FT.BRIDGE_REQUEST,
        envelope_tlv() + stream_control(control=b.Control.RESUME, event_id=0) + LABEL,
        (b.TransportErrorCode.NOT_RESUMABLE, b"r1", 0x35),
        before=[(FT.BRIDGE_REQUEST, run_request())],
    ),
    "a malformed reply (RESPONSE, ERROR)": Row(
        FT.BRIDGE_ERROR, envelope_tlv(kind=0x04, corr=b"")[:-1], None
    ),
}


def feed(row: Row) -> tuple[BridgeFrameRejected, list[tuple[int, bytes]]]:
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID if row.agreed else None)
    for frame_type, payload in row.before:
        session.receive_frame(frame_type, payload)
    session.data_to_send()
    (event,) = session.receive_frame(row.frame_type, row.payload)
    assert isinstance(event, BridgeFrameRejected)
    return event, session.data_to_send()


@pytest.mark.parametrize("rule", [rule for rule, row in ROWS.items() if row.answer is None])
def test_rejections_that_cannot_be_answered_are_dropped(rule: str) -> None:
    event, sent = feed(ROWS[rule])
    assert sent == [] and event.replied is False


@pytest.mark.parametrize("rule", [rule for rule, row in ROWS.items() if row.answer is not None])
def test_each_rejection_is_answered_as_the_table_says(rule: str) -> None:
    row = ROWS[rule]
    assert row.answer is not None
    code, corr, pid = row.answer
    event, sent = feed(row)
    assert event.replied is True
    ((frame_type, payload),) = sent
    assert frame_type is FT.BRIDGE_ERROR
    tlv_len = int.from_bytes(payload[2:4], "big")
    answer = b.pull_envelope(payload[4 : 4 + tlv_len])
    assert (answer.protocol_id, answer.message_kind) == (pid, b.MessageKind.ERROR)
    assert answer.correlation_id == corr == (event.correlation_id or b"")
    assert answer.content_type in b.ContentType._value2member_map_ and answer.method == ""
    error = b.pull_bridge_error_body(payload[4 + tlv_len :])
    assert error is not None and error.code is code
    if corr:  # with an id to echo, the answer passes every receive rule
        assert b.pull_bridge_message(frame_type, payload).envelope == answer
    else:  # nothing to echo: the empty id is the honest answer (docs: Rejections)
        with pytest.raises(b.CorrelationIdMissing):
            b.pull_bridge_message(frame_type, payload)


def test_the_docs_table_lists_exactly_these_rules() -> None:
    section = DOC.read_text().split("## Rejections", 1)[1].split("\n## ", 1)[0]
    rules = re.findall(r"^\| ([^|]+?) \|", section, flags=re.M)
    assert rules[:1] == ["Rule"]  # the header row
    assert [r for r in rules[1:] if not set(r) <= {"-", " "}] == list(ROWS)


def test_answers_are_valid_for_every_recoverable_field_combination() -> None:
    """The recovery never raises and never yields an answer with the null protocol_id."""
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    for cut in range(len(run_request()) + 1):
        for pid in (0x00, 0x35):
            session.receive_frame(FT.BRIDGE_REQUEST, run_request(pid=pid)[:cut])
            for frame_type, payload in session.data_to_send():
                assert frame_type is FT.BRIDGE_ERROR and payload[4] != 0x00
