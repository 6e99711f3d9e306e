"""The compiled per-frame path's own choices: CRC32C by CPU instruction or table, untracked
decoded frames, argument checking of the per-frame calls, the run opener's per-type check
and the client decoder's slot reads. Each is compared with the reference or the library."""

from __future__ import annotations

import gc
from dataclasses import dataclass

import google_crc32c
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.record.cipher import COMPILED_MAX_SEALED, RecordCipher, SendState
from iobridge.npamp.wire.frame import (
    DEFAULT_MAX_PAYLOAD_LENGTH,
    FrameDecodeError,
    pull_frame,
    pull_frame_reference,
)

_speedups = pytest.importorskip("iobridge.npamp._speedups")

KEY, IV = bytes(range(32)), bytes(range(12))


@given(st.binary(max_size=100))
def test_crc32c_by_instruction_and_by_table_match_the_library(data: bytes) -> None:
    expected = google_crc32c.value(data)
    assert _speedups.crc32c(data) == expected
    assert _speedups.crc32c(data, True) == expected


def test_crc32c_of_every_length_around_the_eight_octet_steps() -> None:
    data = bytes(range(7, 250))
    for size in range(0, 41):
        assert _speedups.crc32c(data[:size]) == google_crc32c.value(data[:size]), size
        assert _speedups.crc32c(data[:size], True) == google_crc32c.value(data[:size]), size


@pytest.mark.parametrize("size", [0, 64, COMPILED_MAX_SEALED, 16 * 1024])
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


def test_per_frame_calls_check_their_arguments() -> None:
    fast = _speedups.Cipher(KEY, IV)
    frame = fast.seal(0x22, 0x0100, 13, 0, b"abc")
    assert fast.open(0x22, 0x0100, 13, 0, 19, frame[36:]) == b"abc"
    assert fast.open(0x22, 0x0100, 13, 1, 19, frame[36:]) is None  # another nonce: forged
    with pytest.raises(TypeError):
        fast.seal(0x22, 0x0100, 13, 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        fast.seal(0x22, 0x0100, 13, 0, "abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fast.seal(0x22, "0x0100", 13, 0, b"abc")  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        fast.seal(0x22, 0x10000, 13, 0, b"abc")
    with pytest.raises(TypeError):
        fast.open(0x22, 0x0100, 13, 0, 19)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _speedups.pull_frame(frame, frame, frame, DEFAULT_MAX_PAYLOAD_LENGTH)  # type: ignore[arg-type]


def _made(*values: object) -> tuple[object, ...]:
    return values


@pytest.mark.parametrize(
    ("stop", "taken"), [(frozenset(), 4), (frozenset({0x0102}), 2), (frozenset({0x0101}), 0)]
)
def test_open_frames_checks_each_new_frame_type_against_stop(
    stop: frozenset[int], taken: int
) -> None:
    types = [0x0101, 0x0101, 0x0102, 0x0101]
    cipher = RecordCipher(1, KEY, IV)
    wire = bytearray(SendState(13, cipher).seal_many([(t, b"p%d" % t) for t in types]))
    fast = cipher._fast
    assert fast is not None
    pos, seq, made = fast.open_frames(
        wire, 0, 13, 0, DEFAULT_MAX_PAYLOAD_LENGTH, COMPILED_MAX_SEALED, stop, _made
    )
    assert seq == taken and len(made) == taken
    assert [m[1] for m in made] == types[:taken]
    assert [m[2] for m in made] == [b"p%d" % t for t in types[:taken]]
    assert pos == taken * (36 + 4 + 16)  # header, b"p257", tag


@dataclass(frozen=True, slots=True, kw_only=True)
class _Slotted:
    correlation_id: bytes
    event_id: int
    data: bytes
    resumable: bool


class _Plain:
    def __init__(self, correlation_id: bytes, event_id: int, data: bytes, resumable: bool):
        self.correlation_id, self.event_id = correlation_id, event_id
        self.data, self.resumable = data, resumable


@pytest.mark.parametrize("cls", [_Slotted, _Plain])
def test_decode_run_reads_slots_and_plain_attributes_alike(cls: type) -> None:
    events = [
        cls(correlation_id=b"c", event_id=i, data=b'{"n":%d}' % i, resumable=i == 2)
        for i in range(1, 4)
    ] + [cls(correlation_id=b"other", event_id=9, data=b"{}", resumable=True)]
    index, made, resumable = _speedups.decode_run(
        events, 0, cls, b"c", _made, orjson.loads, orjson.JSONDecodeError
    )
    assert index == 3 and resumable is False
    assert made == [(i, b'{"n":%d}' % i, {"n": i}) for i in range(1, 4)]


def test_each_direction_is_keyed_on_first_use_and_reinit_takes_the_new_key() -> None:
    """A cipher keys its sealing and its opening context when each is first used (a send
    state never opens, a receive state never seals); re-initialising it drops both."""
    sealer, opener = _speedups.Cipher(KEY, IV), _speedups.Cipher(KEY, IV)
    wire = sealer.seal(0x22, 0x0200, 13, 0, b"hello")
    assert opener.open(0x22, 0x0200, 13, 0, len(wire) - 36, wire[36:]) == b"hello"
    assert sealer.open(0x22, 0x0200, 13, 0, len(wire) - 36, wire[36:]) == b"hello"  # both now
    other = bytes(range(1, 33))
    for cipher in (sealer, opener):
        cipher.__init__(other, IV)
        assert cipher.open(0x22, 0x0200, 13, 0, len(wire) - 36, wire[36:]) is None
        assert cipher.seal(0x22, 0x0200, 13, 0, b"hello") == _speedups.Cipher(other, IV).seal(
            0x22, 0x0200, 13, 0, b"hello"
        )
    with pytest.raises(ValueError):
        _speedups.Cipher(KEY[:31], IV)
