"""N-PAMP profiles, code points and the parameter row each profile selects.

One handshake construction serves every profile (ADR-0003); a profile only picks a row:

==========  ==============  ===================  =======  =====================
Profile     KEM             Signatures           Hash     Downgrade refusal
==========  ==============  ===================  =======  =====================
Standard    X25519MLKEM768  Ed25519              SHA-256  off
High        X25519MLKEM1024 Ed25519, ML-DSA-87   SHA-384  refuses Standard
Sovereign   X25519MLKEM1024 ML-DSA-87            SHA-384  refuses below Sovereign
==========  ==============  ===================  =======  =====================

Readings taken where the specification is silent or inconsistent (recorded so that review can
overturn them):

* **KEM per profile.** The profile table gives a *minimum* KEM while ``kem.csv`` lists
  X25519MLKEM768 for "Standard, High" and X25519MLKEM1024 for "High, Sovereign". We accept a
  KEM only where both agree: Standard takes 768 only, High and Sovereign take 1024 only (the
  in-tree adapters and the ``profile.check`` corpus agree; digest §10 item 30).
* **One KEM share.** CLIENT_HELLO carries a single KEMShare and there is no retry message, so
  the share is for ``KEMOffer[0]`` and the server must select exactly that KEM. Profiles offered
  together must therefore accept the same KEM: {High, Sovereign} is a valid offer, {Standard,
  High} is not.
* **Signature scheme.** IdentityKey carries raw key octets with no scheme tag, so both peers use
  the single SigSelect scheme for their identity and CertVerify.
* **Per-frame AEAD diversification** (High, Sovereign: "On") is named but never defined (no
  selection rule, no wire signal). It is not implemented: the single AEADSelect suite protects
  every frame at every profile.
* **Mandatory key-update bounds** have no numbers anywhere; they are the record layer's
  configuration, not a profile constant here.

The KEM and signature operations live here too, because which primitive runs is exactly what
the row decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519, mldsa, mlkem, x25519

from iobridge.npamp.errors import ErrorCode, HandshakeFailure
from iobridge.npamp.record.keyschedule import HashName

__all__ = [
    "PROFILES",
    "AeadSuite",
    "Encapsulator",
    "Kem",
    "KemParams",
    "MlKemPrivateKey",
    "NegotiationFailure",
    "Profile",
    "ProfileParams",
    "Selection",
    "SignatureScheme",
    "check_profile_kem",
    "check_selection",
    "common_kem",
    "kem_params",
    "select",
    "signature_lengths",
    "verify_signature",
    "x25519_shared",
]


class Profile(IntEnum):
    """Profile code points (ProfileOffer/ProfileSelect octet); 0x00, 0x04-0xFF reserved."""

    STANDARD = 0x01
    HIGH = 0x02
    SOVEREIGN = 0x03


class Kem(IntEnum):
    """Hybrid KEM code points (registries/kem.csv)."""

    X25519MLKEM768 = 0x11EC
    X25519MLKEM1024 = 0x11ED


class SignatureScheme(IntEnum):
    """Signature code points (registries/signatures.csv)."""

    ED25519 = 0x0807
    MLDSA87 = 0x0905


class AeadSuite(IntEnum):
    """AEAD code points (registries/aead.csv); both use a 32-octet key and 12-octet nonce."""

    AES_256_GCM = 0x0001
    CHACHA20_POLY1305 = 0x0002


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileParams:
    """The parameter row one profile selects."""

    #: The profile this row belongs to.
    profile: Profile
    #: KEMs this profile accepts.
    kems: frozenset[Kem]
    #: Identity signature schemes this profile accepts.
    signatures: frozenset[SignatureScheme]
    #: KDF and transcript hash ``H``.
    hash_name: HashName


PROFILES: dict[Profile, ProfileParams] = {
    Profile.STANDARD: ProfileParams(
        profile=Profile.STANDARD,
        kems=frozenset({Kem.X25519MLKEM768}),
        signatures=frozenset({SignatureScheme.ED25519}),
        hash_name="sha256",
    ),
    Profile.HIGH: ProfileParams(
        profile=Profile.HIGH,
        kems=frozenset({Kem.X25519MLKEM1024}),
        signatures=frozenset({SignatureScheme.ED25519, SignatureScheme.MLDSA87}),
        hash_name="sha384",
    ),
    Profile.SOVEREIGN: ProfileParams(
        profile=Profile.SOVEREIGN,
        kems=frozenset({Kem.X25519MLKEM1024}),
        signatures=frozenset({SignatureScheme.MLDSA87}),
        hash_name="sha384",
    ),
}


def check_profile_kem(profile: int, kem: int) -> bool:
    """Whether ``profile`` accepts ``kem`` (the ``profile.check`` invariant).

    Sovereign never accepts X25519MLKEM768. Unknown code points are not accepted.
    """
    try:
        return Kem(kem) in PROFILES[Profile(profile)].kems
    except ValueError:
        return False


# --- Negotiation (05_profiles "Negotiation rules", spec/10 §2) -------------------------------


class NegotiationFailure(HandshakeFailure):
    """No acceptable profile/KEM/signature/AEAD, or the peer selected a downgrade."""

    code = ErrorCode.NEGOTIATION_FAILURE


@dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """What SERVER_HELLO fixes for the rest of the handshake."""

    #: Selected profile.
    profile: Profile
    #: Selected hybrid KEM.
    kem: Kem
    #: Signature scheme both identities use.
    signature: SignatureScheme
    #: AEAD suite of the AUTH frames and the application keys.
    aead: AeadSuite

    @property
    def hash_name(self) -> HashName:
        """The profile hash ``H``."""
        return PROFILES[self.profile].hash_name


def common_kem(profiles: Sequence[Profile]) -> Kem:
    """The KEM of the single CLIENT_HELLO share when ``profiles`` are offered together.

    Raises:
        ValueError: The profiles accept no common KEM (e.g. Standard with High).
    """
    common = frozenset.intersection(*(PROFILES[p].kems for p in profiles))
    if not common:
        raise ValueError("offered profiles must accept a common KEM")
    return max(common)


def select(
    *,
    offered: bytes,
    kem: int,
    sigs: Sequence[int],
    aeads: Sequence[int],
    accepted: Sequence[Profile],
    floor: Profile,
    schemes: Sequence[SignatureScheme],
    aead_suites: Sequence[AeadSuite],
) -> Selection:
    """Server policy: the highest mutually acceptable profile, never anything lower.

    A profile qualifies when the client offered it, we accept it, it is at or above ``floor``,
    it accepts the client's share KEM (``KEMOffer[0]``) and we hold a key for one of its
    signature schemes that the client offered (first in the client's order wins). Unknown
    (reserved) profile codes in the offer are ignored. The AEAD is the client's first offered
    suite that we accept.

    Raises:
        NegotiationFailure: Nothing qualifies.
    """
    best: tuple[Profile, SignatureScheme] | None = None
    for code in set(offered):
        if code not in set(accepted) or code < floor:
            continue
        row = PROFILES[Profile(code)]
        if kem not in row.kems:
            continue
        scheme = next((s for s in sigs if s in row.signatures and s in schemes), None)
        if scheme is not None and (best is None or code > best[0]):
            best = (Profile(code), SignatureScheme(scheme))
    if best is None:
        raise NegotiationFailure("no offered profile is acceptable (minimum, KEM, signature)")
    aead = next((a for a in aeads if a in set(aead_suites)), None)
    if aead is None:
        raise NegotiationFailure("no common AEAD suite")
    return Selection(profile=best[0], kem=Kem(kem), signature=best[1], aead=AeadSuite(aead))


def check_selection(
    *,
    profile: int,
    kem: int,
    sig: int,
    aead: int,
    offered: Sequence[Profile],
    floor: Profile,
    offer_kem: Kem,
    schemes: Sequence[SignatureScheme],
    aead_suites: Sequence[AeadSuite],
) -> Selection:
    """Client check of SERVER_HELLO: only what we offered, never below our minimum.

    Raises:
        NegotiationFailure: The server selected something we did not offer, a profile below
            ``floor``, or a KEM/signature the selected profile does not allow (so Sovereign
            with X25519MLKEM768 is refused here too).
    """
    if profile not in set(offered):
        raise NegotiationFailure(f"server selected profile 0x{profile:02x} we did not offer")
    row = PROFILES[Profile(profile)]
    if profile < floor:
        raise NegotiationFailure(f"server selected {row.profile.name}, below our minimum")
    if kem != offer_kem or kem not in row.kems:
        raise NegotiationFailure(f"server selected KEM 0x{kem:04x} we cannot use")
    if sig not in schemes or sig not in row.signatures:
        raise NegotiationFailure(f"server selected signature 0x{sig:04x} we did not offer")
    if aead not in aead_suites:
        raise NegotiationFailure(f"server selected AEAD 0x{aead:04x} we did not offer")
    return Selection(
        profile=row.profile, kem=Kem(kem), signature=SignatureScheme(sig), aead=AeadSuite(aead)
    )


# --- Hybrid KEM (spec/10 §4) -----------------------------------------------------------------

X25519_LEN = 32

MlKemPrivateKey = mlkem.MLKEM768PrivateKey | mlkem.MLKEM1024PrivateKey

#: ``Encapsulator(kem, encapsulation_key) -> (shared_secret, ciphertext)``: the server's ML-KEM
#: encapsulation. Injectable because the library's encapsulation randomness is not seedable
#: and the handshake-flow KAT fixes the ciphertext.
Encapsulator = Callable[[Kem, bytes], tuple[bytes, bytes]]


@dataclass(frozen=True, kw_only=True, slots=True)
class KemParams:
    """Wire sizes of one hybrid KEM; ML-KEM part first on the wire and in the IKM."""

    #: Code point.
    kem: Kem
    #: ML-KEM encapsulation key length.
    ek_len: int
    #: ML-KEM ciphertext length.
    ct_len: int
    #: ML-KEM private-key seed length (``d || z``).
    seed_len: int = 64

    @property
    def share_len(self) -> int:
        """KEMShare length: ``ek || x25519 public``."""
        return self.ek_len + X25519_LEN

    @property
    def ciphertext_len(self) -> int:
        """KEMCiphertext length: ``ct || server x25519 public``."""
        return self.ct_len + X25519_LEN

    def keygen(self, seed: bytes) -> tuple[MlKemPrivateKey, bytes]:
        """Deterministic ML-KEM key pair from a 64-octet ``d || z`` seed → (key, ek)."""
        key: MlKemPrivateKey
        if self.kem is Kem.X25519MLKEM768:
            key = mlkem.MLKEM768PrivateKey.from_seed_bytes(seed)
        else:
            key = mlkem.MLKEM1024PrivateKey.from_seed_bytes(seed)
        return key, key.public_key().public_bytes_raw()

    def encapsulate(self, ek: bytes) -> tuple[bytes, bytes]:
        """ML-KEM Encaps with library randomness → (shared_secret, ciphertext).

        Raises:
            ValueError: ``ek`` is not a valid encapsulation key.
        """
        if self.kem is Kem.X25519MLKEM768:
            return mlkem.MLKEM768PublicKey.from_public_bytes(ek).encapsulate()
        return mlkem.MLKEM1024PublicKey.from_public_bytes(ek).encapsulate()


_KEMS = {
    Kem.X25519MLKEM768: KemParams(kem=Kem.X25519MLKEM768, ek_len=1184, ct_len=1088),
    Kem.X25519MLKEM1024: KemParams(kem=Kem.X25519MLKEM1024, ek_len=1568, ct_len=1568),
}


def kem_params(kem: Kem) -> KemParams:
    """Return the wire sizes and operations of ``kem``."""
    return _KEMS[kem]


def x25519_shared(private: x25519.X25519PrivateKey, peer_public: bytes) -> bytes:
    """X25519 with the all-zero (low-order) output rejected (RFC 7748 §6.1, spec/10 §4).

    Raises:
        ValueError: The peer key has the wrong length or yields the all-zero secret.
    """
    if len(peer_public) != X25519_LEN:
        raise ValueError("X25519 public key must be 32 octets")
    # ``cryptography`` already raises on an all-zero result; the explicit check keeps the rule
    # visible and independent of the backend.
    try:
        shared = private.exchange(x25519.X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:
        shared = bytes(X25519_LEN)
    if shared == bytes(X25519_LEN):
        raise ValueError("all-zero X25519 shared secret")
    return shared


# --- Identity signatures (spec/10 §6.1) ------------------------------------------------------

_SIG_LENGTHS = {
    SignatureScheme.ED25519: (32, 64),
    SignatureScheme.MLDSA87: (2592, 4627),
}


def signature_lengths(scheme: SignatureScheme) -> tuple[int, int]:
    """Return ``(public_key_len, signature_len)`` for ``scheme``."""
    return _SIG_LENGTHS[scheme]


def verify_signature(scheme: SignatureScheme, public: bytes, data: bytes, signature: bytes) -> bool:
    """Verify a raw signature; any malformed key or signature is simply ``False``."""
    pub_len, sig_len = _SIG_LENGTHS[scheme]
    if len(public) != pub_len or len(signature) != sig_len:
        return False
    try:
        if scheme is SignatureScheme.ED25519:
            ed25519.Ed25519PublicKey.from_public_bytes(public).verify(signature, data)
        else:
            mldsa.MLDSA87PublicKey.from_public_bytes(public).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True
