"""Property tests for every decoder in the wire/record/association layers.

Invariant (h11 ``fuzz/afl-server.py``): any input either decodes or raises an
:class:`~iobridge.npamp.errors.NpampError`; nothing else escapes, nothing hangs, and the
outcome does not depend on how the input is chunked.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iobridge.npamp.connection import NpampConnection
from iobridge.npamp.errors import NpampError
from iobridge.npamp.events import ConnectionTerminated, Event
from iobridge.npamp.frame import FrameReader, pull_frame, pull_frame_header, push_frame
from iobridge.npamp.handshake import ClientHandshake, ServerHandshake
from iobridge.npamp.profiles import Kem, kem_params
from iobridge.npamp.record import RecordCipher, open_frame
from iobridge.npamp.tlv import pull_tlv, pull_tlvs

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
