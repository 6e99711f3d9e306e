"""Wire codecs: the 36-octet frame header with its CRC32C, and TLVs (core draft §4).

Pure functions and frozen values; nothing here holds keys or state across frames.
"""

from iobridge.npamp.wire.frame import (
    HEADER_SIZE,
    Channel,
    Flags,
    Frame,
    FrameHeader,
    FrameReader,
    FrameType,
    crc32c,
    pull_frame,
    pull_frame_header,
    push_frame,
    push_frame_header,
)
from iobridge.npamp.wire.tlv import Tlv, TlvType, pull_tlv, pull_tlvs, push_tlv, push_tlvs

__all__ = [
    "HEADER_SIZE",
    "Channel",
    "Flags",
    "Frame",
    "FrameHeader",
    "FrameReader",
    "FrameType",
    "Tlv",
    "TlvType",
    "crc32c",
    "pull_frame",
    "pull_frame_header",
    "pull_tlv",
    "pull_tlvs",
    "push_frame",
    "push_frame_header",
    "push_tlv",
    "push_tlvs",
]
