"""N-PAMP key schedule: HKDF, HKDF-Expand-Label with the ``"n-pamp "`` prefix, the secret ladder.

Theory of operation (spec/10 §5, draft "Key Schedule and Nonces")::

    handshake_secret = HKDF-Extract(salt = HashLen x 0x00, IKM = ML-KEM_SS || X25519_SS)
    c_hs   = Expand-Label(handshake_secret, "c hs",   TH_kem, HashLen)
    s_hs   = Expand-Label(handshake_secret, "s hs",   TH_kem, HashLen)
    master = Expand-Label(handshake_secret, "master", TH_cCV, HashLen)
    traffic_secret = Expand-Label(parent, "traffic", dir(1) || epoch(8) || suite(2) || channel(2),
                                  HashLen)
    key = Expand-Label(traffic_secret, "key", "", 32)
    iv  = Expand-Label(traffic_secret, "iv", "", 12)
    finished_key = Expand-Label(c_hs or s_hs, "finished", "", HashLen)

There is a single Extract (no TLS-style Early/Handshake/Master chain); the phases are separated
by label and by the transcript hash bound into each Expand-Label. Handshake AUTH keys hang off
``c_hs``/``s_hs`` (epoch 0, Control channel); application keys hang off ``master``, so the same
``(dir, epoch, suite, channel)`` tuple never yields the same (key, iv) in both phases.

The "header-protection key" the draft mentions has no label, length or use anywhere in the
specification or its references, so none is derived (digest §10 item 24).

Everything here is a pure function of its arguments: no state, no randomness, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from enum import IntEnum
from typing import Literal

__all__ = [
    "AEAD_IV_LEN",
    "AEAD_KEY_LEN",
    "LABEL_PREFIX",
    "Direction",
    "HashName",
    "application_keys",
    "c_hs_secret",
    "finished_key",
    "finished_mac",
    "handshake_secret",
    "hash_len",
    "hkdf_expand",
    "hkdf_expand_label",
    "hkdf_extract",
    "master_secret",
    "s_hs_secret",
    "traffic_context",
    "traffic_keys",
    "traffic_secret",
    "transcript_digest",
    "verify_finished",
]

#: Label prefix (spec/10 §5). The trailing space is part of it; ``"tls13 "`` is non-conformant.
LABEL_PREFIX = b"n-pamp "
#: AEAD key length for both registered suites (registries/aead.csv).
AEAD_KEY_LEN = 32
#: AEAD IV (nonce) length for both registered suites.
AEAD_IV_LEN = 12

HashName = Literal["sha256", "sha384"]
"""KDF hash: SHA-256 at Standard, SHA-384 at High and Sovereign (spec/10 §2)."""


class Direction(IntEnum):
    """The ``dir`` octet of the traffic-secret context (spec/10 §5)."""

    #: Client to server.
    CLIENT_TO_SERVER = 0
    #: Server to client.
    SERVER_TO_CLIENT = 1


_HASH_LENS = {"sha256": 32, "sha384": 48}


def hash_len(hash_name: HashName) -> int:
    """Return HashLen (32 for SHA-256, 48 for SHA-384)."""
    try:
        return _HASH_LENS[hash_name]
    except KeyError:
        raise ValueError(f"unsupported KDF hash {hash_name!r}") from None


def transcript_digest(data: bytes, hash_name: HashName) -> bytes:
    """Hash ``data`` with the profile hash ``H`` (transcript points, Finished input)."""
    return hashlib.new(hash_name, data).digest()


def hkdf_extract(salt: bytes, ikm: bytes, hash_name: HashName) -> bytes:
    """HKDF-Extract (RFC 5869 §2.2): ``HMAC-H(salt, IKM)``; an empty salt means HashLen zeros."""
    if not salt:
        salt = bytes(hash_len(hash_name))
    return hmac.digest(salt, ikm, hash_name)


def hkdf_expand(prk: bytes, info: bytes, length: int, hash_name: HashName) -> bytes:
    """HKDF-Expand (RFC 5869 §2.3): ``T(i) = HMAC-H(PRK, T(i-1) || info || i)``, truncated.

    One ``hmac.digest`` call per block (the standard library's HMAC over OpenSSL). The
    key-schedule and handshake-flow KATs pin the output; a test compares it with
    ``cryptography``'s HKDFExpand.

    Raises:
        ValueError: ``length`` is outside 1..255*HashLen.
    """
    size = hash_len(hash_name)
    if not 0 < length <= 255 * size:
        raise ValueError(f"HKDF-Expand length must be in 1..{255 * size}")
    blocks, block = [], b""
    for counter in range(1, -(-length // size) + 1):
        block = hmac.digest(prk, block + info + bytes((counter,)), hash_name)
        blocks.append(block)
    return b"".join(blocks)[:length]


def hkdf_expand_label(
    secret: bytes, label: bytes | str, context: bytes, length: int, hash_name: HashName
) -> bytes:
    """HKDF-Expand-Label of RFC 8446 §7.1 with the N-PAMP prefix.

    ``info = uint16(length) || uint8(len(full)) || full || uint8(len(context)) || context`` where
    ``full = "n-pamp " + label``.

    Args:
        secret: The PRK to expand.
        label: The label without prefix (``"c hs"``, ``"traffic"``, ...).
        context: Context octets (a transcript hash, the 13-octet traffic tuple, or empty).
        length: Output length in octets (at most 65535 by the ``uint16`` field).
        hash_name: Profile hash.

    Raises:
        ValueError: A field does not fit its length prefix.
    """
    full = LABEL_PREFIX + (label.encode("ascii") if isinstance(label, str) else label)
    if not 0 < length <= 0xFFFF:
        raise ValueError("Expand-Label length must fit uint16")
    if len(full) > 255 or len(context) > 255:
        raise ValueError("Expand-Label label and context must each be at most 255 octets")
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    return hkdf_expand(secret, info, length, hash_name)


def handshake_secret(mlkem_ss: bytes, x25519_ss: bytes, hash_name: HashName) -> bytes:
    """The single Extract over the hybrid KEM output, ML-KEM secret first (ADR-0005)."""
    return hkdf_extract(bytes(hash_len(hash_name)), mlkem_ss + x25519_ss, hash_name)


def _secret_label(secret: bytes, label: str, context: bytes, hash_name: HashName) -> bytes:
    """``Expand-Label(secret, label, context, HashLen)``."""
    return hkdf_expand_label(secret, label, context, hash_len(hash_name), hash_name)


def c_hs_secret(hs: bytes, th_kem: bytes, hash_name: HashName) -> bytes:
    """Client handshake secret, bound to ``TH_kem``."""
    return _secret_label(hs, "c hs", th_kem, hash_name)


def s_hs_secret(hs: bytes, th_kem: bytes, hash_name: HashName) -> bytes:
    """Server handshake secret, bound to ``TH_kem``."""
    return _secret_label(hs, "s hs", th_kem, hash_name)


def master_secret(hs: bytes, th_ccv: bytes, hash_name: HashName) -> bytes:
    """Connection master secret; derivable only at the client-auth boundary (``TH_cCV``)."""
    return _secret_label(hs, "master", th_ccv, hash_name)


def traffic_context(direction: int, epoch: int, suite: int, channel: int) -> bytes:
    """The 13-octet tuple ``dir(1) || epoch(8 BE) || suite(2 BE) || channel(2 BE)``.

    Raises:
        ValueError: A field is out of range for its width.
    """
    if direction not in (0, 1):
        raise ValueError("direction must be 0 (c->s) or 1 (s->c)")
    if not 0 <= epoch < 1 << 64:
        raise ValueError("epoch must be a u64")
    if not 0 <= suite <= 0xFFFF or not 0 <= channel <= 0xFFFF:
        raise ValueError("suite and channel must be u16")
    return _TRAFFIC_TUPLE.pack(direction, epoch, suite, channel)


def traffic_secret(
    parent: bytes, direction: int, epoch: int, suite: int, channel: int, hash_name: HashName
) -> bytes:
    """Traffic secret for one (direction, epoch, suite, channel) under ``parent``.

    ``parent`` is ``c_hs``/``s_hs`` for the AUTH frames and ``master`` afterwards.
    """
    context = traffic_context(direction, epoch, suite, channel)
    return hkdf_expand_label(parent, "traffic", context, hash_len(hash_name), hash_name)


def traffic_keys(secret: bytes, hash_name: HashName) -> tuple[bytes, bytes]:
    """Return ``(key[32], iv[12])`` from a traffic secret."""
    key = hkdf_expand_label(secret, "key", b"", AEAD_KEY_LEN, hash_name)
    iv = hkdf_expand_label(secret, "iv", b"", AEAD_IV_LEN, hash_name)
    return key, iv


_TRAFFIC_TUPLE = struct.Struct(">BQHH")


def application_keys(
    master: bytes, direction: int, epoch: int, suite: int, channel: int, hash_name: HashName
) -> tuple[bytes, bytes]:
    """``(key, iv)`` for application frames of one (direction, epoch, suite, channel).

    This is what the record layer calls for every fresh (channel, direction, epoch) after the
    handshake, including the Control channel (same channel and seq 0 as the AUTH frames, but a
    different parent, so a different key).
    """
    return traffic_keys(
        traffic_secret(master, direction, epoch, suite, channel, hash_name), hash_name
    )


def finished_key(base_key: bytes, hash_name: HashName) -> bytes:
    """``finished_key`` from ``c_hs`` (client) or ``s_hs`` (server)."""
    return hkdf_expand_label(base_key, "finished", b"", hash_len(hash_name), hash_name)


def finished_mac(fin_key: bytes, transcript_hash: bytes, hash_name: HashName) -> bytes:
    """``verify_data = HMAC-H(finished_key, transcript_hash)`` (spec/10 §6.2)."""
    return hmac.digest(fin_key, transcript_hash, hash_name)


def verify_finished(
    fin_key: bytes, transcript_hash: bytes, received: bytes, hash_name: HashName
) -> bool:
    """Compare a received Finished against the expected MAC in constant time."""
    return hmac.compare_digest(finished_mac(fin_key, transcript_hash, hash_name), received)
