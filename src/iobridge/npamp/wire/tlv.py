"""Generic N-PAMP TLV codec (core draft §5, spec/07_tlv_registry.md).

Wire form: ``Type u16 BE || Length u16 BE || Value (Length octets)``, Length 0-65535.

The critical-bit rule (spec/07): a receiver that does not know a TLV type rejects the whole
frame when the type has bit ``0x8000`` set and silently skips it otherwise. What a receiver
"knows" depends on the frame it is parsing, so :func:`pull_tlvs` takes the known set as an
argument instead of consulting a global registry. Encoding a high-bit type is legal.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from iobridge.npamp.errors import LocalProtocolError, TlvDecodeError, UnknownCriticalTlv

__all__ = [
    "CRITICAL_BIT",
    "MAX_TLV_LENGTH",
    "TLV_HEADER_SIZE",
    "Tlv",
    "TlvType",
    "pull_tlv",
    "pull_tlvs",
    "push_tlv",
    "push_tlvs",
]

#: Type bit marking a TLV that receivers must understand (spec/07 §2).
CRITICAL_BIT = 0x8000
#: Largest Length a TLV can carry (u16 field).
MAX_TLV_LENGTH = 0xFFFF
#: Type (2) + Length (2).
TLV_HEADER_SIZE = 4

_TL = struct.Struct(">HH")


class TlvType(IntEnum):
    """Core TLV tags (registries/tlv_tags.csv) plus the companion tags we use."""

    PROFILE_OFFER = 0x0001
    PROFILE_SELECT = 0x0002
    KEM_OFFER = 0x0003
    KEM_SELECT = 0x0004
    SIG_OFFER = 0x0005
    SIG_SELECT = 0x0006
    KEM_SHARE = 0x0007
    KEM_CIPHERTEXT = 0x0008
    IDENTITY_KEY = 0x0009
    CERT_VERIFY = 0x000A
    FINISHED = 0x000B
    AEAD_OFFER = 0x000C
    AEAD_SELECT = 0x000D
    #: NPAMP-BRIDGE envelope (companion).
    BRIDGE_ENVELOPE = 0x0010
    #: NPAMP-CC-STREAM stream control (companion, provisional).
    STREAM_CONTROL = 0x0011
    ANOMALY_CHARGE = 0x0012
    #: NPAMP-BRIDGE safety label (companion).
    SAFETY_LABEL = 0x0013
    PATH_CHALLENGE = 0x0015
    PATH_RESPONSE = 0x0016
    #: 8-octet BE epoch carried by KEY_UPDATE / KEY_UPDATE_ACK (core draft §9.4).
    KEY_UPDATE_MARKER = 0x0017
    PROTECTION_MODE = 0x0018
    #: 8-octet BE master-ratchet generation (spec/10 §9).
    RATCHET_GENERATION = 0x0019


@dataclass(frozen=True, slots=True)
class Tlv:
    """One decoded TLV.

    Attributes:
        type: The u16 type code.
        value: The value octets (``len(value)`` is the Length field).
    """

    type: int
    value: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.type <= 0xFFFF:
            raise LocalProtocolError(f"TLV type {self.type!r} does not fit in u16")
        if len(self.value) > MAX_TLV_LENGTH:
            raise LocalProtocolError(f"TLV value of {len(self.value)} octets exceeds 65535")

    @property
    def critical(self) -> bool:
        """Whether the critical bit 0x8000 is set."""
        return bool(self.type & CRITICAL_BIT)


def push_tlv(tlv_type: int, value: bytes) -> bytes:
    """Encode one TLV.

    Raises:
        LocalProtocolError: The type is not a u16 or the value is longer than 65535 octets.
    """
    if not 0 <= tlv_type <= 0xFFFF:
        raise LocalProtocolError(f"TLV type {tlv_type!r} does not fit in u16")
    if len(value) > MAX_TLV_LENGTH:
        raise LocalProtocolError(f"TLV value of {len(value)} octets exceeds 65535")
    return _TL.pack(tlv_type, len(value)) + bytes(value)


def push_tlvs(tlvs: Iterable[Tlv]) -> bytes:
    """Encode a sequence of TLVs back to back, in order."""
    return b"".join(push_tlv(t.type, t.value) for t in tlvs)


def pull_tlv(buf: bytes) -> Tlv:
    """Decode exactly one TLV; its Length must cover all remaining octets.

    Raises:
        TlvDecodeError: Fewer than 4 octets, or Length differs from the remaining octets.
    """
    if len(buf) < TLV_HEADER_SIZE:
        raise TlvDecodeError(f"TLV truncated: {len(buf)} octets, need at least 4")
    tlv_type, length = _TL.unpack_from(buf, 0)
    if length != len(buf) - TLV_HEADER_SIZE:
        raise TlvDecodeError(
            f"TLV 0x{tlv_type:04x} Length {length} != {len(buf) - TLV_HEADER_SIZE} remaining"
        )
    return Tlv(tlv_type, bytes(buf[TLV_HEADER_SIZE:]))


def pull_tlvs(buf: bytes, known: frozenset[int] | None = None) -> list[Tlv]:
    """Decode a concatenation of TLVs that fills ``buf`` exactly.

    Args:
        buf: The octets to decode.
        known: The types this frame may carry. Unknown types are skipped, or rejected when
            they carry the critical bit. ``None`` returns every TLV without filtering.

    Returns:
        The TLVs in wire order (unknown non-critical ones omitted).

    Raises:
        TlvDecodeError: A TLV is truncated.
        UnknownCriticalTlv: An unknown type has the critical bit set.
    """
    view = memoryview(buf)
    out: list[Tlv] = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < TLV_HEADER_SIZE:
            raise TlvDecodeError(f"TLV header truncated at offset {pos}")
        tlv_type, length = _TL.unpack_from(view, pos)
        start = pos + TLV_HEADER_SIZE
        if length > end - start:
            raise TlvDecodeError(
                f"TLV 0x{tlv_type:04x} at offset {pos}: Length {length} > {end - start} left"
            )
        pos = start + length
        if known is not None and tlv_type not in known:
            if tlv_type & CRITICAL_BIT:
                raise UnknownCriticalTlv(f"unknown critical TLV type 0x{tlv_type:04x}")
            continue
        out.append(Tlv(tlv_type, bytes(view[start:pos])))
    return out
