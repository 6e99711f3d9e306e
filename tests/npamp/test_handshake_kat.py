"""The six public handshake known-answer files, reproduced byte for byte.

Encode direction: the sans-IO handshake, driven with the KAT's seeds through its injected
``rng``/``encapsulate`` (no patching), emits exactly the pinned frames. Decode direction: the
pinned frames parse (and, for AUTH, open) into the pinned fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, mlkem, x25519

from iobridge.npamp.handshake import IdentityKey, Transcript
from iobridge.npamp.handshake.machine import (
    CLIENT_CONTEXT,
    SERVER_CONTEXT,
    ClientHandshake,
    HandshakeCompleted,
    HandshakeConfig,
    ServerHandshake,
    cert_verify_input,
)
from iobridge.npamp.handshake.profiles import Kem, SignatureScheme, kem_params, x25519_shared
from iobridge.npamp.record import RecordCipher, open_frame
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.wire import Flags, FrameReader, pull_frame, pull_tlvs

VECTORS = Path(__file__).parent / "vectors"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


def h(x: str) -> bytes:
    return bytes.fromhex(x)


FLOW = load("handshake-flow-kat.json")
INP = FLOW["inputs"]
EXP = FLOW["expected"]
FRAME_NAMES = ["client_hello", "server_hello", "server_auth", "client_auth"]


def scripted_rng(*chunks: bytes) -> Callable[[int], bytes]:
    """An rng that hands out exactly ``chunks`` in order, checking each requested size."""
    queue = list(chunks)

    def rng(n: int) -> bytes:
        chunk = queue.pop(0)
        assert len(chunk) == n
        return chunk

    return rng


def run_flow() -> dict[str, Any]:
    """Drive client and server from the KAT seeds; collect frames, events and both cores."""
    client_id = IdentityKey.from_seed(
        SignatureScheme.ED25519, h(INP["client_identity_ed25519_seed"])
    )
    server_id = IdentityKey.from_seed(
        SignatureScheme.ED25519, h(INP["server_identity_ed25519_seed"])
    )
    client = ClientHandshake(
        HandshakeConfig(
            identities=[client_id], peer_verifier=lambda s, k: k == server_id.public_key
        ),
        rng=scripted_rng(h(INP["mlkem768_seed_dz"]), h(INP["client_x25519_private"])),
    )
    server = ServerHandshake(
        HandshakeConfig(
            identities=[server_id], peer_verifier=lambda s, k: k == client_id.public_key
        ),
        rng=scripted_rng(h(INP["server_x25519_private"])),
        encapsulate=lambda kem, ek: (h(INP["mlkem_shared_secret"]), h(INP["mlkem_ciphertext"])),
    )
    client.initiate()
    ch = client.data_to_send()
    assert server.receive_frame(pull_frame(ch)) == []
    server_flight = server.data_to_send()
    sh_frame, sa_frame = FrameReader().feed(server_flight)
    assert client.receive_frame(sh_frame) == []
    client_events = client.receive_frame(sa_frame)
    ca = client.data_to_send()
    server_events = server.receive_frame(pull_frame(ca))
    sh_len = 36 + sh_frame.header.payload_length
    return {
        "frames": {
            "client_hello": ch,
            "server_hello": server_flight[:sh_len],
            "server_auth": server_flight[sh_len:],
            "client_auth": ca,
        },
        "client": client,
        "server": server,
        "client_events": client_events,
        "server_events": server_events,
    }


@pytest.fixture
def flow() -> dict[str, Any]:
    # Per test, not per module (4 ms): mutmut runs for a mutant only the tests that called the
    # mutated code while it measured, and a module fixture is built inside the first test only.
    return run_flow()


# --- handshake-flow-kat.json: encode direction ----------------------------------------------


@pytest.mark.parametrize("name", FRAME_NAMES)
def test_flow_frames_byte_exact(flow: dict[str, Any], name: str) -> None:
    assert flow["frames"][name].hex() == EXP["frames"][name]


@pytest.mark.parametrize("point", sorted(EXP["transcript"]))
def test_flow_transcript_points(flow: dict[str, Any], point: str) -> None:
    assert flow["client"].transcript_points[point].hex() == EXP["transcript"][point]
    assert flow["server"].transcript_points[point].hex() == EXP["transcript"][point]


def test_flow_completes_with_pinned_master_and_app_keys(flow: dict[str, Any]) -> None:
    (c_done,) = flow["client_events"]
    (s_done,) = flow["server_events"]
    assert isinstance(c_done, HandshakeCompleted) and isinstance(s_done, HandshakeCompleted)
    assert c_done.master_secret.hex() == EXP["secrets"]["master_secret"]
    assert s_done.master_secret == c_done.master_secret
    assert c_done.transcript_hash.hex() == EXP["transcript"]["th_ccv"]
    assert (c_done.profile, c_done.kem, c_done.signature_scheme, c_done.aead_suite) == (
        1,
        0x11EC,
        0x0807,
        0x0001,
    )
    assert c_done.peer_identity == h(EXP["auth_plaintext"]["server_auth"])[4:36]
    assert s_done.peer_identity == h(EXP["auth_plaintext"]["client_auth"])[4:36]
    for side, d in (("c2s", 0), ("s2c", 1)):
        key, iv = ks.application_keys(c_done.master_secret, d, 0, c_done.aead_suite, 0, "sha256")
        assert (key.hex(), iv.hex()) == (
            EXP["secrets"][f"app_{side}_key"],
            EXP["secrets"][f"app_{side}_iv"],
        )
    assert flow["client"].established and flow["server"].established


# --- handshake-flow-kat.json: decode direction ----------------------------------------------


def test_flow_hellos_decode_to_fields() -> None:
    ch = pull_frame(h(EXP["frames"]["client_hello"]))
    sh = pull_frame(h(EXP["frames"]["server_hello"]))
    for frame, ftype in ((ch, 0x0100), (sh, 0x0101)):
        assert (frame.frame_type, frame.channel, frame.seq, frame.header.flags) == (ftype, 0, 0, 0)
    ch_tlvs = pull_tlvs(ch.payload)
    assert [t.type for t in ch_tlvs] == [0x01, 0x03, 0x05, 0x0C, 0x07]
    assert ch_tlvs[4].value.hex() == EXP["kem"]["kem_share"]
    sh_tlvs = pull_tlvs(sh.payload)
    assert [t.type for t in sh_tlvs] == [0x02, 0x04, 0x06, 0x0D, 0x08]
    assert [t.value for t in sh_tlvs[:4]] == [b"\x01", b"\x11\xec", b"\x08\x07", b"\x00\x01"]
    assert sh_tlvs[4].value.hex() == EXP["kem"]["kem_ciphertext"]


@pytest.mark.parametrize(
    ("name", "side", "direction"),
    [
        ("server_auth", "s", 1),
        ("client_auth", "c", 0),
    ],
)
def test_flow_auth_frames_open_to_pinned_plaintext(name: str, side: str, direction: int) -> None:
    frame = pull_frame(h(EXP["frames"][name]))
    assert frame.header.flags == Flags.ENC and frame.header.payload_length == 158
    sec = EXP["secrets"]
    cipher = RecordCipher(1, h(sec[f"{side}_hs_key"]), h(sec[f"{side}_hs_iv"]))
    plaintext = open_frame(cipher, frame)
    assert plaintext.hex() == EXP["auth_plaintext"][name]
    ik, cv, fin = pull_tlvs(plaintext)
    role = "server" if side == "s" else "client"
    assert cv.value.hex() == EXP["cert_verify"][role]
    assert fin.value.hex() == EXP["finished"][role]
    context = SERVER_CONTEXT if side == "s" else CLIENT_CONTEXT
    th = h(EXP["transcript"]["th_sid" if side == "s" else "th_cid"])
    ed25519.Ed25519PublicKey.from_public_bytes(ik.value).verify(
        cv.value[2:], cert_verify_input(context, th)
    )


def test_flow_kem_components() -> None:
    """The captured ML-KEM ciphertext decapsulates under the seed; X25519 is RFC 7748."""
    dk = mlkem.MLKEM768PrivateKey.from_seed_bytes(h(INP["mlkem768_seed_dz"]))
    assert dk.decapsulate(h(INP["mlkem_ciphertext"])) == h(INP["mlkem_shared_secret"])
    alice = x25519.X25519PrivateKey.from_private_bytes(h(INP["client_x25519_private"]))
    bob_pub = h(EXP["kem"]["kem_ciphertext"])[-32:]
    assert x25519_shared(alice, bob_pub) == h(INP["x25519_shared_secret"])


# --- transcript-kat.json ---------------------------------------------------------------------

TRANSCRIPT = load("transcript-kat.json")
CUTS = {"th_kem": (1, 4), "th_sid": (2, 0), "th_scv": (2, 1), "th_cid": (3, 0), "th_ccv": (3, 1)}


@pytest.mark.parametrize("point", sorted(CUTS))
def test_transcript_kat_points(point: str) -> None:
    frame_index, last_tlv = CUTS[point]
    t = Transcript("sha256")
    for i, frame in enumerate(TRANSCRIPT["frames"][: frame_index + 1]):
        t.add_frame_type(int(frame["frame_type"], 16))
        tlvs = frame["tlvs"] if i < frame_index else frame["tlvs"][: last_tlv + 1]
        for tlv in tlvs:
            t.add_tlv(int(tlv["type"], 16), h(tlv["value"]))
    assert t.digest().hex() == TRANSCRIPT["expected_transcript_points"][point]


def test_transcript_buffers_until_hash_is_fixed() -> None:
    late, early = Transcript(), Transcript("sha256")
    for t in (late, early):
        t.add_frame_type(0x0100)
        t.add_tlv(1, b"\x01")
    with pytest.raises(ValueError):
        late.digest()
    late.set_hash("sha256")
    assert late.digest() == early.digest()
    with pytest.raises(ValueError):
        late.set_hash("sha384")


# --- finished-kat.json -----------------------------------------------------------------------

FINISHED = load("finished-kat.json")


@pytest.mark.parametrize(("role", "th"), [("client", "th_ccv"), ("server", "th_scv")])
def test_finished_kat(role: str, th: str) -> None:
    inp = FINISHED["npamp_inputs"]
    mac = ks.finished_mac(h(inp[f"finished_key_{role}"]), h(inp[th]), "sha256")
    assert mac.hex() == FINISHED["expected"][f"verify_data_{role}"]
    assert ks.verify_finished(h(inp[f"finished_key_{role}"]), h(inp[th]), mac, "sha256")


@pytest.mark.parametrize("tc", ["tc1", "tc2"])
def test_finished_hmac_anchor_rfc4231(tc: str) -> None:
    v = FINISHED["rfc4231_hmac_sha256"][tc]
    assert ks.finished_mac(h(v["key"]), h(v["data"]), "sha256").hex() == v["hmac_sha256"]


# --- certverify-kat.json ---------------------------------------------------------------------

CERTVERIFY = load("certverify-kat.json")


@pytest.mark.parametrize(
    ("role", "th", "context"),
    [
        ("server", "th_sid", SERVER_CONTEXT),
        ("client", "th_cid", CLIENT_CONTEXT),
    ],
)
def test_certverify_kat(role: str, th: str, context: bytes) -> None:
    inp, exp = CERTVERIFY["npamp_inputs"], CERTVERIFY["expected"]
    assert context.decode() == CERTVERIFY["contexts"][role]
    signing_input = cert_verify_input(context, h(inp[th]))
    assert signing_input.hex() == exp[f"signing_input_{role}"]
    key = IdentityKey.from_seed(SignatureScheme.ED25519, h(inp[f"{role}_seed"]))
    assert key.public_key.hex() == inp[f"{role}_pub"]
    sig = key.sign(signing_input)
    assert sig.hex() == exp[f"signature_{role}"]
    assert (b"\x08\x07" + sig).hex() == exp[f"certverify_value_{role}"]


@pytest.mark.parametrize("test", ["test1", "test2"])
def test_certverify_ed25519_anchor_rfc8032(test: str) -> None:
    v = CERTVERIFY["rfc8032_ed25519"][test]
    key = IdentityKey.from_seed(SignatureScheme.ED25519, h(v["seed"]))
    assert key.public_key.hex() == v["public_key"]
    assert key.sign(h(v["message"])).hex() == v["signature"]


# --- kem-wire-kat.json -----------------------------------------------------------------------

KEMWIRE = load("kem-wire-kat.json")


def test_kem_wire_share_is_mlkem_first() -> None:
    kg, xv = KEMWIRE["mlkem768_keygen"], KEMWIRE["x25519_rfc7748_6_1"]
    params = kem_params(Kem.X25519MLKEM768)
    _, ek = params.keygen(h(kg["d"]) + h(kg["z"]))
    assert ek == h(kg["ek"])
    alice = x25519.X25519PrivateKey.from_private_bytes(h(xv["alice_private"]))
    assert alice.public_key().public_bytes_raw() == h(xv["alice_public"])
    share = ek + alice.public_key().public_bytes_raw()
    assert len(share) == params.share_len == KEMWIRE["wire_layout"]["kem_share_len"]
    # The flow KAT used the same seeds: its KEMShare is exactly this assembly.
    assert share.hex() == EXP["kem"]["kem_share"]


def test_kem_wire_ciphertext_and_combined_secret_order() -> None:
    xv = KEMWIRE["x25519_rfc7748_6_1"]
    params = kem_params(Kem.X25519MLKEM768)
    bob = x25519.X25519PrivateKey.from_private_bytes(h(xv["bob_private"]))
    assert bob.public_key().public_bytes_raw() == h(xv["bob_public"])
    ct = h(EXP["kem"]["kem_ciphertext"])
    assert len(ct) == params.ciphertext_len == KEMWIRE["wire_layout"]["kem_ciphertext_len"]
    assert ct[params.ct_len :] == h(xv["bob_public"])
    alice = x25519.X25519PrivateKey.from_private_bytes(h(xv["alice_private"]))
    assert x25519_shared(alice, ct[params.ct_len :]) == h(xv["shared_secret"])
    combined = h(INP["mlkem_shared_secret"]) + h(xv["shared_secret"])
    assert combined == h(INP["combined_secret"])
    assert len(combined) == KEMWIRE["wire_layout"]["combined_secret_len"]
