"""Identity key files, fingerprints and the pinned-peer allowlist."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest

from iobridge.npamp.handshake import (
    IdentityKey,
    PinnedPeers,
    fingerprint,
    generate_identity,
    keygen,
    load_identity,
    load_public_key,
)
from iobridge.npamp.handshake.profiles import Profile, SignatureScheme, verify_signature

ED = SignatureScheme.ED25519
ML = SignatureScheme.MLDSA87


@pytest.mark.parametrize(("scheme", "pub_len"), [(ED, 32), (ML, 2592)])
def test_generate_write_load_roundtrip(
    tmp_path: Path, scheme: SignatureScheme, pub_len: int
) -> None:
    path = tmp_path / "id.pem"
    made = generate_identity(scheme, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = load_identity(path)
    assert (loaded.scheme, loaded.public_key) == (scheme, made.public_key)
    assert len(loaded.public_key) == pub_len
    assert load_public_key(tmp_path / "id.pem.pub") == (scheme, made.public_key)
    sig = loaded.sign(b"msg")
    assert verify_signature(scheme, made.public_key, b"msg", sig)
    assert not verify_signature(scheme, made.public_key, b"other", sig)


@pytest.mark.parametrize(
    ("profile", "scheme"), [(Profile.STANDARD, ED), (Profile.HIGH, ML), (Profile.SOVEREIGN, ML)]
)
def test_generate_for_profile_picks_its_strongest_scheme(
    tmp_path: Path, profile: Profile, scheme: SignatureScheme
) -> None:
    assert generate_identity(profile, tmp_path / "k").scheme is scheme


def test_keygen_cli_entry(tmp_path: Path) -> None:
    out = keygen(tmp_path / "node.key", "ml-dsa-87")
    assert out == tmp_path / "node.key"
    assert load_identity(out).scheme is ML
    assert keygen(tmp_path / "ed.key").exists()
    with pytest.raises(ValueError, match="unknown identity scheme"):
        keygen(tmp_path / "x.key", "rsa")
    assert not (tmp_path / "x.key").exists()


def test_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "id.pem"
    path.write_bytes(b"keep me")
    with pytest.raises(FileExistsError):
        generate_identity(ED, path)
    assert path.read_bytes() == b"keep me"


def test_load_rejects_non_identity_keys(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "ec.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ValueError, match="not an N-PAMP identity key"):
        load_identity(path)
    (tmp_path / "junk.pem").write_bytes(b"not a key")
    with pytest.raises(ValueError):
        load_identity(tmp_path / "junk.pem")


def test_fingerprint_is_sha256_of_raw_public_key() -> None:
    key = IdentityKey.from_seed(ED, bytes(32))
    assert key.fingerprint == fingerprint(key.public_key)
    assert key.fingerprint == "sha256:" + hashlib.sha256(key.public_key).hexdigest()


def test_pinned_peers_from_fingerprints_and_files(tmp_path: Path) -> None:
    a = generate_identity(ED, tmp_path / "a")
    b = IdentityKey.from_seed(ML, bytes([7]) * 32)
    c = IdentityKey.from_seed(ED, bytes([8]) * 32)
    pins = PinnedPeers([tmp_path / "a.pub", b.fingerprint.upper().replace("SHA256:", "sha256:")])
    assert pins(ED, a.public_key)
    assert pins(ML, b.public_key)
    assert not pins(ED, c.public_key)
    assert not PinnedPeers()(ED, a.public_key)


@pytest.mark.parametrize("entry", ["sha256:abc", "sha256:" + "g" * 64])
def test_pinned_peers_rejects_malformed_fingerprints(entry: str) -> None:
    with pytest.raises(ValueError, match="malformed fingerprint"):
        PinnedPeers([entry])


def test_pinned_peers_rejects_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        PinnedPeers([tmp_path / "absent.pub"])


def test_identity_key_type_must_match_scheme() -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    with pytest.raises(TypeError):
        IdentityKey(ML, ed25519.Ed25519PrivateKey.generate())


@pytest.mark.parametrize(("scheme", "pub", "sig"), [(ED, 31, 64), (ED, 32, 63), (ML, 2592, 4626)])
def test_verify_signature_rejects_wrong_sizes(scheme: SignatureScheme, pub: int, sig: int) -> None:
    assert not verify_signature(scheme, bytes(pub), b"m", bytes(sig))
