"""Sans-IO N-PAMP 1.5-RTT hybrid post-quantum handshake (spec/10, draft §8).

Theory of operation. A :class:`ClientHandshake` or :class:`ServerHandshake` is fed decoded
Control-channel frames with :meth:`~_Handshake.receive_frame` and queues the frames it must send
behind :meth:`~_Handshake.data_to_send`; the shell (``connection.py``) drains that after every
call, including one that raised. Nothing here touches sockets, clocks or the OS RNG: randomness
comes from the injected ``rng`` and, on the server, the injected ML-KEM ``encapsulate`` (the
library's encapsulation randomness is not seedable), so the known-answer flows are reproduced
byte for byte without patching. Timeouts belong to the shell; :attr:`~_Handshake.state` tells it
what is awaited.

Per frame, receivers enforce (spec/10 §1, §6.4): Control channel, seq 0, cleartext HELLOs and
ENC-sealed AUTH frames, exactly the specified TLV set in the specified order, the sizes of every
fixed-size value, and the negotiated profile row (:mod:`.profiles`). Processing order on the
client (spec/10 §6, digest §2.5): open SERVER_AUTH under ``s_hs`` keys → absorb 0x0102 and
IdentityKey → verify CertVerify over ``TH_sId`` → absorb → verify Finished over ``TH_sCV`` →
absorb → check the peer key is trusted → absorb 0x0103 and our IdentityKey → sign ``TH_cId``
→ absorb → MAC ``TH_cCV`` → seal CLIENT_AUTH under ``c_hs`` keys → derive ``master``. The
server mirrors this for CLIENT_AUTH and is established only once it verifies.

Any failure moves the machine to ``ERROR``; the error raised is a :class:`HandshakeFailure`
subclass (or :class:`~.errors.InvalidState` for local misuse), and every later call raises
:class:`~.errors.InvalidState`. No alert is sent: the ERROR frame has no defined payload and
before the AUTH keys there is nothing to protect it with, so the shell simply closes.
"""

from __future__ import annotations

import hmac
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric import x25519

from iobridge.npamp.errors import (
    ErrorCode,
    HandshakeFailure,
    InvalidState,
    NpampError,
    map_exceptions,
)
from iobridge.npamp.handshake.identity import IdentityKey, PeerVerifier
from iobridge.npamp.handshake.profiles import (
    PROFILES,
    AeadSuite,
    Encapsulator,
    Kem,
    KemParams,
    MlKemPrivateKey,
    NegotiationFailure,
    Profile,
    Selection,
    SignatureScheme,
    check_selection,
    common_kem,
    kem_params,
    select,
    signature_lengths,
    verify_signature,
    x25519_shared,
)
from iobridge.npamp.handshake.state import (
    RECV_INPUTS,
    HandshakeInput,
    HandshakeState,
    HandshakeStateMachine,
)
from iobridge.npamp.handshake.transcript import Transcript
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.record.cipher import ReceiveState, RecordCipher, SendState
from iobridge.npamp.wire.frame import Flags, Frame, push_frame
from iobridge.npamp.wire.tlv import Tlv, TlvType, pull_tlvs, push_tlv

__all__ = [
    "CLIENT_CONTEXT",
    "SERVER_CONTEXT",
    "AuthenticationFailure",
    "ClientHandshake",
    "HandshakeCompleted",
    "HandshakeConfig",
    "HandshakeDecodeError",
    "NegotiationFailure",
    "ServerHandshake",
    "UnexpectedHandshakeFrame",
    "UntrustedPeer",
    "cert_verify_input",
]

#: CertVerify context strings (spec/10 §6.1). Fixed constants, independent of the draft number.
SERVER_CONTEXT = b"N-PAMP/2, server CertificateVerify"
CLIENT_CONTEXT = b"N-PAMP/2, client CertificateVerify"

CONTROL_CHANNEL = 0x0000
CLIENT_HELLO, SERVER_HELLO, SERVER_AUTH, CLIENT_AUTH = 0x0100, 0x0101, 0x0102, 0x0103

