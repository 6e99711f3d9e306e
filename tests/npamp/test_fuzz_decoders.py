"""Property tests for every decoder in the wire/record/association layers.

Invariant (h11 ``fuzz/afl-server.py``): any input either decodes or raises an
:class:`~iobridge.npamp.errors.NpampError`; nothing else escapes, nothing hangs, and the
outcome does not depend on how the input is chunked. Where the spec gives the rules, the
frame header and TLV decoders must also agree with an oracle written here from the rule table
(draft §4.4: CRC32C first, then magic, version, reserved, type 0, channel 0xFFFF, the cap;
spec/07: TLV lengths and the critical bit) on what is accepted, what it decodes to, and which
error a rejection raises; and encoding then decoding gives back what was encoded.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iobridge.npamp.association import ConnectionTerminated, Event, NpampConnection
from iobridge.npamp.errors import (
    BadMagic,
    CrcMismatch,
    ForbiddenChannel,
    ForbiddenFrameType,
    FrameDecodeError,
    FrameTooLarge,
    NpampError,
    ReservedNotZero,
    TlvDecodeError,
    UnknownCriticalTlv,
    UnsupportedVersion,
)
from iobridge.npamp.handshake import ClientHandshake, ServerHandshake
from iobridge.npamp.handshake.profiles import Kem, kem_params
from iobridge.npamp.record import RecordCipher, open_frame
from iobridge.npamp.wire import (
    FrameReader,
    Tlv,
    pull_frame,
    pull_frame_header,
    pull_tlv,
    pull_tlvs,
    push_frame,
    push_tlvs,
)

from .test_connection import handshake_configs

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

#: Inputs that look like frames often enough to get past the CRC: valid frames, then mutated.
frames = st.builds(
    push_frame,
    frame_type=st.integers(0, 0xFFFF),
    channel=st.integers(0, 0xFFFF),
    seq=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=64),
    flags=st.integers(0, 15),
)


@st.composite
def mutated_streams(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(draw(st.lists(frames, max_size=4))))
    for _ in range(draw(st.integers(0, 3))):
        if data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    return bytes(data) + draw(st.binary(max_size=40))


wire = st.one_of(st.binary(max_size=200), mutated_streams())


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> object:
    try:
        return fn(*args, **kwargs)
    except NpampError as exc:
        return type(exc)


# -- the oracle: the rule tables, written from the spec ---------------------------------


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c_oracle(data: bytes) -> int:
    """CRC-32C, bit by bit from its definition (not the native implementation)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _u(data: bytes, start: int, end: int) -> int:
    return int.from_bytes(data[start:end], "big")


def header_oracle(data: bytes, cap: int) -> object:
    """The header's fields, or the error class of the first rule it breaks (draft §4.4)."""
    if len(data) < 36:
        return FrameDecodeError
    if _u(data, 21, 25) != crc32c_oracle(data[:21]):
        return CrcMismatch
    if data[:4] != b"NPAM":
        return BadMagic
    if data[4] >> 4 != 2:
        return UnsupportedVersion
    if any(data[25:36]):
        return ReservedNotZero
    if _u(data, 5, 7) == 0:
        return ForbiddenFrameType
    if _u(data, 7, 9) == 0xFFFF:
        return ForbiddenChannel
    if _u(data, 17, 21) > cap:
        return FrameTooLarge
    return (_u(data, 5, 7), _u(data, 7, 9), _u(data, 9, 17), _u(data, 17, 21), data[4] & 0x0F)


def frame_oracle(data: bytes, cap: int) -> object:
    header = header_oracle(data, cap)
    if isinstance(header, type):
        return header
    assert isinstance(header, tuple)
    if header[3] != len(data) - 36:
        return FrameDecodeError
    return header, data[36:]


def tlvs_oracle(data: bytes, known: frozenset[int] | None) -> object:
    """The TLVs kept, or the error class (spec/07: unknown critical rejects, others skip)."""
    kept = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            return TlvDecodeError
        tlv_type, length = _u(data, pos, pos + 2), _u(data, pos + 2, pos + 4)
        if pos + 4 + length > len(data):
            return TlvDecodeError
        value = data[pos + 4 : pos + 4 + length]
        pos += 4 + length
        if known is not None and tlv_type not in known:
            if tlv_type & 0x8000:
                return UnknownCriticalTlv
            continue
        kept.append((tlv_type, value))
    return kept


def _exact(fn: Any, *args: Any, **kwargs: Any) -> object:
    """``fn``'s result, or the exact class of the NpampError it raised."""
    try:
        return fn(*args, **kwargs)
    except NpampError as exc:
        return type(exc)


