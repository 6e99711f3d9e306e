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
