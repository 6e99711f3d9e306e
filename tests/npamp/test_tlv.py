"""Tests for the generic TLV codec and the critical-bit rule."""

from __future__ import annotations

import pytest

from iobridge.npamp.errors import LocalProtocolError, TlvDecodeError, UnknownCriticalTlv
from iobridge.npamp.wire import Tlv, TlvType, pull_tlv, pull_tlvs, push_tlv, push_tlvs

# Corpus-style vectors: (type, value hex, encoding hex)
VECTORS = [
    (0x0017, "0000000000000001", "001700080000000000000001"),
    (0x0002, "01", "0002000101"),
    (0x8001, "", "80010000"),
    (0x0010, "ab" * 3, "0010000" + "3" + "ababab"),
]


@pytest.mark.parametrize(("tlv_type", "value", "wire"), VECTORS)
def test_vectors_both_ways(tlv_type: int, value: str, wire: str) -> None:
    assert push_tlv(tlv_type, bytes.fromhex(value)).hex() == wire
    assert pull_tlv(bytes.fromhex(wire)) == Tlv(tlv_type, bytes.fromhex(value))


def test_max_length_roundtrip_and_over_limit_rejected() -> None:
    wire = push_tlv(1, bytes(65535))
    assert pull_tlv(wire).value == bytes(65535)
    with pytest.raises(LocalProtocolError):
        push_tlv(1, bytes(65536))
    with pytest.raises(LocalProtocolError):
        push_tlv(0x10000, b"")
    with pytest.raises(LocalProtocolError):
        Tlv(-1, b"")


@pytest.mark.parametrize("wire", ["", "00", "001700", "0017000200", "00170001aaff"])
def test_single_tlv_length_must_equal_remaining(wire: str) -> None:
    with pytest.raises(TlvDecodeError):
        pull_tlv(bytes.fromhex(wire))


def test_pull_tlvs_in_order() -> None:
    buf = push_tlvs([Tlv(9, b"id"), Tlv(10, b"cv"), Tlv(11, b"")])
    assert [t.type for t in pull_tlvs(buf)] == [9, 10, 11]
    assert pull_tlvs(b"") == []


@pytest.mark.parametrize("wire", ["00", "000900", "00090005aabb", "000900000009"])
def test_pull_tlvs_truncated(wire: str) -> None:
    with pytest.raises(TlvDecodeError):
        pull_tlvs(bytes.fromhex(wire))


def test_unknown_noncritical_skipped_unknown_critical_rejected() -> None:
    known = frozenset({TlvType.KEY_UPDATE_MARKER})
    marker = Tlv(TlvType.KEY_UPDATE_MARKER, bytes(8))
    buf = push_tlvs([Tlv(0x7ABC, b"x"), marker])
    assert pull_tlvs(buf, known) == [marker]
    crit = push_tlvs([marker, Tlv(0x8ABC, b"x")])
    with pytest.raises(UnknownCriticalTlv):
        pull_tlvs(crit, known)
    # A *known* critical type is fine, and known=None filters nothing.
    assert pull_tlvs(crit, known | {0x8ABC})[1].critical
    assert len(pull_tlvs(crit)) == 2