def _header_fields(header: Any) -> object:
    if isinstance(header, type):
        return header
    return (header.frame_type, header.channel, header.seq, header.payload_length, header.flags)


def test_the_crc_oracle_is_crc32c() -> None:
    assert crc32c_oracle(b"123456789") == 0xE3069283  # the CRC-32C check value


@st.composite
def rule_headers(draw: st.DrawFn) -> bytes:
    """Headers with a correct CRC (mostly) whose fields hit each rule of the table."""
    magic = draw(st.sampled_from([b"NPAM", b"NPAM", b"NPAM", b"NPAX", b"\x00" * 4]))
    version = draw(st.sampled_from([2, 2, 2, 1, 3, 0, 15]))
    flags = draw(st.integers(0, 15))
    frame_type = draw(st.sampled_from([0x0001, 0x0100, 0xFFFF, 0x0000, 0x0000]))
    channel = draw(st.sampled_from([0x0000, 0x000D, 0xF000, 0xFFFE, 0xFFFF, 0xFFFF]))
    seq = draw(st.integers(0, 2**64 - 1))
    payload = draw(st.binary(max_size=40))
    length = draw(st.sampled_from([len(payload)] * 4 + [len(payload) + 1, 2**32 - 1, 0]))
    prefix = (
        magic
        + bytes([(version << 4) | flags])
        + frame_type.to_bytes(2, "big")
        + channel.to_bytes(2, "big")
        + seq.to_bytes(8, "big")
        + length.to_bytes(4, "big")
    )
    crc = crc32c_oracle(prefix) if draw(st.integers(0, 7)) else draw(st.integers(0, 2**32 - 1))
    reserved = bytes(11) if draw(st.integers(0, 6)) else draw(st.binary(min_size=11, max_size=11))
    data = prefix + crc.to_bytes(4, "big") + reserved + payload
    return data[: draw(st.sampled_from([len(data)] * 10 + [35, 20, 0]))]


oracle_inputs = st.one_of(rule_headers(), rule_headers(), rule_headers(), wire)


@settings(FUZZ, max_examples=1000)
@given(oracle_inputs, st.sampled_from([0, 16, 40, 2**24, 2**32 - 1]))
def test_frame_decoders_agree_with_the_rule_table(data: bytes, cap: int) -> None:
    assert _header_fields(_exact(pull_frame_header, data, max_payload_length=cap)) == (
        header_oracle(data, cap)
    )
    frame = _exact(pull_frame, data, max_payload_length=cap)
    got = frame if isinstance(frame, type) else (_header_fields(frame.header), frame.payload)
    assert got == frame_oracle(data, cap)


@FUZZ
@given(
    st.integers(1, 0xFFFF),
    st.integers(0, 0xFFFE),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=64),
    st.integers(0, 15),
)
def test_frame_encode_then_decode_round_trips(
    frame_type: int, channel: int, seq: int, payload: bytes, flags: int
) -> None:
    wire_bytes = push_frame(frame_type, channel, seq, payload, flags)
    assert header_oracle(wire_bytes, 64) == (frame_type, channel, seq, len(payload), flags)
    frame = pull_frame(wire_bytes, max_payload_length=64)
    assert _header_fields(frame.header) == (frame_type, channel, seq, len(payload), flags)
    assert frame.payload == payload


TLV_TYPES = st.sampled_from([0x0001, 0x0010, 0x0013, 0x7FFF, 0x8001, 0x8010, 0xFFFF])


@st.composite
def tlv_streams(draw: st.DrawFn) -> bytes:
    """Mostly well-formed TLV sequences, sometimes cut or with a lying Length."""
    tlvs = draw(st.lists(st.tuples(TLV_TYPES, st.binary(max_size=12)), max_size=5))
    data = push_tlvs(Tlv(t, v) for t, v in tlvs)
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data + draw(st.sampled_from([b"", b"", b"\x00", b"\x00\x01\x00\x05ab"]))


KNOWN = st.none() | st.frozensets(TLV_TYPES, max_size=4)


@settings(FUZZ, max_examples=1000)
@given(st.one_of(tlv_streams(), st.binary(max_size=60)), KNOWN)
def test_tlv_decoders_agree_with_the_rule_table(data: bytes, known: frozenset[int] | None) -> None:
    got = _exact(pull_tlvs, data, known)
    expected = tlvs_oracle(data, known)
    assert (got if isinstance(got, type) else [(t.type, t.value) for t in got]) == expected
    if known is None and not isinstance(got, type):
        assert push_tlvs(got) == data  # nothing is lost or reordered
    one = _exact(pull_tlv, data)
    whole = [] if len(data) < 4 else tlvs_oracle(data[: 4 + _u(data, 2, 4)], None)
    if len(data) >= 4 and _u(data, 2, 4) == len(data) - 4:
        assert isinstance(whole, list)
        assert not isinstance(one, type) and [(one.type, one.value)] == whole
    else:
        assert one is TlvDecodeError


