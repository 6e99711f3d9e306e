"""Tests for AEAD record protection and per-(channel, direction) sequence state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import given
from hypothesis import strategies as st

from iobridge.npamp.errors import (
    AeadFailure,
    FrameDecodeError,
    LocalProtocolError,
    ReplayedSequence,
    SequenceExhausted,
    SequenceGap,
    SequenceWrapped,
    UnencryptedFrame,
)
from iobridge.npamp.record import application_keys
from iobridge.npamp.record.cipher import (
    LAST_DATA_SEQUENCE,
    SUITE_AES_256_GCM,
    SUITE_CHACHA20_POLY1305,
    TAG_SIZE,
    ReceiveState,
    RecordCipher,
    SendState,
    make_nonce,
    open_frame,
    seal_frame,
)
from iobridge.npamp.wire.frame import (
    HEADER_SIZE,
    MAX_SEQUENCE,
    Flags,
    Frame,
    complete_header,
    crc32c,
    pull_frame,
    push_frame,
    push_header_prefix,
)

VECTORS = Path(__file__).parent / "vectors"
KAT: dict[str, Any] = json.loads((VECTORS / "record_kat.json").read_text())
KEY = bytes(range(32))
IV = bytes(range(100, 112))


@pytest.mark.parametrize("vec", KAT["frames"], ids=lambda v: v["name"])
def test_handshake_flow_kat_frames_seal_and_open(vec: dict[str, Any]) -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, bytes.fromhex(vec["key"]), bytes.fromhex(vec["iv"]))
    plaintext = bytes.fromhex(vec["plaintext"])
    wire = seal_frame(
        cipher,
        frame_type=vec["frame_type"],
        channel=vec["channel"],
        seq=vec["seq"],
        plaintext=plaintext,
    )
    assert wire.hex() == vec["wire"]
    frame = pull_frame(bytes.fromhex(vec["wire"]))
    assert frame.header.payload_length == len(plaintext) + TAG_SIZE
    assert open_frame(cipher, frame) == plaintext


@pytest.mark.parametrize("vec", KAT["frames"], ids=lambda v: v["name"])
def test_handshake_flow_kat_frames_through_send_and_receive_states(vec: dict[str, Any]) -> None:
    key, iv = bytes.fromhex(vec["key"]), bytes.fromhex(vec["iv"])
    cipher = RecordCipher(SUITE_AES_256_GCM, key, iv)
    sender, receiver = SendState(vec["channel"], cipher), ReceiveState(vec["channel"], cipher)
    sender.next_seq = receiver.expected_seq = vec["seq"]
    plaintext = bytes.fromhex(vec["plaintext"])
    assert sender.seal(vec["frame_type"], plaintext).hex() == vec["wire"]
    assert receiver.open(pull_frame(bytes.fromhex(vec["wire"]))) == plaintext


def test_application_keys_from_master_match_kat() -> None:
    app = KAT["application"]
    master = bytes.fromhex(app["master_secret"])
    for direction, name in ((0, "c2s"), (1, "s2c")):
        key, iv = application_keys(master, direction, 0, SUITE_AES_256_GCM, 0, "sha256")
        assert (key.hex(), iv.hex()) == (app[f"{name}_key"], app[f"{name}_iv"])


def test_nonce_is_iv_xor_seq() -> None:
    iv = bytes.fromhex("000102030405060708090a0b")
    assert make_nonce(iv, 0) == iv
    assert make_nonce(iv, 1).hex() == "000102030405060708090a0a"
    assert make_nonce(iv, MAX_SEQUENCE).hex() == "00010203fbfaf9f8f7f6f5f4"
    assert RecordCipher(1, KEY, iv).nonce(5) == make_nonce(iv, 5)
    with pytest.raises(LocalProtocolError, match=r"^IV must be 12 octets, got 11$"):
        make_nonce(iv[:11], 0)
    with pytest.raises(LocalProtocolError, match=r"^sequence number 18446744073709551616 does not"):
        make_nonce(iv, 2**64)


def test_wire_aad_uses_sealed_length_and_matches_raw_aesgcm() -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    wire = seal_frame(cipher, frame_type=0x0100, channel=0x000D, seq=3, plaintext=b"hello")
    assert wire[4] == 0x22
    expected = AESGCM(KEY).encrypt(make_nonce(IV, 3), b"hello", wire[:21])
    assert wire[HEADER_SIZE:] == expected
    assert int.from_bytes(wire[17:21], "big") == 5 + TAG_SIZE


def test_chacha_suite_roundtrip_and_bad_parameters() -> None:
    cipher = RecordCipher(SUITE_CHACHA20_POLY1305, KEY, IV)
    wire = seal_frame(cipher, frame_type=1, channel=0, seq=0, plaintext=b"x")
    assert open_frame(cipher, pull_frame(wire)) == b"x"
    bad_sizes = r"^need a 32-octet key and a 12-octet IV$"
    for args, reason in (
        ((3, KEY, IV), r"^unsupported AEAD suite 0x0003$"),
        ((1, KEY[:16], IV), bad_sizes),
        ((1, KEY, IV[:8]), bad_sizes),
    ):
        with pytest.raises(LocalProtocolError, match=reason):
            RecordCipher(*args)
    assert RecordCipher(SUITE_CHACHA20_POLY1305, KEY, IV).suite == SUITE_CHACHA20_POLY1305


def _flip(wire: bytes, index: int) -> bytes:
    b = bytearray(wire)
    b[index] ^= 0x01
    return bytes(b)


@pytest.mark.parametrize(
    "index", [HEADER_SIZE, HEADER_SIZE + 4, -TAG_SIZE, -1], ids=["ct0", "ct4", "tag0", "tag15"]
)
def test_flipped_ciphertext_or_tag_rejected(index: int) -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    wire = seal_frame(cipher, frame_type=1, channel=0, seq=0, plaintext=b"payload!")
    receiver = ReceiveState(0, cipher)
    with pytest.raises(AeadFailure):
        receiver.open(pull_frame(_flip(wire, index)))
    assert receiver.expected_seq == 0  # nothing consumed
    assert receiver.open(pull_frame(wire)) == b"payload!"


def test_header_field_changed_with_valid_crc_fails_aead() -> None:
    """AAD covers octets 0-20: even a CRC-consistent header change is caught."""
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    wire = bytearray(seal_frame(cipher, frame_type=0x0100, channel=0, seq=0, plaintext=b"p"))
    wire[6] ^= 0x01  # frame type 0x0100 -> 0x0101
    wire[21:25] = crc32c(bytes(wire[:21])).to_bytes(4, "big")
    with pytest.raises(AeadFailure):
        open_frame(cipher, pull_frame(bytes(wire)))


def test_cleartext_frame_and_short_region_rejected() -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    with pytest.raises(UnencryptedFrame, match=r"^cleartext frame on channel 0x0000$"):
        ReceiveState(0, cipher).open(pull_frame(push_frame(1, 0, 0, bytes(32))))
    with pytest.raises(UnencryptedFrame, match=r"^frame 0x0001 on channel 0x000d lacks ENC$"):
        open_frame(cipher, pull_frame(push_frame(1, 0x000D, 0, bytes(32))))
    with pytest.raises(AeadFailure, match=r"^sealed region of 5 octets is shorter than the tag$"):
        open_frame(cipher, pull_frame(push_frame(1, 0, 0, bytes(5), Flags.ENC)))


def _pair(channel: int = 0x000D) -> tuple[SendState, ReceiveState]:
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    return SendState(channel, cipher), ReceiveState(channel, cipher)


def test_send_receive_in_order() -> None:
    sender, receiver = _pair()
    frames = [pull_frame(sender.seal(0x0100, b"m%d" % i)) for i in range(3)]
    assert [f.seq for f in frames] == [0, 1, 2]
    assert [receiver.open(f) for f in frames] == [b"m0", b"m1", b"m2"]
    assert receiver.expected_seq == 3
    urgent = pull_frame(sender.seal(0x0100, b"u", urgent=True))
    assert urgent.header.urgent and urgent.header.encrypted


def test_replayed_sequence_rejected() -> None:
    sender, receiver = _pair()
    first = pull_frame(sender.seal(0x0100, b"a"))
    receiver.open(first)
    with pytest.raises(ReplayedSequence, match=r"^channel 0x000d: seq 0 replayed \(expected 1\)$"):
        receiver.open(first)
    assert receiver.expected_seq == 1


def test_skipped_sequence_rejected() -> None:
    sender, receiver = _pair()
    sender.seal(0x0100, b"lost")
    second = pull_frame(sender.seal(0x0100, b"b"))
    with pytest.raises(SequenceGap, match=r"^channel 0x000d: seq 1 skips ahead \(expected 0\)$"):
        receiver.open(second)
    assert receiver.expected_seq == 0


def test_wrong_channel_key_rejected() -> None:
    ch13 = RecordCipher(SUITE_AES_256_GCM, *application_keys(KEY, 0, 0, 1, 0x000D, "sha256"))
    ch15 = RecordCipher(SUITE_AES_256_GCM, *application_keys(KEY, 0, 0, 1, 0x000F, "sha256"))
    wire = seal_frame(ch15, frame_type=0x0100, channel=0x000D, seq=0, plaintext=b"x")
    receiver = ReceiveState(0x000D, ch13)
    with pytest.raises(AeadFailure):
        receiver.open(pull_frame(wire))
    with pytest.raises(FrameDecodeError, match=r"^frame for channel 0x000d given to 0x000f$"):
        ReceiveState(0x000F, ch15).open(pull_frame(wire))


def test_sequence_never_wraps_last_slot_for_key_update() -> None:
    sender, receiver = _pair()
    sender.next_seq = receiver.expected_seq = LAST_DATA_SEQUENCE
    receiver.open(pull_frame(sender.seal(0x0100, b"last data")))
    assert sender.exhausted
    with pytest.raises(
        SequenceExhausted,
        match=r"^channel 0x000d epoch 0: sequence space used up, KEY_UPDATE required$",
    ):
        sender.seal(0x0100, b"one too many")
    final = pull_frame(sender.seal(0x0006, b"ku", last=True))
    assert final.seq == MAX_SEQUENCE
    receiver.open(final)
    with pytest.raises(SequenceExhausted):
        sender.seal(0x0006, b"again", last=True)
    with pytest.raises(SequenceWrapped, match=r"^channel 0x000d: epoch sequence space used$"):
        receiver.open(Frame(header=final.header, payload=final.payload))


def test_rekey_restarts_sequence_and_old_key_fails() -> None:
    sender, receiver = _pair()
    receiver.open(pull_frame(sender.seal(0x0100, b"e0")))
    new = RecordCipher(SUITE_AES_256_GCM, bytes(32), bytes(12))
    sender.rekey(new, 1)
    fresh = pull_frame(sender.seal(0x0100, b"e1"))
    assert (fresh.seq, sender.epoch) == (0, 1)
    assert receiver.epoch == 0
    with pytest.raises(ReplayedSequence):
        receiver.open(fresh)
    receiver.rekey(RecordCipher(SUITE_AES_256_GCM, KEY, IV), 1)
    with pytest.raises(AeadFailure):
        receiver.open(fresh)
    receiver.rekey(new, 1)
    assert receiver.epoch == 1
    assert receiver.open(fresh) == b"e1"


@given(
    frame_type=st.integers(1, 0xFFFF),
    channel=st.integers(0, 0xFFFE),
    start=st.sampled_from([0, 1, 2**32, LAST_DATA_SEQUENCE - 1]),
    plaintext=st.binary(max_size=300) | st.binary(min_size=2048, max_size=5000),
    urgent=st.booleans(),
    suite=st.sampled_from([SUITE_AES_256_GCM, SUITE_CHACHA20_POLY1305]),
)
def test_per_frame_path_matches_the_reference_functions(
    frame_type: int,
    channel: int,
    start: int,
    plaintext: bytes,
    urgent: bool,
    suite: int,
) -> None:
    """SendState.seal / ReceiveState.open = seal_frame / open_frame octets."""
    cipher = RecordCipher(suite, KEY, IV)
    sender, receiver = SendState(channel, cipher), ReceiveState(channel, cipher)
    sender.next_seq = receiver.expected_seq = start
    wire = sender.seal(frame_type, plaintext, urgent=urgent)
    flags = 0x03 if urgent else 0x02
    assert wire == seal_frame(
        cipher, frame_type=frame_type, channel=channel, seq=start, plaintext=plaintext, flags=flags
    )
    frame = pull_frame(wire)
    assert open_frame(cipher, frame) == plaintext
    assert receiver.open(frame) == plaintext and receiver.expected_seq == start + 1
    tampered = pull_frame(wire[:-1] + bytes([wire[-1] ^ 1]))
    receiver.expected_seq = start
    with pytest.raises(AeadFailure):
        receiver.open(tampered)
    assert receiver.expected_seq == start  # nothing advances on a failed open


def test_per_frame_path_rejects_fields_out_of_range() -> None:
    cipher = RecordCipher(SUITE_AES_256_GCM, KEY, IV)
    sender = SendState(0x000D, cipher)
    with pytest.raises(LocalProtocolError):
        sender.seal(0x10000, b"")
    assert sender.next_seq == 0
    short = Frame(header=pull_frame(sender.seal(1, b"")).header, payload=b"short")
    with pytest.raises(AeadFailure):
        ReceiveState(0x000D, cipher).open(short)


@pytest.mark.parametrize("suite", [SUITE_AES_256_GCM, SUITE_CHACHA20_POLY1305])
def test_an_empty_payload_seals_to_exactly_the_tag_and_opens(suite: int) -> None:
    cipher = RecordCipher(suite, KEY, IV)
    sender, receiver = SendState(7, cipher), ReceiveState(7, cipher)
    frame = pull_frame(sender.seal(0x0100, b""))
    assert len(frame.payload) == TAG_SIZE
    assert receiver.open(frame) == b""
    assert cipher.decrypt(5, b"aad", cipher.encrypt(5, b"aad", b"")) == b""
    with pytest.raises(AeadFailure, match=r"^sealed region of 15 octets is shorter than the tag$"):
        cipher.decrypt(0, b"", bytes(TAG_SIZE - 1))
    with pytest.raises(AeadFailure, match=r"^AEAD tag did not verify$"):
        cipher.decrypt(0, b"", bytes(TAG_SIZE))


def test_frames_are_urgent_only_when_asked_and_states_start_at_epoch_0() -> None:
    sender, receiver = _pair()
    assert (sender.epoch, receiver.epoch, sender.next_seq, receiver.expected_seq) == (0, 0, 0, 0)
    plain = pull_frame(sender.seal(0x0100, b"a"))
    urgent = pull_frame(sender.seal(0x0100, b"b", urgent=True))
    assert plain.header.flags == Flags.ENC
    assert urgent.header.flags == Flags.ENC | Flags.URG
    assert [receiver.open(plain), receiver.open(urgent)] == [b"a", b"b"]


def test_a_forged_frame_fails_with_the_tag_message() -> None:
    sender, receiver = _pair()
    wire = bytearray(sender.seal(0x0100, b"payload!"))
    wire[-1] ^= 1
    with pytest.raises(AeadFailure, match=r"^AEAD tag did not verify$"):
        receiver.open(pull_frame(bytes(wire)))
    assert receiver.expected_seq == 0


@pytest.mark.parametrize("suite", [SUITE_AES_256_GCM, SUITE_CHACHA20_POLY1305])
def test_the_key_lives_only_in_cryptographys_aead_object(suite: int) -> None:
    cipher = RecordCipher(suite, KEY, IV)
    held = [getattr(cipher, name) for name in RecordCipher.__slots__]
    assert KEY not in held and not any(isinstance(v, bytes | bytearray) for v in held)
    assert type(cipher._aead) is (AESGCM if suite == SUITE_AES_256_GCM else ChaCha20Poly1305)


@pytest.mark.parametrize("suite", [SUITE_AES_256_GCM, SUITE_CHACHA20_POLY1305])
@given(
    plaintext=st.binary(max_size=64),
    seq=st.integers(0, LAST_DATA_SEQUENCE),
    channel=st.integers(0, 0xFFFE),
    urgent=st.booleans(),
)
def test_the_ciphers_frame_seal_and_open_are_the_wire_helpers_octets(
    suite: int, plaintext: bytes, seq: int, channel: int, urgent: bool
) -> None:
    """RecordCipher.seal_frame packs the header itself: the same octets as the wire helpers
    around the raw AEAD, and open_frame takes them back."""
    cipher = RecordCipher(suite, KEY, IV)
    aead = AESGCM(KEY) if suite == SUITE_AES_256_GCM else ChaCha20Poly1305(KEY)
    flags = int(Flags.ENC | Flags.URG) if urgent else int(Flags.ENC)
    prefix = push_header_prefix(flags, 0x0104, channel, seq, len(plaintext) + TAG_SIZE)
    expected = complete_header(prefix) + aead.encrypt(make_nonce(IV, seq), plaintext, prefix)
    wire = cipher.seal_frame(int(Flags.URG) if urgent else 0, 0x0104, channel, seq, plaintext)
    assert wire == expected
    frame = pull_frame(wire)
    assert cipher.open_frame(frame.header, frame.payload) == plaintext
