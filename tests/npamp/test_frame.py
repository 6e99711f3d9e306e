"""Tests for the frame header codec and the stream FrameReader."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.errors import (
    BadMagic,
    CrcMismatch,
    ForbiddenChannel,
    ForbiddenFrameType,
    FrameDecodeError,
    FrameTooLarge,
    LocalProtocolError,
    ReservedNotZero,
    UnsupportedVersion,
)
from iobridge.npamp.wire.frame import (
    HEADER_SIZE,
    Flags,
    Frame,
    FrameHeader,
    FrameReader,
    FrameType,
    crc32c,
    is_grease_channel,
    pull_frame,
    pull_frame_header,
    pull_frame_header_reference,
    pull_frame_reference,
    push_frame,
    push_frame_header,
)

#: Digest §1.2 golden vector (corpus tcId 1/10/20): PING on Control, seq 0, empty payload.
GOLDEN_PING = bytes.fromhex("4e50414d20000100000000000000000000000000000d880c25" + "00" * 11)


def _recrc(buf: bytes) -> bytes:
    """Return ``buf`` with its header CRC recomputed (to reach the check after CRC)."""
    b = bytearray(buf)
    b[21:25] = struct.pack(">I", crc32c(bytes(b[:21])))
    return bytes(b)


def test_golden_ping_both_ways() -> None:
    assert crc32c(bytes.fromhex("4e50414d2000010000000000000000000000000000")) == 0x0D880C25
    assert push_frame(FrameType.PING, 0, 0, b"") == GOLDEN_PING
    header = pull_frame_header(GOLDEN_PING)
    assert header == FrameHeader(frame_type=1, channel=0, seq=0, payload_length=0)
    assert push_frame_header(header) == GOLDEN_PING


def test_fields_roundtrip() -> None:
    header = FrameHeader(
        frame_type=0x0101,
        channel=0x000D,
        seq=2**64 - 1,
        payload_length=3,
        flags=Flags.ENC | Flags.URG,
    )
    wire = push_frame_header(header) + b"abc"
    assert wire[4] == 0x23
    frame = pull_frame(wire)
    assert frame.header == header
    assert frame.payload == b"abc"
    assert frame.header.encrypted and frame.header.urgent
    assert (frame.channel, frame.frame_type, frame.seq) == (0x000D, 0x0101, 2**64 - 1)


# --- one negative test per MUST-reject header rule -----------------------------------------


def test_truncated_header() -> None:
    with pytest.raises(FrameDecodeError):
        pull_frame_header(GOLDEN_PING[:35])


def test_crc_zeroed_rejected() -> None:
    bad = GOLDEN_PING[:21] + bytes(4) + GOLDEN_PING[25:]
    with pytest.raises(CrcMismatch):
        pull_frame_header(bad)


@pytest.mark.parametrize("offset", range(21))
def test_crc_checked_before_any_field(offset: int) -> None:
    bad = bytearray(GOLDEN_PING)
    bad[offset] ^= 0x10
    with pytest.raises(CrcMismatch):
        pull_frame_header(bytes(bad))


def test_bad_magic_rejected() -> None:
    with pytest.raises(BadMagic):
        pull_frame_header(_recrc(b"NPAX" + GOLDEN_PING[4:]))


@pytest.mark.parametrize("version", [0, 1, 3, 15])
def test_other_version_rejected(version: int) -> None:
    bad = bytearray(GOLDEN_PING)
    bad[4] = version << 4
    with pytest.raises(UnsupportedVersion):
        pull_frame_header(_recrc(bytes(bad)))


@pytest.mark.parametrize("offset", range(25, 36))
def test_reserved_octet_nonzero_rejected(offset: int) -> None:
    bad = bytearray(GOLDEN_PING)
    bad[offset] = 1
    with pytest.raises(ReservedNotZero):
        pull_frame_header(bytes(bad))  # reserved octets are outside the CRC


def test_frame_type_zero_rejected() -> None:
    with pytest.raises(ForbiddenFrameType):
        pull_frame_header(push_frame(0, 0, 0, b""))


def test_channel_ffff_rejected() -> None:
    with pytest.raises(ForbiddenChannel):
        pull_frame_header(push_frame(1, 0xFFFF, 0, b""))


def test_payload_length_cap() -> None:
    wire = push_frame(1, 0, 0, bytes(100))
    assert pull_frame_header(wire, max_payload_length=100).payload_length == 100
    with pytest.raises(FrameTooLarge):
        pull_frame_header(wire, max_payload_length=99)
    huge = push_frame_header(FrameHeader(frame_type=1, channel=0, seq=0, payload_length=2**32 - 1))
    with pytest.raises(FrameTooLarge):
        pull_frame_header(huge)


def test_payload_length_must_match_whole_frame() -> None:
    wire = push_frame(1, 0, 0, b"abcd")
    with pytest.raises(FrameDecodeError):
        pull_frame(wire[:-1])
    with pytest.raises(FrameDecodeError):
        pull_frame(wire + b"x")


def test_grease_channels_decode_and_are_flagged() -> None:
    for channel in (0xF000, 0xFABC, 0xFFFE):
        frame = pull_frame(push_frame(1, channel, 0, b""))
        assert frame.grease and is_grease_channel(channel)
    assert not pull_frame(GOLDEN_PING).grease
    assert not is_grease_channel(0xEFFF) and not is_grease_channel(0xFFFF)


def test_encode_rejects_out_of_range_fields() -> None:
    with pytest.raises(LocalProtocolError):
        push_frame(0x10000, 0, 0, b"")
    with pytest.raises(LocalProtocolError):
        push_frame(1, 0, 2**64, b"")
    with pytest.raises(LocalProtocolError):
        FrameHeader(frame_type=1, channel=0, seq=-1, payload_length=0)


# --- FrameReader --------------------------------------------------------------------------


def _stream() -> tuple[bytes, list[Frame]]:
    frames = [
        pull_frame(push_frame(1, 0, 0, b"")),
        pull_frame(push_frame(0x0100, 0x000D, 7, b"x" * 1000)),
        pull_frame(push_frame(5, 0xF001, 1, b"grease", Flags.ENC)),
    ]
    return b"".join(push_frame_header(f.header) + f.payload for f in frames), frames


def test_reader_whole_and_byte_by_byte_agree() -> None:
    data, frames = _stream()
    assert FrameReader().feed(data) == frames
    reader = FrameReader()
    got: list[Frame] = []
    for i in range(len(data)):
        got += reader.feed(data[i : i + 1])
    assert got == frames
    assert reader.buffered == 0


def test_reader_holds_partial_frame() -> None:
    data, frames = _stream()
    reader = FrameReader()
    assert reader.feed(data[: HEADER_SIZE + 10]) == frames[:1]
    assert reader.next_frame() is None
    assert reader.buffered == 10
    assert reader.feed(data[HEADER_SIZE + 10 :]) == frames[1:]


def test_reader_rejects_oversized_header_before_payload_arrives() -> None:
    reader = FrameReader(max_payload_length=16)
    wire = push_frame(1, 0, 0, bytes(17))
    with pytest.raises(FrameTooLarge):
        reader.feed(wire[:HEADER_SIZE])


def test_reader_returns_good_frames_before_raising() -> None:
    reader = FrameReader()
    bad = _recrc(b"XXXX" + GOLDEN_PING[4:])
    assert reader.feed(GOLDEN_PING + bad) == [pull_frame(GOLDEN_PING)]
    with pytest.raises(BadMagic):
        reader.feed(b"")


def test_reader_poisoned_after_error() -> None:
    reader = FrameReader()
    with pytest.raises(BadMagic):
        reader.feed(_recrc(b"XXXX" + GOLDEN_PING[4:]))
    with pytest.raises(BadMagic):
        reader.feed(GOLDEN_PING)
    with pytest.raises(BadMagic):
        reader.next_frame()


@given(st.binary(min_size=30, max_size=80), st.integers(0, 2**25))
def test_compiled_frame_decoder_agrees_with_the_reference(raw: bytes, cap: int) -> None:
    """The compiled whole-frame decoder accepts exactly what the reference accepts (header
    rules and Payload Length = the octets present), with equal header and payload."""
    from iobridge.npamp import _speedups

    valid = push_frame(raw[0] | 1, raw[1], int.from_bytes(raw[2:10], "big"), raw[36:], flags=2)
    for buf in (raw, valid, valid + b"x", valid[:-1]):
        try:
            expected = pull_frame_reference(buf, max_payload_length=cap)
        except FrameDecodeError:
            assert _speedups.pull_frame(Frame, FrameHeader, buf, cap) is None
        else:
            got = _speedups.pull_frame(Frame, FrameHeader, buf, cap)
            assert got == expected and type(got) is Frame and type(got.header) is FrameHeader
            assert pull_frame(buf, max_payload_length=cap) == expected


@given(st.binary(min_size=36, max_size=60), st.integers(0, 2**25))
def test_compiled_header_decoder_agrees_with_the_reference(raw: bytes, cap: int) -> None:
    """The compiled decoder accepts exactly what the reference accepts, with equal fields."""
    from iobridge.npamp import _speedups

    valid = push_frame(raw[0] | 1, raw[1], int.from_bytes(raw[2:10], "big"), raw[36:], flags=2)
    for buf in (raw, valid, bytearray(valid)):
        try:
            expected = pull_frame_header_reference(buf, max_payload_length=cap)
        except FrameDecodeError:
            assert _speedups.pull_header(FrameHeader, buf, 0, cap) is None
        else:
            assert _speedups.pull_header(FrameHeader, buf, 0, cap) == expected
            assert pull_frame_header(buf, max_payload_length=cap) == expected
