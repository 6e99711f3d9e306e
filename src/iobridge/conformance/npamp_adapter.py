"""N-PAMP conformance adapter: ``python -m iobridge.conformance.npamp_adapter``.

Speaks the public conformance runner's stdio contract (``harness/INSTRUCTIONS.md``): each
message, both ways, is a 4-octet **little-endian** length ``N`` followed by ``N`` octets of JSON.
A request is ``{"op": ..., "in": {...}}``; the reply is exactly one of ``{"out": {...}}``,
``{"error": "reason"}`` (the input is rejected) or ``{"skipped": "why"}`` (not implemented;
not a failure). Byte fields are lowercase hex; 64-bit counters may arrive as decimal strings.

Every core op dispatches into the library (``frame``, ``tlv``, ``record``, ``keyschedule``,
``profiles``) rather than re-implementing it, so a run grades the code the connection uses. One
deliberate exception, from the corpus itself (digest §1.6): ``frame.seal``/``frame.open`` build
the AAD with Payload Length = ``len(plaintext)``, whereas the wire uses the sealed length; those
two ops use :func:`seal_plaintext_length_aad`/:func:`open_plaintext_length_aad`, which live
here so that the core never holds a non-wire AAD. The Bridge ops come from
:mod:`iobridge.conformance.npamp_bridge_ops`. Native-channel
``*.body.decode`` ops answer ``skipped`` (CBOR channel bodies are out of scope), and so does
any other op not implemented here (the runner counts it as unimplemented, not failed).
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from iobridge.conformance.npamp_bridge_ops import BRIDGE_OPS
from iobridge.npamp.errors import AeadFailure, NpampError
from iobridge.npamp.handshake.profiles import PROFILES, Kem, Profile, check_profile_kem
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.record.cipher import TAG_SIZE, RecordCipher, make_nonce
from iobridge.npamp.wire.frame import (
    CRC_COVERED_SIZE,
    VERSION,
    Flags,
    crc32c,
    pull_frame,
    push_frame_header,
    push_header_prefix,
)
from iobridge.npamp.wire.frame import FrameHeader as _Header
from iobridge.npamp.wire.tlv import CRITICAL_BIT, pull_tlv, push_tlv

__all__ = [
    "OPS",
    "Skipped",
    "handle",
    "main",
    "open_plaintext_length_aad",
    "seal_plaintext_length_aad",
    "serve",
]

Op = Callable[[dict[str, Any]], dict[str, Any]]

_LEN = struct.Struct("<I")
_SUITES = {"AES-256-GCM": 0x0001, "CHACHA20-POLY1305": 0x0002}
_PROFILE_NAMES = {
    "standard": Profile.STANDARD,
    "high": Profile.HIGH,
    "sovereign": Profile.SOVEREIGN,
}
_KEM_NAMES = {"x25519mlkem768": Kem.X25519MLKEM768, "x25519mlkem1024": Kem.X25519MLKEM1024}


# --- corpus-only record readings (digest §1.6) -------------------------------------------


def seal_plaintext_length_aad(
    cipher: RecordCipher,
    *,
    frame_type: int,
    channel: int,
    seq: int,
    plaintext: bytes,
    flags: int,
    version: int = VERSION,
) -> bytes:
    """Conformance-corpus ``frame.seal``: AAD Payload Length = ``len(plaintext)``. Not wire.

    Returns:
        ``ciphertext || tag`` (no header).
    """
    prefix = push_header_prefix(flags, frame_type, channel, seq, len(plaintext), version)
    return cipher.encrypt(seq, prefix, plaintext)


def open_plaintext_length_aad(
    cipher: RecordCipher,
    *,
    frame_type: int,
    channel: int,
    seq: int,
    sealed: bytes,
    flags: int,
    version: int = VERSION,
) -> bytes:
    """Conformance-corpus ``frame.open``: AAD Payload Length = ``len(sealed) - 16``. Not wire.

    Raises:
        AeadFailure: The tag does not verify or ``sealed`` is shorter than a tag.
    """
    if len(sealed) < TAG_SIZE:
        raise AeadFailure("sealed payload shorter than the tag")
    prefix = push_header_prefix(flags, frame_type, channel, seq, len(sealed) - TAG_SIZE, version)
    return cipher.decrypt(seq, prefix, sealed)


class Skipped(Exception):
    """Raised by an op for an input it does not implement (answered as ``skipped``)."""


# --- input helpers ----------------------------------------------------------------------------


def _hex(inp: dict[str, Any], key: str) -> bytes:
    value = inp.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a hex string")
    return bytes.fromhex(value)


def _int(inp: dict[str, Any], key: str, default: int | None = None) -> int:
    value = inp.get(key, default)
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{key} must be an integer")
    if isinstance(value, str):
        return int(value, 10)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int):
        raise ValueError(f"{key} must be an integer")
    return value


def _hash(inp: dict[str, Any]) -> ks.HashName:
    name = inp.get("hash")
    if name == "sha256":
        return "sha256"
    if name == "sha384":
        return "sha384"
    raise Skipped(f"hash not implemented: {name!r}")


def _suite(inp: dict[str, Any]) -> int:
    name = str(inp.get("suite", ""))
    if name.upper() in _SUITES:
        return _SUITES[name.upper()]
    raise Skipped(f"suite not implemented: {name!r}")


def _profile(inp: dict[str, Any]) -> Profile:
    name = str(inp.get("profile", "")).lower()
    if name not in _PROFILE_NAMES:
        raise Skipped(f"unknown profile: {name!r}")
    return _PROFILE_NAMES[name]


def _fixed(data: bytes, size: int, what: str) -> bytes:
    if len(data) != size:
        raise ValueError(f"{what} must be {size} octets, got {len(data)}")
    return data


# --- ops --------------------------------------------------------------------------------------


def header_encode(inp: dict[str, Any]) -> dict[str, Any]:
    """Fields → 36-octet header (CRC computed)."""
    header = _Header(
        version=_int(inp, "ver", 2),
        flags=Flags(_int(inp, "flags", 0)),
        frame_type=_int(inp, "frameType"),
        channel=_int(inp, "channel"),
        seq=_int(inp, "seq"),
        payload_length=_int(inp, "payloadLength", 0),
    )
    return {"frame": push_frame_header(header).hex()}


def header_decode(inp: dict[str, Any]) -> dict[str, Any]:
    """Whole frame → header fields, applying every MUST-reject rule."""
    raw = _hex(inp, "frame")
    frame = pull_frame(raw)
    h = frame.header
    return {
        "magic": "NPAM",
        "ver": h.version,
        "flags": int(h.flags),
        "frameType": h.frame_type,
        "channel": h.channel,
        "seq": h.seq,
        "payloadLength": h.payload_length,
        "crc32c": raw[CRC_COVERED_SIZE : CRC_COVERED_SIZE + 4].hex(),
        "reservedZero": True,
    }


def crc32c_op(inp: dict[str, Any]) -> dict[str, Any]:
    """CRC32C over the 21-octet header prefix."""
    octets = _fixed(_hex(inp, "octets"), CRC_COVERED_SIZE, "octets")
    return {"crc32c": crc32c(octets).to_bytes(4, "big").hex()}


def tlv_decode(inp: dict[str, Any]) -> dict[str, Any]:
    """Exactly one TLV → type, length, value; a critical (0x8000) type is unknown → reject."""
    raw = _hex(inp, "tlv")
    tlv = pull_tlv(raw)
    if tlv.type & CRITICAL_BIT:
        raise ValueError(f"unknown forward-incompatible TLV type 0x{tlv.type:04x}")
    return {"type": tlv.type, "length": len(tlv.value), "value": tlv.value.hex()}


def tlv_encode(inp: dict[str, Any]) -> dict[str, Any]:
    """Type and value → wire TLV."""
    return {"tlv": push_tlv(_int(inp, "type"), _hex(inp, "value")).hex()}


def aead_seal(inp: dict[str, Any]) -> dict[str, Any]:
    """Raw AEAD with an explicit nonce (seq 0 makes the IV the nonce)."""
    suite = _suite(inp)
    nonce = _fixed(_hex(inp, "nonce"), ks.AEAD_IV_LEN, "nonce")
    cipher = RecordCipher(suite, _fixed(_hex(inp, "key"), ks.AEAD_KEY_LEN, "key"), nonce)
    return {"sealed": cipher.encrypt(0, _hex(inp, "aad"), _hex(inp, "pt")).hex()}


def aead_open(inp: dict[str, Any]) -> dict[str, Any]:
    """Inverse of ``aead.seal``; a tag mismatch is a rejection."""
    suite = _suite(inp)
    nonce = _fixed(_hex(inp, "nonce"), ks.AEAD_IV_LEN, "nonce")
    cipher = RecordCipher(suite, _fixed(_hex(inp, "key"), ks.AEAD_KEY_LEN, "key"), nonce)
    return {"pt": cipher.decrypt(0, _hex(inp, "aad"), _hex(inp, "sealed")).hex()}


def hkdf_expand(inp: dict[str, Any]) -> dict[str, Any]:
    """Raw RFC 5869 HKDF-Expand."""
    name = _hash(inp)
    okm = ks.hkdf_expand(_hex(inp, "prk"), _hex(inp, "info"), _int(inp, "length"), name)
    return {"okm": okm.hex()}


def hkdf_expand_label(inp: dict[str, Any]) -> dict[str, Any]:
    """HKDF-Expand-Label with the ``"n-pamp "`` prefix."""
    name = _hash(inp)
    label = str(inp.get("label", "")).encode("utf-8")
    out = ks.hkdf_expand_label(
        _hex(inp, "secret"), label, _hex(inp, "context"), _int(inp, "length"), name
    )
    return {"out": out.hex()}


def keys_derive_traffic(inp: dict[str, Any]) -> dict[str, Any]:
    """Traffic secret for (dir, epoch, suite, channel) under ``master`` → key, iv."""
    name = PROFILES[_profile(inp)].hash_name
    key, iv = ks.application_keys(
        _hex(inp, "master"),
        _int(inp, "dir"),
        _int(inp, "epoch", 0),
        _int(inp, "suite"),
        _int(inp, "channel"),
        name,
    )
    return {"key": key.hex(), "iv": iv.hex()}


def nonce_derive(inp: dict[str, Any]) -> dict[str, Any]:
    """``IV XOR (0^4 || seq)``."""
    return {"nonce": make_nonce(_hex(inp, "iv"), _int(inp, "seq")).hex()}


def _frame_cipher(inp: dict[str, Any]) -> tuple[RecordCipher, dict[str, int]]:
    suite = _suite(inp)
    key = _fixed(_hex(inp, "key"), ks.AEAD_KEY_LEN, "key")
    iv = _fixed(_hex(inp, "iv"), ks.AEAD_IV_LEN, "iv")
    fields = {
        "frame_type": _int(inp, "frameType"),
        "channel": _int(inp, "channel"),
        "seq": _int(inp, "seq"),
        "flags": _int(inp, "flags", 0) & 0x0F,
        "version": _int(inp, "ver", 2),
    }
    return RecordCipher(suite, key, iv), fields


def frame_seal(inp: dict[str, Any]) -> dict[str, Any]:
    """Corpus whole-frame seal (AAD Payload Length = ``len(pt)``, the corpus quirk)."""
    cipher, fields = _frame_cipher(inp)
    sealed = seal_plaintext_length_aad(cipher, plaintext=_hex(inp, "pt"), **fields)
    return {"sealed": sealed.hex()}


def frame_open(inp: dict[str, Any]) -> dict[str, Any]:
    """Corpus whole-frame open (AAD Payload Length = ``len(sealed) - 16``)."""
    cipher, fields = _frame_cipher(inp)
    pt = open_plaintext_length_aad(cipher, sealed=_hex(inp, "sealed"), **fields)
    return {"pt": pt.hex()}


def profile_check(inp: dict[str, Any]) -> dict[str, Any]:
    """KEM acceptance per profile; Sovereign never accepts X25519MLKEM768."""
    profile = _profile(inp)
    kem_name = str(inp.get("kem", "")).lower()
    if kem_name not in _KEM_NAMES:
        raise Skipped(f"unknown kem: {kem_name!r}")
    if not check_profile_kem(profile, _KEM_NAMES[kem_name]):
        raise ValueError(f"{profile.name.title()} does not accept {inp.get('kem')}")
    return {"accept": True, "accepted": True}


#: Every implemented op, core first, then the Bridge ops.
OPS: dict[str, Op] = {
    "header.encode": header_encode,
    "header.decode": header_decode,
    "crc32c": crc32c_op,
    "tlv.decode": tlv_decode,
    "tlv.encode": tlv_encode,
    "aead.seal": aead_seal,
    "aead.open": aead_open,
    "hkdf.expand": hkdf_expand,
    "hkdf.expand_label": hkdf_expand_label,
    "keys.derive_traffic": keys_derive_traffic,
    "nonce.derive": nonce_derive,
    "frame.seal": frame_seal,
    "frame.open": frame_open,
    "profile.check": profile_check,
    **BRIDGE_OPS,
}


def handle(request: Any) -> dict[str, Any]:
    """Answer one decoded request with exactly one of ``out``/``error``/``skipped``."""
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        return {"error": "request must be an object with a string 'op'"}
    op_name: str = request["op"]
    inp = request.get("in") or {}
    op = OPS.get(op_name)
    if op is None:
        # The runner sends every group of its corpus; an op we do not implement is
        # "unimplemented" (skipped), never a rejection, which would fail its valid vectors.
        if op_name.endswith(".body.decode"):
            return {"skipped": f"native channel bodies are out of scope: {op_name}"}
        return {"skipped": f"op not implemented: {op_name}"}
    if not isinstance(inp, dict):
        return {"error": "'in' must be an object"}
    try:
        return {"out": op(inp)}
    except Skipped as exc:
        return {"skipped": str(exc)}
    except (NpampError, ValueError, TypeError, KeyError, OverflowError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer length-prefixed requests until ``stdin`` closes (or ends mid-message)."""
    while (prefix := _read_exact(stdin, _LEN.size)) is not None:
        body = _read_exact(stdin, _LEN.unpack(prefix)[0])
        if body is None:
            return
        try:
            response = handle(json.loads(body))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            response = {"error": f"bad request json: {exc}"}
        out = json.dumps(response, separators=(",", ":")).encode()
        stdout.write(_LEN.pack(len(out)) + out)
        stdout.flush()


def main() -> None:
    """Run the adapter on binary stdio."""
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
