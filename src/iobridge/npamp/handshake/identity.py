"""Long-term N-PAMP identities: key files, fingerprints and the pinned-peer allowlist.

The handshake authenticates each peer by a raw identity public key (IdentityKey TLV) and a
CertVerify signature; there are no certificates. What a peer *is* therefore reduces to its
(scheme, public key) pair, which the server later maps to a principal.

File format (our choice; the specification defines none):

* private key: PKCS#8 PEM, unencrypted, written with mode 0600 at ``path``;
* public key: SubjectPublicKeyInfo PEM at ``path`` + ``".pub"``.

Both are the standard encodings ``cryptography`` and OpenSSL read, for Ed25519 (RFC 8410) and
ML-DSA-87 (FIPS 204 / draft-ietf-lamps-dilithium-certificates). The scheme is recovered from the
key type, so files need no extra metadata.

Fingerprint: ``"sha256:" + hex(SHA-256(raw public key octets))`` — the octets that travel in
the IdentityKey TLV, so a fingerprint can be computed from the wire as well as from a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, mldsa

from iobridge.npamp.handshake.profiles import PROFILES, Profile, SignatureScheme

__all__ = [
    "FINGERPRINT_PREFIX",
    "IdentityKey",
    "PeerVerifier",
    "PinnedPeers",
    "fingerprint",
    "generate_identity",
    "keygen",
    "load_identity",
    "load_public_key",
]

FINGERPRINT_PREFIX = "sha256:"

#: ``verifier(scheme, public_key) -> bool``: whether an authenticated peer key is acceptable.
PeerVerifier = Callable[[SignatureScheme, bytes], bool]

_PrivateKey = ed25519.Ed25519PrivateKey | mldsa.MLDSA87PrivateKey


def fingerprint(public_key: bytes) -> str:
    """Return the fingerprint of a raw identity public key."""
    return FINGERPRINT_PREFIX + hashlib.sha256(public_key).hexdigest()


@dataclass(frozen=True, slots=True)
class IdentityKey:
    """One of our identity key pairs.

    Attributes:
        scheme: The signature scheme (and so the profiles it can serve).
        private_key: The ``cryptography`` private key object.
        public_key: Raw public key octets, as sent in the IdentityKey TLV.
    """

    scheme: SignatureScheme
    private_key: _PrivateKey = field(repr=False)
    public_key: bytes = field(init=False)

    def __post_init__(self) -> None:
        expected = (
            ed25519.Ed25519PrivateKey
            if self.scheme is SignatureScheme.ED25519
            else mldsa.MLDSA87PrivateKey
        )
        if not isinstance(self.private_key, expected):
            raise TypeError(f"{self.scheme.name} identity needs a {expected.__name__}")
        object.__setattr__(self, "public_key", self.private_key.public_key().public_bytes_raw())

    @classmethod
    def from_seed(cls, scheme: SignatureScheme, seed: bytes) -> IdentityKey:
        """Deterministic key from a 32-octet seed (RFC 8032 private key / FIPS 204 xi)."""
        if scheme is SignatureScheme.ED25519:
            return cls(scheme, ed25519.Ed25519PrivateKey.from_private_bytes(seed))
        return cls(scheme, mldsa.MLDSA87PrivateKey.from_seed_bytes(seed))

    @classmethod
    def generate(cls, scheme: SignatureScheme) -> IdentityKey:
        """Fresh key pair from the operating system's CSPRNG."""
        if scheme is SignatureScheme.ED25519:
            return cls(scheme, ed25519.Ed25519PrivateKey.generate())
        return cls(scheme, mldsa.MLDSA87PrivateKey.generate())

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the public key."""
        return fingerprint(self.public_key)

    def sign(self, data: bytes) -> bytes:
        """Sign ``data`` (Ed25519 is deterministic, ML-DSA-87 hedged with empty context)."""
        return self.private_key.sign(data)


def _scheme_of(key: object) -> SignatureScheme:
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return SignatureScheme.ED25519
    return SignatureScheme.MLDSA87


def _public_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def generate_identity(
    scheme: SignatureScheme | Profile, path: str | os.PathLike[str]
) -> IdentityKey:
    """Create a key pair and write it to ``path`` (private) and ``path.pub`` (public).

    Args:
        scheme: A signature scheme, or a profile (its strongest allowed scheme: Ed25519 for
            Standard, ML-DSA-87 for High and Sovereign).
        path: Where to write the private key. Refuses to overwrite an existing file.

    Raises:
        FileExistsError: ``path`` already exists.
        FileNotFoundError: The folder of ``path`` does not exist (nothing is created).
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder {str(target.parent)!r} does not exist; create it first")
    if isinstance(scheme, Profile):
        allowed = PROFILES[scheme].signatures
        scheme = max(allowed, key=lambda s: s is SignatureScheme.MLDSA87)
    identity = IdentityKey.generate(scheme)
    private_pem = identity.private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    _public_path(target).write_bytes(
        identity.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return identity


def keygen(path: str | os.PathLike[str], scheme: str | SignatureScheme = "ed25519") -> Path:
    """CLI entry (``iobridge npamp keygen``): write a key pair, return the private key path.

    Args:
        path: Private key file to create; the public key goes to ``path.pub``.
        scheme: ``"ed25519"``, ``"ml-dsa-87"`` (or a :class:`SignatureScheme`).
    """
    if not isinstance(scheme, SignatureScheme):
        names = {
            "ed25519": SignatureScheme.ED25519,
            "ml-dsa-87": SignatureScheme.MLDSA87,
            "mldsa87": SignatureScheme.MLDSA87,
        }
        try:
            scheme = names[scheme.lower()]
        except KeyError:
            raise ValueError(
                f"unknown identity scheme {scheme!r}; use ed25519 or ml-dsa-87"
            ) from None
    generate_identity(scheme, path)
    return Path(path)


def load_identity(path: str | os.PathLike[str]) -> IdentityKey:
    """Load a private identity key (PKCS#8 PEM) written by :func:`generate_identity`.

    Raises:
        OSError: The file cannot be read.
        ValueError: The file is not an unencrypted Ed25519 or ML-DSA-87 private key.
    """
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError) as exc:  # not PEM, encrypted, or an unsupported algorithm
        raise ValueError(f"{path}: not an unencrypted PKCS#8 PEM private key") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey | mldsa.MLDSA87PrivateKey):
        raise ValueError(f"not an N-PAMP identity key type: {type(key).__name__}")
    return IdentityKey(_scheme_of(key), key)