@FUZZ
@given(wire, st.integers(0, 2**32 - 1))
def test_pull_frame_header_and_pull_frame(data: bytes, cap: int) -> None:
    _outcome(pull_frame_header, data, max_payload_length=cap)
    _outcome(pull_frame, data, max_payload_length=cap)


@FUZZ
@given(st.binary(max_size=300), st.frozensets(st.integers(0, 0xFFFF), max_size=5) | st.none())
def test_tlv_decoders(data: bytes, known: frozenset[int] | None) -> None:
    _outcome(pull_tlvs, data, known)
    _outcome(pull_tlv, data)


@FUZZ
@given(wire)
def test_open_frame_never_leaks_crypto_exceptions(data: bytes) -> None:
    frame = _outcome(pull_frame, data)
    if not isinstance(frame, type):
        _outcome(open_frame, RecordCipher(1, bytes(32), bytes(12)), frame)


def _reader_run(chunks: list[bytes]) -> tuple[list[object], object]:
    reader = FrameReader(max_payload_length=1000)
    got: list[object] = []
    try:
        for chunk in chunks:
            reader.receive_data(chunk)
            got.extend(reader)
    except NpampError as exc:
        return got, type(exc)
    return got, None


@FUZZ
@given(wire, st.integers(1, 50))
def test_frame_reader_chunking_invariant(data: bytes, size: int) -> None:
    whole = _reader_run([data])
    chunked = _reader_run([data[i : i + size] for i in range(0, len(data), size)])
    byte_by_byte = _reader_run([data[i : i + 1] for i in range(len(data))])
    assert whole == chunked == byte_by_byte


def _summary(events: list[Event]) -> list[object]:
    return [(type(e), type(e.error)) if isinstance(e, ConnectionTerminated) else e for e in events]


def _feed(conn: NpampConnection, chunks: list[bytes]) -> list[object]:
    events: list[Event] = []
    for chunk in chunks:
        events += conn.receive_data(chunk)  # must never raise on a live association
        if events and isinstance(events[-1], ConnectionTerminated):
            break
    return _summary(events)


@settings(FUZZ, max_examples=100)
@given(wire, st.integers(1, 64))
def test_server_handshake_input(data: bytes, size: int) -> None:
    _, s_hs = handshake_configs()
    results = []
    for step in (len(data) or 1, size, 1):
        server = NpampConnection(ServerHandshake(s_hs))
        server.initiate()
        results.append(_feed(server, [data[i : i + step] for i in range(0, len(data), step)]))
    assert results[0] == results[1] == results[2]


_C_HS, _S_HS = handshake_configs()
_KEM_CACHE: dict[bytes, tuple[bytes, bytes]] = {}


def _fixed_rng(n: int) -> bytes:
    return bytes([7]) * n


def _memo_encapsulate(kem: Kem, ek: bytes) -> tuple[bytes, bytes]:
    """Same (secret, ciphertext) for the same key, so every run derives the same keys."""
    if ek not in _KEM_CACHE:
        _KEM_CACHE[ek] = kem_params(kem).encapsulate(ek)
    return _KEM_CACHE[ek]


def _established() -> tuple[NpampConnection, bytes]:
    """A server that completed a deterministic handshake, and a client byte stream for it."""
    client = NpampConnection(ClientHandshake(_C_HS, rng=_fixed_rng))
    server = NpampConnection(ServerHandshake(_S_HS, rng=_fixed_rng, encapsulate=_memo_encapsulate))
    client.initiate()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    for i in range(3):
        client.send_frame(0x000D, 0x0100, b"frame %d" % i)
    client.key_update(0x000D)
    client.ping(0x0000, b"p")
    client.send_frame(0x000D, 0x0100, b"after")
    client.close()
    return server, client.data_to_send()


@settings(FUZZ, max_examples=60)
@given(st.data())
def test_open_association_mutated_traffic(data: st.DataObject) -> None:
    server, stream = _established()
    buf = bytearray(stream)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    mutated = bytes(buf[:cut]) + data.draw(st.binary(max_size=20))
    step = data.draw(st.integers(1, 97))
    whole = _feed(server, [mutated])
    server2, stream2 = _established()
    assert stream2 == stream  # deterministic keys: both servers see the same association
    chunked = _feed(server2, [mutated[i : i + step] for i in range(0, len(mutated), step)])
    assert whole == chunked