T = TlvType
CLIENT_HELLO_TLVS = (T.PROFILE_OFFER, T.KEM_OFFER, T.SIG_OFFER, T.AEAD_OFFER, T.KEM_SHARE)
SERVER_HELLO_TLVS = (
    T.PROFILE_SELECT,
    T.KEM_SELECT,
    T.SIG_SELECT,
    T.AEAD_SELECT,
    T.KEM_CIPHERTEXT,
)
AUTH_TLVS = (T.IDENTITY_KEY, T.CERT_VERIFY, T.FINISHED)
del T

#: AEAD suites this implementation can seal with (record.py supports both).
SUPPORTED_AEADS = (AeadSuite.AES_256_GCM, AeadSuite.CHACHA20_POLY1305)

#: Negotiation results kept per configuration (keyed by the peer's offer or selection octets;
#: only successful ones, and only this many, so a peer cannot grow the table).
NEGOTIATION_MEMO_SIZE = 16

_TL = struct.Struct(">HH")
#: SERVER_HELLO's four select TLVs: ProfileSelect(1), KEMSelect(2), SigSelect(2), AEADSelect(2).
_SELECTS = struct.Struct(">HHBHHHHHHHHH")
#: CertVerify's type, length and the 2-octet scheme that starts its value.
_CV_HEAD = struct.Struct(">HHH")
_CH_TYPE = CLIENT_HELLO.to_bytes(2, "big")
_SH_TYPE = SERVER_HELLO.to_bytes(2, "big")
_FRAME_TYPE_OCTETS = {t: t.to_bytes(2, "big") for t in (SERVER_AUTH, CLIENT_AUTH)}
_NOT_CLEARTEXT = int(Flags.ENC | Flags.COMP | Flags.FRAG)
_COMP_FRAG = int(Flags.COMP | Flags.FRAG)
_ENC = int(Flags.ENC)
_C2S = ks.Direction.CLIENT_TO_SERVER
_S2C = ks.Direction.SERVER_TO_CLIENT
_ERROR = HandshakeState.ERROR
_V = TypeVar("_V")
_ESTABLISHED = HandshakeState.ESTABLISHED


# --- errors ----------------------------------------------------------------------------------


class HandshakeDecodeError(HandshakeFailure):
    """A handshake frame is malformed: wrong TLV set/order, bad size, bad flags or header."""


class UnexpectedHandshakeFrame(HandshakeFailure):
    """A frame arrived that the current handshake state does not allow."""

    code = ErrorCode.UNEXPECTED_FRAME


class AuthenticationFailure(HandshakeFailure):
    """CertVerify or Finished did not verify (includes role reflection)."""

    code = ErrorCode.AUTHENTICATION_FAILURE


class UntrustedPeer(HandshakeFailure):
    """The peer proved possession of an identity key that is not trusted (not pinned)."""

    code = ErrorCode.UNTRUSTED_PEER


# --- configuration and event -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClientOffer:
    """What every CLIENT_HELLO of one configuration shares."""

    #: The KEM of the single share.
    kem: Kem
    #: Its wire sizes and operations.
    params: KemParams
    #: The four offer TLVs and the KEMShare TLV's type and length: all of the payload but the
    #: share itself.
    prefix: bytes


class _Memo:
    """Values a :class:`HandshakeConfig` derives once instead of on every handshake.

    Everything here is a pure function of the configuration (and, for the negotiation tables,
    of the peer's octets that key them).
    """

    __slots__ = ("floor", "offer", "selected", "selections", "sig_preference", "tlvs")

    def __init__(self) -> None:
        self.floor: Profile | None = None
        self.sig_preference: tuple[SignatureScheme, ...] | None = None
        self.offer: _ClientOffer | None = None
        #: Our IdentityKey TLV per scheme.
        self.tlvs: dict[SignatureScheme, bytes] = {}
        #: Server: CLIENT_HELLO offer values → (selection, KEM row, SERVER_HELLO select TLVs).
        self.selections: dict[tuple[bytes, ...], tuple[Selection, KemParams, bytes]] = {}
        #: Client: SERVER_HELLO select values → selection.
        self.selected: dict[tuple[bytes, ...], Selection] = {}