def load_public_key(path: str | os.PathLike[str]) -> tuple[SignatureScheme, bytes]:
    """Load a public identity key (SubjectPublicKeyInfo PEM) → (scheme, raw octets).

    Raises:
        ValueError: The file is not an Ed25519 or ML-DSA-87 public key.
    """
    key = serialization.load_pem_public_key(Path(path).read_bytes())
    if not isinstance(key, ed25519.Ed25519PublicKey | mldsa.MLDSA87PublicKey):
        raise ValueError(f"not an N-PAMP identity key type: {type(key).__name__}")
    return _scheme_of(key), key.public_bytes_raw()


class PinnedPeers:
    """Allowlist of peer identity keys, usable as a :data:`PeerVerifier`.

    Entries are fingerprints (``"sha256:<64 hex>"``) or paths to public key files; raw key
    octets can be added with :meth:`add_key`. An empty allowlist accepts nobody.
    """

    __slots__ = ("_fingerprints",)

    def __init__(self, entries: Iterable[str | os.PathLike[str]] = ()) -> None:
        """Build the allowlist from fingerprints and/or public key file paths.

        Raises:
            ValueError: An entry is neither a well-formed fingerprint nor a readable key file.
        """
        self._fingerprints: set[str] = set()
        for entry in entries:
            text = os.fspath(entry)
            if text.startswith(FINGERPRINT_PREFIX):
                digest = text[len(FINGERPRINT_PREFIX) :].lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"malformed fingerprint {text!r}")
                self._fingerprints.add(FINGERPRINT_PREFIX + digest)
            else:
                self.add_key(load_public_key(text)[1])

    def add_key(self, public_key: bytes) -> None:
        """Pin one raw public key."""
        self._fingerprints.add(fingerprint(public_key))

    def __contains__(self, public_key: object) -> bool:
        return isinstance(public_key, bytes) and fingerprint(public_key) in self._fingerprints

    def __call__(self, scheme: SignatureScheme, public_key: bytes) -> bool:
        """Whether ``public_key`` is pinned (the scheme is already bound by the handshake)."""
        return public_key in self
