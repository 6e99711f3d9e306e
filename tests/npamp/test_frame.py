"""Tests for the frame header codec and the stream FrameReader."""

from __future__ import annotations

import struct
from typing import Any

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


# --- the reasons (they reach the peer as the ERROR frame's text) -----------------------------


def _with(offset: int, value: int) -> bytes:
    bad = bytearray(GOLDEN_PING)
    bad[offset] = value
    return bytes(bad)


@pytest.mark.parametrize(
    ("build", "error", "reason"),
    [
        (lambda: GOLDEN_PING[:35], FrameDecodeError, "header truncated: 35 of 36 octets"),
        (
            lambda: GOLDEN_PING[:21] + bytes(4) + GOLDEN_PING[25:],
            CrcMismatch,
            "header CRC32C 0x00000000 != computed 0x0d880c25",
        ),
        (lambda: _recrc(b"NPAX" + GOLDEN_PING[4:]), BadMagic, "bad magic b'NPAX'"),
        (lambda: _recrc(_with(4, 0x30)), UnsupportedVersion, "unsupported wire version 3"),
        (lambda: _recrc(_with(4, 0xF2)), UnsupportedVersion, "unsupported wire version 15"),
        (
            lambda: _with(35, 1),
            ReservedNotZero,
            "reserved header octets 25-35 are not all zero",
        ),
        (
            lambda: push_frame(0, 0, 0, b""),
            ForbiddenFrameType,
            "frame type 0x0000 must not be used",
        ),
        (
            lambda: push_frame(1, 0xFFFF, 0, b""),
            ForbiddenChannel,
            "channel 0xFFFF must not appear on the wire",
        ),
        (
            lambda: push_frame(1, 0, 0, bytes(100))[:36],
            FrameTooLarge,
            "payload length 100 exceeds cap 99",
        ),
    ],
    ids=[
        "truncated",
        "crc",
        "magic",
        "version-3",
        "version-15",
        "reserved",
        "type-0",
        "channel-ffff",
        "too-large",
    ],
)
def test_each_header_rule_names_what_it_saw(build: Any, error: type, reason: str) -> None:
    for decode in (pull_frame_header, pull_frame_header_reference):
        with pytest.raises(error) as info:
            decode(build(), max_payload_length=99)
        assert type(info.value) is error and str(info.value) == reason
        with pytest.raises(error) as at:  # the same header further into a buffer
            decode(b"\xee" * 5 + build(), 5, max_payload_length=99)
        assert str(at.value) == reason


def test_the_reference_decoder_reads_a_header_at_an_offset_in_any_buffer() -> None:
    wire = push_frame(0x0101, 0x000D, 7, b"abc", flags=Flags.ENC)
    expected = FrameHeader(
        frame_type=0x0101, channel=0x000D, seq=7, payload_length=3, flags=Flags.ENC
    )
    for buf in (b"\x00" * 3 + wire, bytearray(b"\x00" * 3 + wire), memoryview(b"\x00" * 3 + wire)):
        assert pull_frame_header_reference(buf, 3) == expected
        assert pull_frame_header(buf, 3) == expected
    with pytest.raises(FrameDecodeError, match=r"^header truncated: 35 of 36 octets$"):
        pull_frame_header_reference(b"\x00" * 3 + wire[:35], 3)


def test_a_whole_frame_names_the_length_mismatch() -> None:
    wire = push_frame(1, 0, 0, b"abcd")
    with pytest.raises(FrameDecodeError, match=r"^payload length 4 != 3 octets present$"):
        pull_frame(wire[:-1])
    with pytest.raises(FrameTooLarge, match=r"^payload length 4 exceeds cap 3$"):
        pull_frame(wire, max_payload_length=3)
    assert pull_frame(wire, max_payload_length=4).payload == b"abcd"


def test_a_pushed_header_carries_its_version() -> None:
    header = FrameHeader(frame_type=1, channel=0, seq=0, payload_length=0, version=3)
    assert push_frame_header(header)[4] == 0x30


def test_iterating_a_reader_yields_the_complete_frames_then_stops() -> None:
    reader = FrameReader()
    wire = push_frame(1, 0, 0, b"a") + push_frame(1, 0, 1, b"bc")
    reader.receive_data(wire + wire[:10])
    assert [(f.seq, f.payload) for f in reader] == [(0, b"a"), (1, b"bc")]
    assert list(reader) == []  # the partial third frame waits for more octets
    reader.receive_data(wire[10:37])
    assert [f.payload for f in reader] == [b"a"]
