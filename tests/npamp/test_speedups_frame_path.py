"""The compiled header decode (``_speedups.pull_header`` / ``pull_frame``) against the pure
Python reference: the same headers and frames, the same rejection for every bad octet, its
own CRC32C equal to google-crc32c's, decoded frames left to reference counting, and
argument checking. ``make fuzz`` runs the same comparison on mutated input under
AddressSanitizer and UBSan."""

from __future__ import annotations

import gc
import struct

import google_crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.record.cipher import RecordCipher, SendState
from iobridge.npamp.wire.frame import (
    DEFAULT_MAX_PAYLOAD_LENGTH,
    FrameDecodeError,
    FrameHeader,
    pull_frame,
    pull_frame_header_reference,
    pull_frame_reference,
)

_speedups = pytest.importorskip("iobridge.npamp._speedups")

KEY, IV = bytes(range(32)), bytes(range(12))


@given(
    flags=st.integers(0, 15),
    fields=st.binary(min_size=16, max_size=16),
    tail=st.binary(min_size=11, max_size=11),
)
def test_the_compiled_crc32c_is_the_librarys(flags: int, fields: bytes, tail: bytes) -> None:
    """A header prefix (magic, version, any flags, type, channel, seq, length) with
    google-crc32c's CRC after it: the compiled decode accepts or refuses exactly what the
    reference does, and decodes the same header."""
    prefix = b"NPAM" + bytes([0x20 | flags]) + fields
    for reserved in (bytes(11), tail):
        header = prefix + struct.pack(">I", google_crc32c.value(prefix)) + reserved
        try:
            expected: FrameHeader | None = pull_frame_header_reference(header)
        except FrameDecodeError:
            expected = None
        assert _speedups.pull_header(FrameHeader, header, 0, DEFAULT_MAX_PAYLOAD_LENGTH) == (
            expected
        )


def test_a_valid_header_decodes_only_with_its_own_crc() -> None:
    wire = SendState(0x000D, RecordCipher(1, KEY, IV)).seal(0x0100, b"x")
    header = _speedups.pull_header(FrameHeader, wire, 0, DEFAULT_MAX_PAYLOAD_LENGTH)
    assert header == pull_frame_header_reference(wire)
    for bit in range(32):
        crc = struct.unpack(">I", wire[21:25])[0] ^ (1 << bit)
        bad = wire[:21] + struct.pack(">I", crc) + wire[25:]
        assert _speedups.pull_header(FrameHeader, bad, 0, DEFAULT_MAX_PAYLOAD_LENGTH) is None


@pytest.mark.parametrize("size", [0, 64, 2048, 16 * 1024])
def test_compiled_pull_frame_is_the_reference_and_leaves_the_collector_alone(size: int) -> None:
    wire = SendState(0x000D, RecordCipher(1, KEY, IV)).seal(0x0100, bytes(size))
    frame = pull_frame(wire)
    assert frame == pull_frame_reference(wire)
    assert type(frame.payload) is bytes and frame.payload == wire[36:]
    # Ints and bytes cannot form a cycle: neither tuple is on the collector's lists.
    assert not gc.is_tracked(frame) and not gc.is_tracked(frame.header)


def _rejection(decode: object, wire: bytes) -> str | None:
    try:
        decode(wire)  # type: ignore[operator]
    except FrameDecodeError as exc:
        return type(exc).__name__
    return None


def test_tampered_frames_get_the_reference_rejection() -> None:
    wire = SendState(0x000D, RecordCipher(1, KEY, IV)).seal(0x0100, b"x" * 40)
    for index in range(len(wire)):
        tampered = bytearray(wire)
        tampered[index] ^= 0x01
        got = _rejection(pull_frame, bytes(tampered))
        assert got == _rejection(pull_frame_reference, bytes(tampered)), index
        assert (got is None) == (index >= 36), index  # header octets are all checked
    for cut in (0, 35, 36, len(wire) - 1):
        assert _rejection(pull_frame, wire[:cut]) == _rejection(pull_frame_reference, wire[:cut])
        assert _rejection(pull_frame, wire[:cut]) is not None


def test_the_compiled_calls_check_their_arguments() -> None:
    wire = SendState(0x000D, RecordCipher(1, KEY, IV)).seal(0x0100, b"abc")
    with pytest.raises(TypeError):
        _speedups.pull_frame(wire, wire, wire, DEFAULT_MAX_PAYLOAD_LENGTH)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.pull_frame(tuple, FrameHeader, wire)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _speedups.pull_frame(tuple, FrameHeader, wire.hex(), DEFAULT_MAX_PAYLOAD_LENGTH)
    with pytest.raises(TypeError):
        _speedups.pull_header(FrameHeader, "text", 0, DEFAULT_MAX_PAYLOAD_LENGTH)  # type: ignore[arg-type]
    # An offset outside the buffer is no header, never a read out of bounds.
    for offset in (-1, len(wire), len(wire) - 35, 2**62):
        assert _speedups.pull_header(FrameHeader, wire, offset, DEFAULT_MAX_PAYLOAD_LENGTH) is None
