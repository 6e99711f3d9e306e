"""NPAMP-DISC protocol record for AG-UI: exact deterministic CBOR both ways, rejections, fuzz."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.bridge import discovery as d
from iobridge.npamp.errors import LocalProtocolError, NpampError

# digest §6.2: "agui", revision 1, protocol 0x35, STREAM (local 4), [0x000D], [0x01], ["run"]
AGUI_RECORD_HEX = "a40044616775690101020104a5001835010402810d03810104816372756e"


def test_clause7_agui_record_advertises_bridge_channel_and_run() -> None:
    record = d.agui_record(0x35)
    raw = d.push_protocol_record(record)
    assert raw.hex() == AGUI_RECORD_HEX
    assert d.pull_protocol_record(raw) == record
    assert record.channels == (0x000D,) and record.methods == ("run",)
    assert record.carriage_class == d.CARRIAGE_CLASS_STREAM and record.content_types == (1,)


def test_label_and_absent_optionals_round_trip() -> None:
    record = d.ProtocolRecord(
        record_id=b"x", revision=300, protocol_id=0x35, carriage_class=4, label="AG-UI ✓"
    )
    assert d.pull_protocol_record(d.push_protocol_record(record)) == record


def test_unknown_non_negative_keys_are_ignored() -> None:
    raw = bytes.fromhex(AGUI_RECORD_HEX)
    extended = b"\xa5" + raw[1:] + b"\x18\x63\x01"  # key 99 -> 1, sorted last
    assert d.pull_protocol_record(extended) == d.agui_record(0x35)


@pytest.mark.parametrize(
    "raw_hex",
    [
        "",  # empty
        "a1",  # truncated map
        "a2" + "0101" + "0044" + "61677569",  # keys out of order
        "a1" + "1800" + "00",  # non-shortest key
        "bf" + "ff",  # indefinite length
        "a1" + "20" + "01",  # negative key
        "a3" + "004161" + "0102" + "0201",  # kind 2 is not a protocol record
        "a3" + "004161" + "0101" + "0201",  # body missing
        "a4" + "0040" + "0101" + "0201" + "04a0",  # empty record_id
        AGUI_RECORD_HEX + "00",  # trailing octets
        "a4004161010102010462" + "ff00",  # body is invalid UTF-8 text
        "a4004161010102010" + "4a2001901000104",  # protocol_id 256
    ],
)
def test_malformed_records_are_rejected(raw_hex: str) -> None:
    with pytest.raises(d.DiscoveryMalformed) as info:
        d.pull_protocol_record(bytes.fromhex(raw_hex))
    assert info.value.disco_code is d.DiscoErrorCode.MALFORMED_PAYLOAD


@pytest.mark.parametrize(
    "kwargs",
    [
        {"record_id": b""},
        {"record_id": b"x" * 33},
        {"protocol_id": 256},
        {"revision": -1},
    ],
)
def test_invalid_local_records_raise_local_errors(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {
        "record_id": b"a",
        "revision": 1,
        "protocol_id": 0x35,
        "carriage_class": 4,
    }
    with pytest.raises(LocalProtocolError):
        d.ProtocolRecord(**{**base, **kwargs})  # type: ignore[arg-type]


@given(st.binary(max_size=64))
def test_fuzz_pull_protocol_record(raw: bytes) -> None:
    with contextlib.suppress(NpampError):
        d.pull_protocol_record(raw)


# --- queries answered (NPAMP-DISC §6), payloads written by hand from the spec's tables -----

AGUI_RECORD = bytes.fromhex(AGUI_RECORD_HEX)
# §4.2 common fields: frame_kind (0) = 0x0100 DISCO_QUERY, corr (1) = h'7131' ("q1").
QUERY_HEAD = "0019010001427131"


def query(entries: int, filters: str = "") -> bytes:
    """A DISCO_QUERY map of ``entries`` keys: the common fields, then the given filters."""
    return bytes.fromhex(f"{0xA0 + entries:02x}" + QUERY_HEAD + filters.replace(" ", ""))


def answer(records: list[d.ProtocolRecord], payload: bytes, ft: int = 0x0100) -> bytes | None:
    """The one frame the responder answers with (its type checked by the caller), or None."""
    sent = d.DiscoveryResponder(records).receive_frame(ft, payload)
    assert len(sent) <= 1
    return None if not sent else bytes([sent[0][0] >> 8, sent[0][0] & 0xFF]) + sent[0][1]


def result(records: bytes) -> bytes:
    """DISCO_RESULT {0: 0x0101, 1: h'q1', 2: [records], 3: true} (§6.2), behind its type."""
    count = 1 if records else 0
    return bytes.fromhex(f"0101 a4 00190101 01427131 02{0x80 + count:02x}".replace(" ", "")) + (
        records + b"\x03\xf5"
    )


def error(code: int, reason: str) -> bytes:
    """DISCO_ERROR {0: 0x0102, 1: h'q1', 2: code, 3: reason} (§9), behind its type."""
    text = reason.encode()
    head = f"{0x60 + len(text):02x}" if len(text) < 24 else f"78{len(text):02x}"  # text string
    return bytes.fromhex(f"0102 a4 00190102 01427131 02{code:02x} 03{head}".replace(" ", "")) + text


def test_a_query_built_from_the_spec_gets_the_agui_record() -> None:
    assert answer([d.agui_record(0x35)], query(2)) == result(AGUI_RECORD)


@pytest.mark.parametrize(
    ("name", "entries", "filters", "found"),
    [
        ("kinds [protocol]", 3, "02 81 01", True),
        ("kinds [tool]", 3, "02 81 03", False),
        ("protocol_ids [0x35]", 3, "03 81 1835", True),
        ("protocol_ids [MCP]", 3, "03 81 01", False),
        ("name_prefix restricts only tool and agent records", 3, "04 61 78", True),
        ("conjunctive, tolerant", 5, "02 81 01 03 81 1835 05 f5", True),
        ("conjunctive, one field fails", 4, "02 81 01 03 81 02", False),
        ("unknown non-negative key ignored", 3, "18 63 00", True),
    ],
)
def test_query_filters(name: str, entries: int, filters: str, found: bool) -> None:
    expected = result(AGUI_RECORD if found else b"")
    assert answer([d.agui_record(0x35)], query(entries, filters)) == expected, name


def test_a_peer_without_agreement_gets_an_empty_result() -> None:
    assert answer([], query(2)) == result(b"")  # non-committal (§10), never the record


@pytest.mark.parametrize(
    ("name", "payload", "code", "reason"),
    [
        (
            "frame_kind contradicts the frame type",
            bytes.fromhex("a2 00190101 01427131".replace(" ", "")),
            2,
            None,
        ),
        ("negative key", query(3, "20 00"), 1, None),
        ("name_prefix of the wrong type", query(3, "04 01"), 1, None),
        ("trailing octet", query(2) + b"\x00", 1, None),
        ("a cursor (nothing is paged)", query(3, "06 41 00"), 5, "no result is paged"),
    ],
)
def test_malformed_queries_answer_disco_error_echoing_corr(
    name: str, payload: bytes, code: int, reason: str | None
) -> None:
    reply = answer([d.agui_record(0x35)], payload)
    assert reply is not None and reply[:2] == b"\x01\x02", name
    if reason is not None:
        assert reply == error(code, reason)
    else:  # the reason text is advisory (§9): check the fixed fields only
        assert reply[2:13] == bytes.fromhex(f"a4 00190102 01427131 02{code:02x}".replace(" ", ""))


def test_subscriptions_are_refused_and_one_way_frames_never_answered() -> None:
    subscribe = bytes.fromhex("a2 00190104 01427131".replace(" ", ""))
    refused = error(6, "subscriptions are not offered")
    assert answer([d.agui_record(0x35)], subscribe, 0x0104) == refused
    announce = d.push_disco_announce([d.agui_record(0x35)])
    for frame_type in (0x0101, 0x0102, 0x0103, 0x0105, 0x0106):
        assert answer([d.agui_record(0x35)], announce, frame_type) is None


def test_a_query_without_a_readable_corr_is_dropped() -> None:
    assert answer([d.agui_record(0x35)], bytes.fromhex("a1 00190100".replace(" ", ""))) is None
    assert answer([d.agui_record(0x35)], bytes.fromhex("a2 00190100 0140".replace(" ", ""))) is None


def test_query_size_limit() -> None:
    responder = d.DiscoveryResponder([d.agui_record(0x35)], max_query_size=64)
    # name_prefix text padded so that the whole query is exactly 64 octets, then 65.
    at_limit = query(3, "04 78 34" + "61" * 52)
    assert len(at_limit) == 64
    assert responder.receive_frame(0x0100, at_limit)[0][0] == 0x0101
    over = query(3, "04 78 35" + "61" * 53)
    assert responder.receive_frame(0x0100, over) == []  # not parsed, so no corr to echo


def test_announce_payload_matches_the_digest_example() -> None:
    announce = d.push_disco_announce([d.agui_record(0x35)])
    assert announce == bytes.fromhex("a2 00190103 0281".replace(" ", "")) + AGUI_RECORD


@given(st.binary(max_size=200))
def test_fuzz_responder_never_raises(payload: bytes) -> None:
    for frame_type in (0x0100, 0x0104):
        for _, reply in d.DiscoveryResponder([d.agui_record(0x35)]).receive_frame(
            frame_type, payload
        ):
            assert reply[:1] in (b"\xa4", b"\xa3")


def test_deep_nesting_is_malformed_not_a_crash() -> None:
    nested = query(3, "02" + "81" * 500 + "01")
    assert answer([d.agui_record(0x35)], nested) is not None  # MalformedPayload, corr echoed