@dataclass(frozen=True, kw_only=True, slots=True)
class HandshakeConfig:
    """What one endpoint offers (client) or accepts (server).

    Attributes:
        identities: Our identity key pairs, at most one per signature scheme.
        peer_verifier: Decides whether an authenticated peer key is trusted, e.g. a
            :class:`~.identity.PinnedPeers` allowlist. There is deliberately no default.
        profiles: Profiles offered (client, in this order) or accepted (server).
        min_profile: Lowest profile we complete at; defaults to the lowest in ``profiles``.
        signatures: Schemes offered/accepted, in preference order; defaults to every scheme
            we hold a key for that some configured profile allows.
        aead_suites: AEAD suites offered/accepted, in preference order.
    """

    identities: Sequence[IdentityKey]
    peer_verifier: PeerVerifier
    profiles: Sequence[Profile] = (Profile.STANDARD,)
    min_profile: Profile | None = None
    signatures: Sequence[SignatureScheme] | None = None
    aead_suites: Sequence[AeadSuite] = (AeadSuite.AES_256_GCM,)
    #: Derived once, used by every handshake of this configuration (not a setting).
    _memo: _Memo = field(default_factory=_Memo, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.profiles:
            raise ValueError("at least one profile is required")
        if not self.identities:
            raise ValueError("at least one identity key is required")
        schemes = [i.scheme for i in self.identities]
        if len(set(schemes)) != len(schemes):
            raise ValueError("at most one identity key per signature scheme")
        if not self.aead_suites or any(s not in SUPPORTED_AEADS for s in self.aead_suites):
            raise ValueError("aead_suites must be a non-empty subset of the supported suites")

    @property
    def floor(self) -> Profile:
        """The lowest profile this endpoint accepts."""
        floor = self._memo.floor
        if floor is None:
            floor = self._memo.floor = (
                self.min_profile if self.min_profile is not None else min(self.profiles)
            )
        return floor

    @property
    def sig_preference(self) -> tuple[SignatureScheme, ...]:
        """Signature schemes we can use, in preference order."""
        preference = self._memo.sig_preference
        if preference is None:
            held = {i.scheme for i in self.identities}
            if self.signatures is not None:
                preference = tuple(s for s in self.signatures if s in held)
            else:
                allowed = set().union(*(PROFILES[p].signatures for p in self.profiles))
                order = (SignatureScheme.MLDSA87, SignatureScheme.ED25519)
                preference = tuple(s for s in order if s in held and s in allowed)
            self._memo.sig_preference = preference
        return preference

    def identity_for(self, scheme: SignatureScheme) -> IdentityKey:
        """Our identity key for ``scheme``."""
        return next(i for i in self.identities if i.scheme is scheme)

    def _identity_tlv(self, scheme: SignatureScheme) -> bytes:
        """Our IdentityKey TLV for ``scheme``, encoded once."""
        tlv = self._memo.tlvs.get(scheme)
        if tlv is None:
            tlv = self._memo.tlvs[scheme] = push_tlv(
                TlvType.IDENTITY_KEY, self.identity_for(scheme).public_key
            )
        return tlv

    def _client_offer(self) -> _ClientOffer:
        """The parts of CLIENT_HELLO fixed by this configuration.

        Raises:
            ValueError: The profiles share no KEM, or no identity fits them.
        """
        offer = self._memo.offer
        if offer is None:
            kem = common_kem(self.profiles)
            schemes = self.sig_preference
            if not schemes:
                raise ValueError("no identity key fits the offered profiles")
            params = kem_params(kem)
            prefix = b"".join(
                (
                    push_tlv(TlvType.PROFILE_OFFER, bytes(self.profiles)),
                    push_tlv(TlvType.KEM_OFFER, kem.to_bytes(2, "big")),
                    push_tlv(TlvType.SIG_OFFER, b"".join(s.to_bytes(2, "big") for s in schemes)),
                    push_tlv(
                        TlvType.AEAD_OFFER, b"".join(a.to_bytes(2, "big") for a in self.aead_suites)
                    ),
                    _TL.pack(TlvType.KEM_SHARE, params.share_len),
                )
            )
            offer = self._memo.offer = _ClientOffer(kem=kem, params=params, prefix=prefix)
        return offer


@dataclass(frozen=True, kw_only=True, slots=True)
class HandshakeCompleted:
    """The handshake finished and the peer is authenticated (both roles)."""

    #: Negotiated profile.
    profile: Profile
    #: Negotiated hybrid KEM.
    kem: Kem
    #: Signature scheme both identities used.
    signature_scheme: SignatureScheme
    #: AEAD suite for the AUTH frames and application keys (AEADSelect).
    aead_suite: AeadSuite
    #: KDF/transcript hash name (``"sha256"`` or ``"sha384"``).
    hash_name: ks.HashName
    #: Connection master secret (gen-0 root of every application traffic key). Secret.
    master_secret: bytes = field(repr=False)
    #: Raw identity public key the peer proved possession of; what the server maps to a
    #: principal.
    peer_identity: bytes
    #: ``TH_cCV``: the transcript hash the master secret is bound to (usable as channel binding).
    transcript_hash: bytes

    def __post_init__(self) -> None:
        if len(self.master_secret) != ks.hash_len(self.hash_name):
            raise ValueError("master secret length does not match the hash")


def cert_verify_input(context: bytes, transcript_hash: bytes) -> bytes:
    """``0x20 x 64 || context || 0x00 || transcript_hash`` (spec/10 §6.1, RFC 8446 §4.4.3)."""
    return b"\x20" * 64 + context + b"\x00" + transcript_hash


# --- shared machinery -------------------------------------------------------------------------


def _u16_list(value: bytes, what: str) -> list[int]:
    if not value or len(value) % 2:
        raise HandshakeDecodeError(f"{what} must be a non-empty list of u16 code points")
    return [int.from_bytes(value[i : i + 2], "big") for i in range(0, len(value), 2)]


def _u16(value: bytes, what: str) -> int:
    if len(value) != 2:
        raise HandshakeDecodeError(f"{what} must be exactly 2 octets, got {len(value)}")
    return int.from_bytes(value, "big")


def _tlv_values(payload: bytes, layout: tuple[TlvType, ...]) -> list[bytes]:
    """The values of exactly the TLVs of ``layout``, in that order, filling ``payload``.

    The valid case is read in one pass with no :class:`Tlv` objects; anything else goes to the
    reference (:func:`pull_tlvs`, then the layout check), which raises the precise error.

    Raises:
        TlvDecodeError: A TLV is truncated.
        HandshakeDecodeError: Other TLVs than the layout, or in another order.
    """
    values: list[bytes] = []
    pos, end = 0, len(payload)
    unpack = _TL.unpack_from
    for expected in layout:
        if end - pos < 4:
            break
        tlv_type, length = unpack(payload, pos)
        pos += 4
        if tlv_type != expected or length > end - pos:
            break
        values.append(payload[pos : pos + length])
        pos += length
    else:
        if pos == end:
            return values
    return [t.value for t in _exact(pull_tlvs(payload), layout)]


def _exact(tlvs: list[Tlv], layout: tuple[TlvType, ...]) -> list[Tlv]:
    got = tuple(t.type for t in tlvs)
    if got != layout:
        raise HandshakeDecodeError(
            "TLVs "
            + ",".join(f"0x{t:02x}" for t in got)
            + " != required "
            + ",".join(f"0x{t:02x}" for t in layout)
        )
    return tlvs


def _remember(table: dict[tuple[bytes, ...], _V], key: tuple[bytes, ...], value: _V) -> None:
    if len(table) < NEGOTIATION_MEMO_SIZE:
        table[key] = value


class _Handshake:
    """State, transcript and key-schedule plumbing shared by both roles.

    The transcript absorbs octets in their canonical form: a frame type, then whole TLVs as
    they travel (a received payload whose TLVs matched the required layout exactly *is* the
    concatenation of its canonical TLVs), in one update per run of octets instead of one per
    TLV.
    """

    _initial: HandshakeState
    #: ``0x20 x 64 || context || 0x00`` of the CertVerify we sign and of the one we verify.
    _sign_prefix: bytes
    _verify_prefix: bytes

    def __init__(
        self, config: HandshakeConfig, *, rng: Callable[[int], bytes] = os.urandom
    ) -> None:
        self.config = config
        self._rng = rng
        self._machine = HandshakeStateMachine(self._initial)
        self._out: list[bytes] = []
        self._transcript = Transcript()
        #: Transcript points reached so far (``th_kem`` ... ``th_ccv``); hashes, not secrets.
        self.transcript_points: dict[str, bytes] = {}
        self._selection: Selection | None = None
        self._hash: ks.HashName = "sha256"  # the selection's, once there is one
        self._hs: bytes = b""
        self._c_hs: bytes = b""
        self._s_hs: bytes = b""

    # -- public API --

    @property
    def state(self) -> HandshakeState:
        """Current state; tells the shell what is awaited (for its timeouts)."""
        return self._machine.state

    @property
    def established(self) -> bool:
        """Whether the handshake completed."""
        return self._machine.state is HandshakeState.ESTABLISHED

    def data_to_send(self) -> bytes:
        """Drain the encoded frames queued for the peer (no I/O happens here)."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def receive_frame(self, frame: Frame) -> list[HandshakeCompleted]:
        """Process one decoded Control-channel frame from the peer.

        Args:
            frame: A frame decoded by :func:`~.frame.pull_frame` / :class:`~.frame.FrameReader`.

        Returns:
            ``[HandshakeCompleted]`` when this frame completed the handshake, else ``[]``.

        Raises:
            InvalidState: The handshake already failed or completed.
            HandshakeFailure: The frame breaks a rule (subclass says which); the handshake is
                now in ``ERROR``.
        """
        machine = self._machine
        state = machine.state
        if state is _ERROR or state is _ESTABLISHED:
            raise InvalidState(f"handshake is {state.name}; no more frames")
        header = frame[0]
        event = RECV_INPUTS.get(header[0]) if header[1] == CONTROL_CHANNEL else None
        try:
            if event is None:
                raise UnexpectedHandshakeFrame(
                    f"frame 0x{header[0]:04x} on channel 0x{header[1]:04x} "
                    "is not a handshake frame"
                )
            try:
                next_state = machine.next_state(event)
            except KeyError:
                raise UnexpectedHandshakeFrame(
                    f"{event.name} not allowed in {state.name}"
                ) from None
            if header[2] != 0:
                raise HandshakeDecodeError("handshake frames carry sequence number 0")
            with map_exceptions(HandshakeDecodeError, "handshake frame"):
                events = self._handle(event, frame)
        except NpampError:
            self._fail()
            raise
        machine.state = next_state
        return events

    # -- helpers for subclasses --

    def _handle(self, event: HandshakeInput, frame: Frame) -> list[HandshakeCompleted]:
        raise NotImplementedError

    def _fail(self) -> None:
        self._machine.fail()
        self._out.clear()
        self._hs = self._c_hs = self._s_hs = b""

    @property
    def _sel(self) -> Selection:
        if self._selection is None:  # pragma: no cover - the state table prevents it
            raise InvalidState("no negotiated parameters yet")
        return self._selection

    def _select(self, selection: Selection) -> None:
        self._selection = selection
        self._hash = selection.hash_name
        self._transcript.set_hash(self._hash)

    def _mark(self, name: str) -> bytes:
        point = self._transcript.digest()
        self.transcript_points[name] = point
        return point

    @staticmethod
    def _cleartext(frame: Frame) -> bytes:
        header, payload = frame
        if header[4] & _NOT_CLEARTEXT:
            raise HandshakeDecodeError(f"frame 0x{header[0]:04x} must be cleartext")
        return payload

    def _key_schedule(self, mlkem_ss: bytes, x_ss: bytes) -> None:
        th_kem = self._mark("th_kem")
        name = self._hash
        hs = self._hs = ks.handshake_secret(mlkem_ss, x_ss, name)
        self._c_hs = ks.c_hs_secret(hs, th_kem, name)
        self._s_hs = ks.s_hs_secret(hs, th_kem, name)

    def _auth_cipher(self, direction: ks.Direction) -> RecordCipher:
        parent = self._c_hs if direction is _C2S else self._s_hs
        aead = self._sel.aead
        secret = ks.traffic_secret(parent, direction, 0, aead, CONTROL_CHANNEL, self._hash)
        key, iv = ks.traffic_keys(secret, self._hash)
        return RecordCipher(aead, key, iv)

    def _build_auth(self, frame_type: int, direction: ks.Direction) -> bytes:
        """Absorb and seal our AUTH frame: IdentityKey, CertVerify, Finished."""
        scheme = self._sel.signature
        server_side = frame_type == SERVER_AUTH
        transcript = self._transcript
        ik = self.config._identity_tlv(scheme)
        transcript.absorb(_FRAME_TYPE_OCTETS[frame_type] + ik)
        th_id = self._mark("th_sid" if server_side else "th_cid")
        sig = self.config.identity_for(scheme).sign(self._sign_prefix + th_id)
        cv = _CV_HEAD.pack(TlvType.CERT_VERIFY, 2 + len(sig), scheme) + sig
        transcript.absorb(cv)
        th_cv = self._mark("th_scv" if server_side else "th_ccv")
        base = self._s_hs if server_side else self._c_hs
        mac = ks.finished_mac(ks.finished_key(base, self._hash), th_cv, self._hash)
        fin = _TL.pack(TlvType.FINISHED, len(mac)) + mac
        transcript.absorb(fin)
        # seq 0 of the Control channel under the AUTH keys: seal_frame's octets, through the
        # per-frame path.
        return SendState(CONTROL_CHANNEL, self._auth_cipher(direction)).seal(
            frame_type, ik + cv + fin
        )

    def _verify_auth(self, frame: Frame, direction: ks.Direction) -> bytes:
        """Open and verify the peer's AUTH frame; return its trusted identity key."""
        scheme = self._sel.signature
        header = frame[0]
        flags = header[4]
        if flags & _COMP_FRAG or not flags & _ENC:
            raise HandshakeDecodeError("AUTH frames must set ENC and not COMP or FRAG")
        # open_frame's checks and octets (seq 0 was checked), through the per-frame path.
        plaintext = ReceiveState(CONTROL_CHANNEL, self._auth_cipher(direction)).open(frame)
        ik, cv, fin = _tlv_values(plaintext, AUTH_TLVS)
        pub_len, sig_len = signature_lengths(scheme)
        if len(ik) != pub_len:
            raise HandshakeDecodeError(f"IdentityKey must be {pub_len} octets for {scheme.name}")
        server_side = header[0] == SERVER_AUTH
        transcript = self._transcript
        cv_start = 4 + len(ik)
        fin_start = cv_start + 4 + len(cv)
        transcript.absorb(_FRAME_TYPE_OCTETS[header[0]] + plaintext[:cv_start])
        th_id = self._mark("th_sid" if server_side else "th_cid")
        if len(cv) != 2 + sig_len or cv[:2] != scheme.to_bytes(2, "big"):
            raise AuthenticationFailure(f"CertVerify is not a {scheme.name} signature")
        if not verify_signature(scheme, ik, self._verify_prefix + th_id, cv[2:]):
            raise AuthenticationFailure("CertVerify signature does not verify")
        transcript.absorb(plaintext[cv_start:fin_start])
        th_cv = self._mark("th_scv" if server_side else "th_ccv")
        base = self._s_hs if server_side else self._c_hs
        expected = ks.finished_mac(ks.finished_key(base, self._hash), th_cv, self._hash)
        if not hmac.compare_digest(expected, fin):
            raise AuthenticationFailure("Finished MAC does not verify")
        transcript.absorb(plaintext[fin_start:])
        if not self.config.peer_verifier(scheme, ik):
            raise UntrustedPeer("peer identity key is not trusted")
        return ik

    def _completed(self, peer: bytes) -> HandshakeCompleted:
        sel = self._sel
        th_ccv = self.transcript_points["th_ccv"]
        master = ks.master_secret(self._hs, th_ccv, self._hash)
        # Handshake secrets are no longer needed; drop them (best effort in Python).
        self._hs = self._c_hs = self._s_hs = b""
        return HandshakeCompleted(
            profile=sel.profile,
            kem=sel.kem,
            signature_scheme=sel.signature,
            aead_suite=sel.aead,
            hash_name=self._hash,
            master_secret=master,
            peer_identity=peer,
            transcript_hash=th_ccv,
        )


# --- client ----------------------------------------------------------------------------------


class ClientHandshake(_Handshake):
    """Client role: :meth:`initiate`, then feed SERVER_HELLO and SERVER_AUTH.

    Randomness drawn from ``rng`` (in this order): the 64-octet ML-KEM seed ``d || z``, then
    the 32-octet X25519 private key.
    """

    _initial = HandshakeState.CLIENT_START
    _sign_prefix = cert_verify_input(CLIENT_CONTEXT, b"")
    _verify_prefix = cert_verify_input(SERVER_CONTEXT, b"")

    def __init__(
        self, config: HandshakeConfig, *, rng: Callable[[int], bytes] = os.urandom
    ) -> None:
        """Prepare a client handshake.

        Args:
            config: Offered profiles, our identity keys, the peer trust policy.
            rng: Source of the ephemeral secrets (CSPRNG by default).

        Raises:
            ValueError: The offered profiles do not share one KEM (CLIENT_HELLO carries a
                single KEM share and there is no retry), or no identity fits them.
        """
        super().__init__(config, rng=rng)
        self._offer = config._client_offer()
        self._offer_kem = self._offer.kem
        self._mlkem_key: MlKemPrivateKey | None = None
        self._x_key: x25519.X25519PrivateKey | None = None

    def initiate(self) -> None:
        """Queue CLIENT_HELLO.

        Raises:
            InvalidState: Called twice, or after a failure.
        """
        try:
            next_state = self._machine.next_state(HandshakeInput.SEND_CLIENT_HELLO)
        except KeyError:
            raise InvalidState(f"initiate() not allowed in {self.state.name}") from None
        offer = self._offer
        params = offer.params
        self._mlkem_key, ek = params.keygen(self._rng(params.seed_len))
        self._x_key = x25519.X25519PrivateKey.from_private_bytes(self._rng(32))
        payload = offer.prefix + ek + self._x_key.public_key().public_bytes_raw()
        self._transcript.absorb(_CH_TYPE + payload)
        self._out.append(push_frame(CLIENT_HELLO, CONTROL_CHANNEL, 0, payload))
        self._machine.state = next_state

    def _handle(self, event: HandshakeInput, frame: Frame) -> list[HandshakeCompleted]:
        if event is HandshakeInput.RECV_SERVER_HELLO:
            self._on_server_hello(frame)
            return []
        peer = self._verify_auth(frame, _S2C)
        self._out.append(self._build_auth(CLIENT_AUTH, _C2S))
        return [self._completed(peer)]

    def _on_server_hello(self, frame: Frame) -> None:
        cfg = self.config
        payload = self._cleartext(frame)
        prof, kem, sig, aead, ct_value = _tlv_values(payload, SERVER_HELLO_TLVS)
        selected = cfg._memo.selected
        key = (prof, kem, sig, aead)
        selection = selected.get(key)
        if selection is None:
            if len(prof) != 1:
                raise HandshakeDecodeError("ProfileSelect must be exactly 1 octet")
            selection = check_selection(
                profile=prof[0],
                kem=_u16(kem, "KEMSelect"),
                sig=_u16(sig, "SigSelect"),
                aead=_u16(aead, "AEADSelect"),
                offered=cfg.profiles,
                floor=cfg.floor,
                offer_kem=self._offer_kem,
                schemes=cfg.sig_preference,
                aead_suites=cfg.aead_suites,
            )
            _remember(selected, key, selection)
        params = self._offer.params
        if len(ct_value) != params.ciphertext_len:
            raise HandshakeDecodeError(
                f"KEMCiphertext must be {params.ciphertext_len} octets, got {len(ct_value)}"
            )
        self._select(selection)
        self._transcript.absorb(_SH_TYPE + payload)
        ct, server_pub = ct_value[: params.ct_len], ct_value[params.ct_len :]
        if self._x_key is None or self._mlkem_key is None:  # pragma: no cover - state table
            raise InvalidState("SERVER_HELLO before CLIENT_HELLO was sent")
        mlkem_ss = self._mlkem_key.decapsulate(ct)
        x_ss = x25519_shared(self._x_key, server_pub)
        self._mlkem_key = self._x_key = None
        self._key_schedule(mlkem_ss, x_ss)


# --- server ----------------------------------------------------------------------------------


class ServerHandshake(_Handshake):
    """Server role: feed CLIENT_HELLO (answers SERVER_HELLO + SERVER_AUTH), then CLIENT_AUTH.

    Selection policy: the highest profile that the client offered, we accept, is at or above our
    minimum, accepts the client's KEM share and for which we hold an allowed identity key —
    never anything lower when something higher is mutually supported. Randomness drawn from
    ``rng``: the 32-octet X25519 private key; ML-KEM encapsulation uses ``encapsulate``.
    """

    _initial = HandshakeState.SERVER_EXPECT_CLIENT_HELLO
    _sign_prefix = cert_verify_input(SERVER_CONTEXT, b"")
    _verify_prefix = cert_verify_input(CLIENT_CONTEXT, b"")

    def __init__(
        self,
        config: HandshakeConfig,
        *,
        rng: Callable[[int], bytes] = os.urandom,
        encapsulate: Encapsulator | None = None,
    ) -> None:
        """Prepare a server handshake.

        Args:
            config: Accepted profiles and minimum, our identity keys, the client trust policy.
            rng: Source of the ephemeral X25519 key (CSPRNG by default).
            encapsulate: ML-KEM encapsulation override ``(kem, ek) -> (ss, ct)``; the
                library's (randomized) encapsulation by default.
        """
        super().__init__(config, rng=rng)
        self._encapsulate = encapsulate

    def _handle(self, event: HandshakeInput, frame: Frame) -> list[HandshakeCompleted]:
        if event is HandshakeInput.RECV_CLIENT_HELLO:
            self._on_client_hello(frame)
            return []
        peer = self._verify_auth(frame, _C2S)
        return [self._completed(peer)]

    def _negotiate(self, offer: tuple[bytes, ...]) -> tuple[Selection, KemParams, bytes]:
        """Apply the selection policy to CLIENT_HELLO's four offers: the selection, its KEM
        row and SERVER_HELLO's four select TLVs."""
        profiles, kem, sig, aead = offer
        if not profiles:
            raise HandshakeDecodeError("ProfileOffer must not be empty")
        kems = _u16_list(kem, "KEMOffer")
        sigs = _u16_list(sig, "SigOffer")
        aeads = _u16_list(aead, "AEADOffer")
        cfg = self.config
        sel = select(
            offered=profiles,
            kem=kems[0],
            sigs=sigs,
            aeads=aeads,
            accepted=cfg.profiles,
            floor=cfg.floor,
            schemes=cfg.sig_preference,
            aead_suites=cfg.aead_suites,
        )
        head = _SELECTS.pack(
            TlvType.PROFILE_SELECT, 1, sel.profile,
            TlvType.KEM_SELECT, 2, sel.kem,
            TlvType.SIG_SELECT, 2, sel.signature,
            TlvType.AEAD_SELECT, 2, sel.aead,
        )  # fmt: skip
        return sel, kem_params(sel.kem), head

    def _on_client_hello(self, frame: Frame) -> None:
        payload = self._cleartext(frame)
        values = _tlv_values(payload, CLIENT_HELLO_TLVS)
        offer, share = tuple(values[:4]), values[4]
        selections = self.config._memo.selections
        negotiated = selections.get(offer)
        if negotiated is None:
            negotiated = self._negotiate(offer)
            _remember(selections, offer, negotiated)
        sel, params, head = negotiated
        if len(share) != params.share_len:
            raise HandshakeDecodeError(
                f"KEMShare must be {params.share_len} octets, got {len(share)}"
            )
        ek, client_pub = share[: params.ek_len], share[params.ek_len :]
        x_key = x25519.X25519PrivateKey.from_private_bytes(self._rng(32))
        x_ss = x25519_shared(x_key, client_pub)
        if self._encapsulate is not None:
            mlkem_ss, ct = self._encapsulate(params.kem, ek)
        else:
            mlkem_ss, ct = params.encapsulate(ek)
        ct_value = ct + x_key.public_key().public_bytes_raw()
        sh = head + _TL.pack(TlvType.KEM_CIPHERTEXT, len(ct_value)) + ct_value
        self._select(sel)
        self._transcript.absorb(_CH_TYPE + payload + _SH_TYPE + sh)
        self._key_schedule(mlkem_ss, x_ss)
        self._out.append(push_frame(SERVER_HELLO, CONTROL_CHANNEL, 0, sh))
        self._out.append(self._build_auth(SERVER_AUTH, _S2C))
