"""Handshake cores against each other in memory: every profile, and every way to break them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iobridge.npamp.errors import AeadFailure, InvalidState, NpampError
from iobridge.npamp.handshake import (
    AeadSuite,
    IdentityKey,
    PinnedPeers,
    Profile,
    SignatureScheme,
    Transcript,
)
from iobridge.npamp.handshake.machine import (
    CLIENT_CONTEXT,
    SERVER_CONTEXT,
    AuthenticationFailure,
    ClientHandshake,
    HandshakeCompleted,
    HandshakeConfig,
    HandshakeDecodeError,
    NegotiationFailure,
    ServerHandshake,
    UnexpectedHandshakeFrame,
    UntrustedPeer,
    cert_verify_input,
)
from iobridge.npamp.handshake.state import RECV_INPUTS, TRANSITIONS, HandshakeState
from iobridge.npamp.record import RecordCipher, seal_frame
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.wire import (
    Flags,
    Frame,
    FrameReader,
    Tlv,
    pull_frame,
    pull_tlvs,
    push_frame,
    push_tlvs,
)

ED = SignatureScheme.ED25519
ML = SignatureScheme.MLDSA87
STD, HIGH, SOV = Profile.STANDARD, Profile.HIGH, Profile.SOVEREIGN

# Fixed keys keep the suite fast and deterministic (ML-DSA keygen is the slow part).
KEYS = {
    ("client", ED): IdentityKey.from_seed(ED, bytes([1]) * 32),
    ("server", ED): IdentityKey.from_seed(ED, bytes([2]) * 32),
    ("client", ML): IdentityKey.from_seed(ML, bytes([3]) * 32),
    ("server", ML): IdentityKey.from_seed(ML, bytes([4]) * 32),
}


def pinned(role: str) -> PinnedPeers:
    peers = PinnedPeers()
    for (r, _), key in KEYS.items():
        if r == role:
            peers.add_key(key.public_key)
    return peers


def config(role: str, schemes: tuple[SignatureScheme, ...] = (ED,), **kw: Any) -> HandshakeConfig:
    other = "server" if role == "client" else "client"
    kw.setdefault("peer_verifier", pinned(other))
    return HandshakeConfig(identities=[KEYS[(role, s)] for s in schemes], **kw)


def frames(data: bytes) -> list[Frame]:
    return FrameReader().feed(data)


class Pair:
    """A client and a server core joined by an in-memory wire (h11 ``ConnectionPair`` style)."""

    def __init__(self, client_cfg: HandshakeConfig, server_cfg: HandshakeConfig) -> None:
        self.client = ClientHandshake(client_cfg)
        self.server = ServerHandshake(server_cfg)

    def hello(self) -> list[Frame]:
        """Client sends CLIENT_HELLO, server answers; returns the server flight."""
        self.client.initiate()
        (ch,) = frames(self.client.data_to_send())
        assert self.server.receive_frame(ch) == []
        return frames(self.server.data_to_send())

    def run(self) -> tuple[HandshakeCompleted, HandshakeCompleted]:
        sh, sa = self.hello()
        assert self.client.receive_frame(sh) == []
        (c_done,) = self.client.receive_frame(sa)
        (ca,) = frames(self.client.data_to_send())
        (s_done,) = self.server.receive_frame(ca)
        return c_done, s_done


def retlv(frame: Frame, edit: Callable[[list[Tlv]], list[Tlv]], flags: int | None = None) -> Frame:
    """Re-encode a cleartext frame after editing its TLV list."""
    payload = push_tlvs(edit(pull_tlvs(frame.payload)))
    f = frame.header.flags if flags is None else flags
    return pull_frame(push_frame(frame.frame_type, frame.channel, frame.seq, payload, f))


def replace(index: int, value: bytes) -> Callable[[list[Tlv]], list[Tlv]]:
    def edit(tlvs: list[Tlv]) -> list[Tlv]:
        tlvs[index] = Tlv(tlvs[index].type, value)
        return tlvs

    return edit


def assert_dead(core: ClientHandshake | ServerHandshake, probe: Frame) -> None:
    """After an error: ERROR state, nothing queued, every later call raises."""
    assert core.state is HandshakeState.ERROR
    assert core.data_to_send() == b""
    with pytest.raises(InvalidState):
        core.receive_frame(probe)


# --- successful handshakes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offer", "accept", "schemes", "expected", "hash_name"),
    [
        ((STD,), (STD,), (ED,), (STD, 0x11EC, ED), "sha256"),
        ((HIGH,), (HIGH,), (ED,), (HIGH, 0x11ED, ED), "sha384"),
        ((HIGH,), (HIGH,), (ML,), (HIGH, 0x11ED, ML), "sha384"),
        ((SOV,), (SOV,), (ML,), (SOV, 0x11ED, ML), "sha384"),
        ((HIGH, SOV), (HIGH, SOV), (ML,), (SOV, 0x11ED, ML), "sha384"),
        ((HIGH, SOV), (HIGH,), (ED, ML), (HIGH, 0x11ED, ML), "sha384"),
    ],
)
def test_self_interop(
    offer: tuple[Profile, ...],
    accept: tuple[Profile, ...],
    schemes: tuple[SignatureScheme, ...],
    expected: tuple[Profile, int, SignatureScheme],
    hash_name: str,
) -> None:
    pair = Pair(
        config("client", schemes, profiles=offer), config("server", schemes, profiles=accept)
    )
    c_done, s_done = pair.run()
    assert (c_done.profile, c_done.kem, c_done.signature_scheme) == expected
    assert (s_done.profile, s_done.kem, s_done.signature_scheme) == expected
    assert c_done.hash_name == s_done.hash_name == hash_name
    assert c_done.master_secret == s_done.master_secret
    assert len(c_done.master_secret) == ks.hash_len(c_done.hash_name)
    assert c_done.transcript_hash == s_done.transcript_hash
    assert c_done.peer_identity == KEYS[("server", expected[2])].public_key
    assert s_done.peer_identity == KEYS[("client", expected[2])].public_key
    assert pair.client.established and pair.server.established
    assert pair.client.data_to_send() == pair.server.data_to_send() == b""


def test_chacha20_suite_is_negotiated_and_used() -> None:
    pair = Pair(
        config("client", aead_suites=(AeadSuite.CHACHA20_POLY1305, AeadSuite.AES_256_GCM)),
        config("server", aead_suites=(AeadSuite.AES_256_GCM, AeadSuite.CHACHA20_POLY1305)),
    )
    c_done, s_done = pair.run()
    assert c_done.aead_suite is s_done.aead_suite is AeadSuite.CHACHA20_POLY1305


def test_fresh_ephemerals_give_fresh_masters() -> None:
    a, _ = Pair(config("client"), config("server")).run()
    b, _ = Pair(config("client"), config("server")).run()
    assert a.master_secret != b.master_secret


def test_sizes_at_standard() -> None:
    pair = Pair(config("client"), config("server"))
    pair.client.initiate()
    ch = pair.client.data_to_send()
    assert len(ch) == 36 + 1243
    pair.server.receive_frame(pull_frame(ch))
    sh, sa = frames(pair.server.data_to_send())
    assert (sh.header.payload_length, sa.header.payload_length) == (1147, 158)


# --- downgrade refusal and negotiation ------------------------------------------------------


def test_server_refuses_offer_below_its_minimum() -> None:
    pair = Pair(
        config("client", profiles=(STD,)),
        config("server", (ED, ML), profiles=(STD, HIGH, SOV), min_profile=HIGH),
    )
    pair.client.initiate()
    (ch,) = frames(pair.client.data_to_send())
    with pytest.raises(NegotiationFailure):
        pair.server.receive_frame(ch)
    assert_dead(pair.server, ch)


def test_server_picks_best_mutual_profile() -> None:
    pair = Pair(
        config("client", (ML,), profiles=(HIGH, SOV)),
        config("server", (ED, ML), profiles=(STD, HIGH, SOV)),
    )
    sh, _ = pair.hello()
    assert pull_tlvs(sh.payload)[0].value == bytes([SOV])


def test_client_refuses_profile_it_did_not_offer() -> None:
    pair = Pair(config("client", (ML,), profiles=(SOV,)), config("server", (ML,), profiles=(SOV,)))
    sh, _ = pair.hello()
    with pytest.raises(NegotiationFailure, match="did not offer"):
        pair.client.receive_frame(retlv(sh, replace(0, bytes([HIGH]))))
    assert_dead(pair.client, sh)


def test_client_refuses_selection_below_its_minimum() -> None:
    pair = Pair(
        config("client", (ML,), profiles=(HIGH, SOV), min_profile=SOV),
        config("server", (ML,), profiles=(HIGH,)),
    )
    sh, _ = pair.hello()
    assert pull_tlvs(sh.payload)[0].value == bytes([HIGH])
    with pytest.raises(NegotiationFailure, match="below our minimum"):
        pair.client.receive_frame(sh)


def test_forced_lower_selection_breaks_authentication() -> None:
    """An on-path rewrite to a lower (offered, acceptable) profile fails the transcript."""
    pair = Pair(
        config("client", (ML,), profiles=(HIGH, SOV)),
        config("server", (ML,), profiles=(HIGH, SOV)),
    )
    sh, sa = pair.hello()
    pair.client.receive_frame(retlv(sh, replace(0, bytes([HIGH]))))
    with pytest.raises((AuthenticationFailure, AeadFailure)):
        pair.client.receive_frame(sa)
    assert pair.client.data_to_send() == b""
    assert_dead(pair.client, sa)


def test_sovereign_server_never_accepts_mlkem768() -> None:
    std_client = Pair(config("client"), config("server"))
    std_client.client.initiate()
    (ch,) = frames(std_client.client.data_to_send())
    forged = retlv(ch, replace(0, bytes([SOV])))  # claims Sovereign, still a 768 share
    server = ServerHandshake(config("server", (ML,), profiles=(SOV,)))
    with pytest.raises(NegotiationFailure):
        server.receive_frame(forged)
    assert_dead(server, forged)


def test_sovereign_client_never_accepts_mlkem768() -> None:
    pair = Pair(config("client", (ML,), profiles=(SOV,)), config("server", (ML,), profiles=(SOV,)))
    sh, _ = pair.hello()
    with pytest.raises(NegotiationFailure, match="KEM"):
        pair.client.receive_frame(retlv(sh, replace(1, b"\x11\xec")))


def test_client_refuses_unoffered_signature_and_aead() -> None:
    for index, value in ((2, b"\x09\x05"), (3, b"\x00\x02")):
        pair = Pair(config("client"), config("server"))
        sh, _ = pair.hello()
        with pytest.raises(NegotiationFailure):
            pair.client.receive_frame(retlv(sh, replace(index, value)))


def test_no_common_aead_or_signature() -> None:
    pair = Pair(
        config("client", aead_suites=(AeadSuite.CHACHA20_POLY1305,)),
        config("server", aead_suites=(AeadSuite.AES_256_GCM,)),
    )
    pair.client.initiate()
    with pytest.raises(NegotiationFailure, match="AEAD"):
        pair.server.receive_frame(pull_frame(pair.client.data_to_send()))
    pair = Pair(
        config("client", (ED,), profiles=(HIGH,)), config("server", (ML,), profiles=(HIGH,))
    )
    pair.client.initiate()
    with pytest.raises(NegotiationFailure):
        pair.server.receive_frame(pull_frame(pair.client.data_to_send()))


def test_client_config_rejects_offers_without_a_common_kem() -> None:
    with pytest.raises(ValueError, match="common KEM"):
        ClientHandshake(config("client", (ED,), profiles=(STD, HIGH)))
    with pytest.raises(ValueError, match="identity"):
        ClientHandshake(config("client", (ED,), profiles=(SOV,)))


# --- trust ------------------------------------------------------------------------------------


def test_client_rejects_unpinned_server_and_sends_nothing() -> None:
    pair = Pair(config("client", peer_verifier=PinnedPeers()), config("server"))
    sh, sa = pair.hello()
    pair.client.receive_frame(sh)
    with pytest.raises(UntrustedPeer, match=r"^peer identity key is not trusted$"):
        pair.client.receive_frame(sa)
    assert_dead(pair.client, sa)


def test_server_rejects_unpinned_client() -> None:
    stranger = IdentityKey.from_seed(ED, bytes([9]) * 32)
    client_cfg = HandshakeConfig(identities=[stranger], peer_verifier=pinned("server"))
    pair = Pair(client_cfg, config("server"))
    sh, sa = pair.hello()
    pair.client.receive_frame(sh)
    pair.client.receive_frame(sa)
    (ca,) = frames(pair.client.data_to_send())
    with pytest.raises(UntrustedPeer, match=r"^peer identity key is not trusted$"):
        pair.server.receive_frame(ca)
    assert not pair.server.established
    assert_dead(pair.server, ca)


# --- malformed CLIENT_HELLO / SERVER_HELLO ---------------------------------------------------


def client_hello() -> tuple[Frame, ServerHandshake]:
    client = ClientHandshake(config("client"))
    client.initiate()
    return pull_frame(client.data_to_send()), ServerHandshake(config("server"))


# Each edit, and the reason the server gives (it reaches the peer in the ERROR frame's text).
# TLV codes: ProfileOffer 0x01, KEMOffer 0x03, SigOffer 0x05, KEMShare 0x07, AEADOffer 0x0c.
CH_MUTATIONS: dict[str, tuple[Callable[[list[Tlv]], list[Tlv]], str]] = {
    "reordered": (
        lambda t: [t[1], t[0], *t[2:]],
        "TLVs 0x03,0x01,0x05,0x0c,0x07 != required 0x01,0x03,0x05,0x0c,0x07",
    ),
    "missing": (lambda t: t[:-1], "TLVs 0x01,0x03,0x05,0x0c != required 0x01,0x03,0x05,0x0c,0x07"),
    "extra": (
        lambda t: [*t, Tlv(0x0012, bytes(32))],
        "TLVs 0x01,0x03,0x05,0x0c,0x07,0x12 != required 0x01,0x03,0x05,0x0c,0x07",
    ),
    "duplicate": (
        lambda t: [t[0], *t],
        "TLVs 0x01,0x01,0x03,0x05,0x0c,0x07 != required 0x01,0x03,0x05,0x0c,0x07",
    ),
    "short share": (replace(4, bytes(1215)), "KEMShare must be 1216 octets, got 1215"),
    "long share": (replace(4, bytes(1217)), "KEMShare must be 1216 octets, got 1217"),
    "odd KEM offer": (
        replace(1, b"\x11"),
        "KEMOffer must be a non-empty list of u16 code points",
    ),
    "odd signature offer": (
        replace(2, b"\x08\x07\x09"),
        "SigOffer must be a non-empty list of u16 code points",
    ),
    "empty AEAD offer": (replace(3, b""), "AEADOffer must be a non-empty list of u16 code points"),
    "empty profile offer": (replace(0, b""), "ProfileOffer must not be empty"),
}


@pytest.mark.parametrize("mutation", sorted(CH_MUTATIONS))
def test_server_rejects_malformed_client_hello(mutation: str) -> None:
    edit, reason = CH_MUTATIONS[mutation]
    ch, server = client_hello()
    with pytest.raises(HandshakeDecodeError) as info:
        server.receive_frame(retlv(ch, edit))
    assert str(info.value) == reason
    assert_dead(server, ch)


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_a_truncated_client_hello_is_a_tlv_error_on_the_one_pass_reader_too(cut: int) -> None:
    """The last TLV cut short (its length runs past the payload, or its header is partial):
    the one-pass reader hands it to the full decoder, which names the fault."""
    from iobridge.npamp.errors import TlvDecodeError

    ch, server = client_hello()
    payload = ch.payload[:-cut] if cut < 5 else ch.payload + b"\x00\x07\x00"
    bad = pull_frame(push_frame(ch.frame_type, ch.channel, ch.seq, payload, ch.header.flags))
    with pytest.raises(TlvDecodeError):
        server.receive_frame(bad)
    assert_dead(server, ch)


def test_a_client_hello_offering_several_code_points_is_read_whole() -> None:
    """SigOffer and AEADOffer are u16 lists: unknown code points first, known ones still match."""
    ch, server = client_hello()
    tlvs = pull_tlvs(ch.payload)
    sig, aead = tlvs[2].value, tlvs[3].value
    edit = replace(2, b"\xfb\xfb" + sig)
    offers = retlv(retlv(ch, edit), replace(3, b"\xfa\xfa" + aead))
    assert server.receive_frame(offers) == []
    (sh, _) = frames(server.data_to_send())
    selected = pull_tlvs(sh.payload)
    assert (selected[2].value, selected[3].value) == (sig, aead[:2])


# SERVER_HELLO TLVs: ProfileSelect 0x02, KEMSelect 0x04, SigSelect 0x06, AEADSelect 0x0d, ...
SH_MUTATIONS: dict[str, tuple[Callable[[list[Tlv]], list[Tlv]], str]] = {
    "profile select": (replace(0, b"\x01\x00"), "ProfileSelect must be exactly 1 octet"),
    "KEM select": (replace(1, b"\x11"), "KEMSelect must be exactly 2 octets, got 1"),
    "signature select": (replace(2, b"\x08\x07\x00"), "SigSelect must be exactly 2 octets, got 3"),
    "AEAD select": (replace(3, b""), "AEADSelect must be exactly 2 octets, got 0"),
}


@pytest.mark.parametrize("mutation", sorted(SH_MUTATIONS))
def test_client_rejects_malformed_server_hello(mutation: str) -> None:
    edit, reason = SH_MUTATIONS[mutation]
    pair = Pair(config("client"), config("server"))
    sh, _ = pair.hello()
    assert [t.type for t in pull_tlvs(sh.payload)][:4] == [0x02, 0x04, 0x06, 0x0D]
    with pytest.raises(HandshakeDecodeError) as info:
        pair.client.receive_frame(retlv(sh, edit))
    assert str(info.value) == reason
    assert_dead(pair.client, sh)


def test_server_rejects_all_zero_x25519() -> None:
    ch, server = client_hello()
    share = pull_tlvs(ch.payload)[4].value
    with pytest.raises(HandshakeDecodeError, match="all-zero"):
        server.receive_frame(retlv(ch, replace(4, share[:-32] + bytes(32))))
    assert_dead(server, ch)


def test_client_rejects_all_zero_x25519_and_bad_ciphertext_size() -> None:
    mutations: list[tuple[Callable[[bytes], bytes], str]] = [
        (lambda ct: ct[:-32] + bytes(32), "all-zero"),
        (lambda ct: ct[:-1], "KEMCiphertext"),
    ]
    for value_fn, match in mutations:
        pair = Pair(config("client"), config("server"))
        sh, _ = pair.hello()
        ct = pull_tlvs(sh.payload)[4].value
        with pytest.raises(HandshakeDecodeError, match=match):
            pair.client.receive_frame(retlv(sh, replace(4, value_fn(ct))))


def test_hello_must_be_cleartext_on_control_at_seq_zero() -> None:
    ch, server = client_hello()
    with pytest.raises(HandshakeDecodeError):
        server.receive_frame(retlv(ch, lambda t: t, flags=Flags.ENC))
    ch, server = client_hello()
    moved = pull_frame(push_frame(ch.frame_type, 0x000D, 0, ch.payload))
    with pytest.raises(UnexpectedHandshakeFrame):
        server.receive_frame(moved)
    ch, server = client_hello()
    with pytest.raises(HandshakeDecodeError, match=r"^handshake frames carry sequence number 0$"):
        server.receive_frame(pull_frame(push_frame(ch.frame_type, 0, 1, ch.payload)))


# --- malformed AUTH frames (keys known from the flow KAT) -----------------------------------

FLOW = json.loads((Path(__file__).parent / "vectors" / "handshake-flow-kat.json").read_text())


def kat_server_awaiting_client_auth() -> ServerHandshake:
    inp = {k: bytes.fromhex(v) for k, v in FLOW["inputs"].items() if k != "description"}
    client_id = IdentityKey.from_seed(ED, inp["client_identity_ed25519_seed"])
    server_id = IdentityKey.from_seed(ED, inp["server_identity_ed25519_seed"])
    queue = [inp["server_x25519_private"]]
    server = ServerHandshake(
        HandshakeConfig(
            identities=[server_id], peer_verifier=lambda s, k: k == client_id.public_key
        ),
        rng=lambda n: queue.pop(0),
        encapsulate=lambda kem, ek: (inp["mlkem_shared_secret"], inp["mlkem_ciphertext"]),
    )
    server.receive_frame(pull_frame(bytes.fromhex(FLOW["expected"]["frames"]["client_hello"])))
    server.data_to_send()
    return server


def sealed_client_auth(tlvs: list[Tlv], flags: int = Flags.ENC) -> Frame:
    sec = FLOW["expected"]["secrets"]
    cipher = RecordCipher(1, bytes.fromhex(sec["c_hs_key"]), bytes.fromhex(sec["c_hs_iv"]))
    raw = seal_frame(cipher, frame_type=0x0103, channel=0, seq=0, plaintext=push_tlvs(tlvs))
    return pull_frame(raw)


def kat_client_auth_tlvs() -> list[Tlv]:
    return pull_tlvs(bytes.fromhex(FLOW["expected"]["auth_plaintext"]["client_auth"]))


def test_kat_client_auth_resealed_is_accepted() -> None:
    """Guard for the tests below: the unmodified re-sealed CLIENT_AUTH completes."""
    server = kat_server_awaiting_client_auth()
    (done,) = server.receive_frame(sealed_client_auth(kat_client_auth_tlvs()))
    assert done.master_secret.hex() == FLOW["expected"]["secrets"]["master_secret"]


def flip_last(value: bytes) -> bytes:
    return value[:-1] + bytes([value[-1] ^ 0x01])


# Each edit of CLIENT_AUTH (IdentityKey 0x09, CertVerify 0x0a, Finished 0x0b), the error and
# the reason the server gives.
AUTH_MUTATIONS: dict[str, tuple[Callable[[list[Tlv]], list[Tlv]], type[NpampError], str]] = {
    "reordered": (
        lambda t: [t[1], t[0], t[2]],
        HandshakeDecodeError,
        "TLVs 0x0a,0x09,0x0b != required 0x09,0x0a,0x0b",
    ),
    "missing finished": (
        lambda t: t[:2],
        HandshakeDecodeError,
        "TLVs 0x09,0x0a != required 0x09,0x0a,0x0b",
    ),
    "extra tlv": (
        lambda t: [*t, Tlv(0x0012, bytes(32))],
        HandshakeDecodeError,
        "TLVs 0x09,0x0a,0x0b,0x12 != required 0x09,0x0a,0x0b",
    ),
    "short identity": (
        lambda t: [Tlv(9, t[0].value[:31]), *t[1:]],
        HandshakeDecodeError,
        "IdentityKey must be 32 octets for ED25519",
    ),
    "bad signature": (
        lambda t: [t[0], Tlv(10, flip_last(t[1].value)), t[2]],
        AuthenticationFailure,
        "CertVerify signature does not verify",
    ),
    "wrong scheme": (
        lambda t: [t[0], Tlv(10, b"\x09\x05" + t[1].value[2:]), t[2]],
        AuthenticationFailure,
        "CertVerify is not a ED25519 signature",
    ),
    "short signature": (
        lambda t: [t[0], Tlv(10, t[1].value[:-1]), t[2]],
        AuthenticationFailure,
        "CertVerify is not a ED25519 signature",
    ),
    "bad finished": (
        lambda t: [t[0], t[1], Tlv(11, flip_last(t[2].value))],
        AuthenticationFailure,
        "Finished MAC does not verify",
    ),
    "short finished": (
        lambda t: [t[0], t[1], Tlv(11, t[2].value[:16])],
        AuthenticationFailure,
        "Finished MAC does not verify",
    ),
}


@pytest.mark.parametrize("mutation", sorted(AUTH_MUTATIONS))
def test_server_rejects_bad_client_auth(mutation: str) -> None:
    edit, error, reason = AUTH_MUTATIONS[mutation]
    server = kat_server_awaiting_client_auth()
    bad = sealed_client_auth(edit(kat_client_auth_tlvs()))
    with pytest.raises(error) as info:
        server.receive_frame(bad)
    assert str(info.value) == reason
    assert not server.established
    assert_dead(server, bad)


def test_role_reflection_server_context_used_by_client_is_rejected() -> None:
    """A CLIENT_AUTH signed with the *server* context (and a matching Finished) must fail."""
    inp = {k: bytes.fromhex(v) for k, v in FLOW["inputs"].items() if k != "description"}
    exp = FLOW["expected"]
    client_id = IdentityKey.from_seed(ED, inp["client_identity_ed25519_seed"])
    th_cid = bytes.fromhex(exp["transcript"]["th_cid"])
    ik = kat_client_auth_tlvs()[0]
    assert cert_verify_input(CLIENT_CONTEXT, th_cid) != cert_verify_input(SERVER_CONTEXT, th_cid)
    cv = Tlv(10, b"\x08\x07" + client_id.sign(cert_verify_input(SERVER_CONTEXT, th_cid)))
    # Rebuild TH_cCV for the reflected CertVerify so that only the context is wrong.
    t = Transcript("sha256")
    for frame_name, ftype in (("client_hello", 0x0100), ("server_hello", 0x0101)):
        t.add_frame_type(ftype)
        for tlv in pull_tlvs(pull_frame(bytes.fromhex(exp["frames"][frame_name])).payload):
            t.add_tlv(tlv.type, tlv.value)
    t.add_frame_type(0x0102)
    for tlv in pull_tlvs(bytes.fromhex(exp["auth_plaintext"]["server_auth"])):
        t.add_tlv(tlv.type, tlv.value)
    t.add_frame_type(0x0103)
    t.add_tlv(ik.type, ik.value)
    assert t.digest() == th_cid
    t.add_tlv(cv.type, cv.value)
    fk = bytes.fromhex(exp["finished_keys"]["client"])
    fin = Tlv(11, ks.finished_mac(fk, t.digest(), "sha256"))
    server = kat_server_awaiting_client_auth()
    with pytest.raises(AuthenticationFailure, match="CertVerify"):
        server.receive_frame(sealed_client_auth([ik, cv, fin]))


def test_auth_frame_must_be_encrypted_and_authentic() -> None:
    server = kat_server_awaiting_client_auth()
    plain = pull_frame(push_frame(0x0103, 0, 0, push_tlvs(kat_client_auth_tlvs())))
    with pytest.raises(
        HandshakeDecodeError, match=r"^AUTH frames must set ENC and not COMP or FRAG$"
    ):
        server.receive_frame(plain)
    for extra in (Flags.COMP, Flags.FRAG):
        server = kat_server_awaiting_client_auth()
        good = sealed_client_auth(kat_client_auth_tlvs())
        flagged = pull_frame(push_frame(0x0103, 0, 0, good.payload, Flags.ENC | extra))
        with pytest.raises(HandshakeDecodeError, match=r"^AUTH frames must set ENC and not COMP"):
            server.receive_frame(flagged)
    server = kat_server_awaiting_client_auth()
    good = sealed_client_auth(kat_client_auth_tlvs())
    tampered = pull_frame(push_frame(0x0103, 0, 0, flip_last(good.payload), Flags.ENC))
    with pytest.raises(AeadFailure):
        server.receive_frame(tampered)
    assert_dead(server, good)


# --- the state table: every (state, frame) pair ---------------------------------------------

HANDSHAKE_TYPES = (0x0100, 0x0101, 0x0102, 0x0103, 0x0001)


def cores_in_every_state() -> list[tuple[str, Callable[[], ClientHandshake | ServerHandshake]]]:
    def client_start() -> ClientHandshake:
        return ClientHandshake(config("client"))

    def client_wait_sh() -> ClientHandshake:
        c = client_start()
        c.initiate()
        c.data_to_send()
        return c

    def client_wait_sa() -> ClientHandshake:
        pair = Pair(config("client"), config("server"))
        sh, _ = pair.hello()
        pair.client.receive_frame(sh)
        return pair.client

    def server_wait_ch() -> ServerHandshake:
        return ServerHandshake(config("server"))

    return [
        ("CLIENT_START", client_start),
        ("CLIENT_EXPECT_SERVER_HELLO", client_wait_sh),
        ("CLIENT_EXPECT_SERVER_AUTH", client_wait_sa),
        ("SERVER_EXPECT_CLIENT_HELLO", server_wait_ch),
        ("SERVER_EXPECT_CLIENT_AUTH", kat_server_awaiting_client_auth),
    ]


def illegal_pairs() -> list[tuple[str, Callable[[], ClientHandshake | ServerHandshake], int]]:
    legal = {
        (st.name, ft) for ft, inp in RECV_INPUTS.items() for (st, i) in TRANSITIONS if i is inp
    }
    return [
        (name, make, ft)
        for name, make in cores_in_every_state()
        for ft in HANDSHAKE_TYPES
        if (name, ft) not in legal
    ]


def test_illegal_pairs_cover_the_table() -> None:
    """5 states x 5 frame types, minus the 4 receive transitions of the table."""
    assert len(illegal_pairs()) == 5 * 5 - 4


@pytest.mark.parametrize(("state_name", "make", "frame_type"), illegal_pairs())
def test_every_illegal_state_input_pair_is_fatal(
    state_name: str, make: Callable[[], ClientHandshake | ServerHandshake], frame_type: int
) -> None:
    core = make()
    assert core.state.name == state_name
    probe = pull_frame(push_frame(frame_type, 0, 0, b""))
    with pytest.raises(UnexpectedHandshakeFrame):
        core.receive_frame(probe)
    assert_dead(core, probe)


def test_initiate_twice_and_server_has_no_initiate() -> None:
    client = ClientHandshake(config("client"))
    client.initiate()
    with pytest.raises(InvalidState):
        client.initiate()
    assert client.state is HandshakeState.CLIENT_EXPECT_SERVER_HELLO
    assert not hasattr(ServerHandshake(config("server")), "initiate")


def test_established_core_refuses_more_frames() -> None:
    pair = Pair(config("client"), config("server"))
    pair.run()
    probe = pull_frame(push_frame(0x0101, 0, 0, b""))
    with pytest.raises(InvalidState):
        pair.client.receive_frame(probe)
    assert pair.client.established


def test_docs_state_diagram_is_generated_from_the_table() -> None:
    from iobridge.npamp.handshake.state import state_diagram

    doc = Path(__file__).parents[2] / "docs" / "npamp-handshake.md"
    assert state_diagram() in doc.read_text()
    for (state, event), target in TRANSITIONS.items():
        assert f"{state.name} --> {target.name}: {event.name}" in state_diagram()


def test_reserved_profile_codes_in_offer_are_ignored() -> None:
    ch, server = client_hello()
    server.receive_frame(retlv(ch, replace(0, bytes([0x00, 0x04, STD, 0xFF]))))
    sh, _ = frames(server.data_to_send())
    assert pull_tlvs(sh.payload)[0].value == bytes([STD])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"identities": []}, "^at least one identity key is required$"),
        (
            {"identities": [KEYS[("client", ED)], KEYS[("server", ED)]]},
            "^at most one identity key per signature scheme$",
        ),
        ({"profiles": ()}, "^at least one profile is required$"),
        ({"aead_suites": ()}, "^aead_suites must be a non-empty subset of the supported suites$"),
        ({"aead_suites": (0x0001, 0x7777)}, "^aead_suites must be a non-empty subset"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {"identities": [KEYS[("client", ED)]], "peer_verifier": pinned("server")}
    with pytest.raises(ValueError, match=match):
        HandshakeConfig(**{**base, **kwargs})


def test_the_peer_verifier_is_asked_with_the_negotiated_scheme() -> None:
    asked: list[tuple[int, bytes]] = []

    def verifier(scheme: SignatureScheme, key: bytes) -> bool:
        asked.append((scheme, key))
        return True

    pair = Pair(config("client", peer_verifier=verifier), config("server"))
    pair.run()
    assert asked == [(ED, KEYS[("server", ED)].public_key)]


def test_one_server_configuration_negotiates_every_offer_on_its_own() -> None:
    """The server keeps its negotiation results per offer: each client's offer gets its own
    selection from the same configuration, and a refused or malformed offer is not kept."""
    server_cfg = config(
        "server",
        (ED, ML),
        profiles=(STD, HIGH, SOV),
        aead_suites=(AeadSuite.AES_256_GCM, AeadSuite.CHACHA20_POLY1305),
    )
    cases: list[tuple[HandshakeConfig, tuple[Profile, SignatureScheme, AeadSuite]]] = [
        (config("client"), (STD, ED, AeadSuite.AES_256_GCM)),
        (
            config("client", aead_suites=(AeadSuite.CHACHA20_POLY1305,)),
            (STD, ED, AeadSuite.CHACHA20_POLY1305),
        ),
        (config("client", (ED, ML), profiles=(HIGH, SOV)), (SOV, ML, AeadSuite.AES_256_GCM)),
    ]
    for client_cfg, expected in cases * 2:  # the second pass answers from what was kept
        c_done, s_done = Pair(client_cfg, server_cfg).run()
        assert (s_done.profile, s_done.signature_scheme, s_done.aead_suite) == expected
        assert (c_done.profile, c_done.signature_scheme, c_done.aead_suite) == expected
    assert len(server_cfg._memo.selections) == 3
    ch, _ = client_hello()
    with pytest.raises(NegotiationFailure):
        ServerHandshake(replace_config(server_cfg, min_profile=HIGH)).receive_frame(ch)
    with pytest.raises(HandshakeDecodeError):
        ServerHandshake(server_cfg).receive_frame(retlv(ch, replace(2, b"\x08")))  # odd SigOffer
    assert len(server_cfg._memo.selections) == 3


def test_remembered_negotiations_are_bounded() -> None:
    from iobridge.npamp.handshake.machine import NEGOTIATION_MEMO_SIZE

    server_cfg = config("server")
    for extra in range(NEGOTIATION_MEMO_SIZE + 4):
        ch, _ = client_hello()
        # A distinct (unknown, ignored) profile code in each offer: a new key every time.
        server = ServerHandshake(server_cfg)
        server.receive_frame(retlv(ch, replace(0, bytes([STD, 0x10 + extra]))))
        assert frames(server.data_to_send())[0].frame_type == 0x0101
    assert len(server_cfg._memo.selections) == NEGOTIATION_MEMO_SIZE


def replace_config(cfg: HandshakeConfig, **kw: Any) -> HandshakeConfig:
    from dataclasses import replace as dc_replace

    return dc_replace(cfg, **kw)
