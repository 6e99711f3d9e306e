"""The N-PAMP handshake transcript (spec/10 §3).

The transcript is a running byte buffer. A frame contributes its 2-octet big-endian frame type
and then each of its TLVs in canonical ``Type(2) || Length(2) || Value`` form; nothing else from
the 36-octet header (magic, flags, channel, seq, length, CRC) and no AEAD tag is absorbed. A
transcript point is ``H`` over everything absorbed so far. Granularity is per TLV, which lets the
bundled AUTH frame be cut at sub-frame boundaries:

========  ============================================================  ======================
Point     Absorbed through                                              Used by
========  ============================================================  ======================
TH_kem    ``0x0100 || CH TLVs || 0x0101 || SH TLVs``                    c_hs / s_hs
TH_sId    ``... || 0x0102 || server IdentityKey``                       server CertVerify
TH_sCV    ``... || server CertVerify``                                  server Finished
TH_cId    ``... || server Finished || 0x0103 || client IdentityKey``    client CertVerify
TH_cCV    ``... || client CertVerify``                                  client Finished, master
========  ============================================================  ======================

This deliberately differs from RFC 8446 §4.4.1, which hashes whole messages with their headers.
"""

from __future__ import annotations

import hashlib

from iobridge.npamp.record.keyschedule import HashName

__all__ = ["Transcript"]


class Transcript:
    """Running transcript for one handshake; :meth:`digest` yields the current point.

    The hash ``H`` depends on the profile, which is only known once SERVER_HELLO has been
    built or read, while CLIENT_HELLO must already be absorbed. Octets are therefore buffered
    until :meth:`set_hash` is called and hashed incrementally afterwards.
    """

    __slots__ = ("_hash", "_pending")

    def __init__(self, hash_name: HashName | None = None) -> None:
        """Start an empty transcript, optionally with the profile hash ``H`` already fixed."""
        self._pending = bytearray()
        self._hash: hashlib._Hash | None = None
        if hash_name is not None:
            self.set_hash(hash_name)

    def set_hash(self, hash_name: HashName) -> None:
        """Fix ``H`` and absorb everything buffered so far.

        Raises:
            ValueError: ``H`` was already fixed.
        """
        if self._hash is not None:
            raise ValueError("transcript hash already fixed")
        self._hash = hashlib.new(hash_name, self._pending)
        self._pending.clear()

    def _update(self, data: bytes) -> None:
        if self._hash is None:
            self._pending += data
        else:
            self._hash.update(data)

    def add_frame_type(self, frame_type: int) -> None:
        """Absorb the 2-octet big-endian frame type (AddFrameType)."""
        self._update(frame_type.to_bytes(2, "big"))

    def add_tlv(self, tlv_type: int, value: bytes) -> None:
        """Absorb one TLV in canonical form (AddTLV)."""
        self._update(tlv_type.to_bytes(2, "big") + len(value).to_bytes(2, "big") + value)

    def absorb(self, data: bytes) -> None:
        """Absorb octets that are already canonical: frame types and whole encoded TLVs, in
        transcript order (one update for what :meth:`add_frame_type` and :meth:`add_tlv` would
        absorb piece by piece)."""
        if self._hash is None:
            self._pending += data
        else:
            self._hash.update(data)

    def digest(self) -> bytes:
        """Return ``H`` over everything absorbed so far, leaving the running state intact.

        Raises:
            ValueError: ``H`` is not fixed yet.
        """
        if self._hash is None:
            raise ValueError("transcript hash not fixed yet")
        return self._hash.copy().digest()
