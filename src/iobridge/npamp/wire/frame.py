"""N-PAMP frame header codec and stream frame reader (core draft §4, spec/02_frame_format.md).

A frame is a 36-octet header followed by ``Payload Length`` octets. For an encrypted frame
(ENC set) the payload region is ``ciphertext || tag`` and every TLV lives inside the
plaintext; for a cleartext frame it is the TLV octets themselves (digest §1.1).

Header layout, all integers big-endian::

    0-3   magic "NPAM"          4     version (high nibble, =2) | flags (low nibble)
    5-6   frame type            7-8   channel id
    9-16  sequence number u64   17-20 payload length u32
    21-24 CRC32C of octets 0-20 25-35 reserved, all zero

Decode order (draft §4.4 and the reference decoder): need 36 octets, then CRC32C *first*,
then magic, version, reserved octets, frame type 0x0000, channel 0xFFFF, payload-length cap.
Checking the CRC before any other field means a corrupted header is reported as such rather
than as whatever field the corruption happened to hit.

GREASE channels (0xF000-0xFFFE) decode normally; :attr:`Frame.grease` tells the association
to ignore them (draft §6.3: receivers MUST ignore, never reject, GREASE values).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum, IntFlag
from typing import NamedTuple

import google_crc32c

try:
    from iobridge.npamp import _speedups
except ImportError:  # pragma: no cover - the extension is optional; the reference path remains
    _speedups = None  # type: ignore[assignment]
from iobridge.npamp.errors import (
    BadMagic,
    CrcMismatch,
    ForbiddenChannel,
    ForbiddenFrameType,
    FrameDecodeError,
    FrameTooLarge,
    LocalProtocolError,
    PayloadTooLarge,
    ReservedNotZero,
    UnsupportedVersion,
)

__all__ = [
    "CRC_COVERED_SIZE",
    "DEFAULT_MAX_PAYLOAD_LENGTH",
    "GREASE_CHANNELS",
    "HEADER_PREFIX",
    "HEADER_SIZE",
    "HEADER_TAIL",
    "MAGIC",
    "MAX_PAYLOAD_FIELD",
    "MAX_SEQUENCE",
    "VERSION",
    "Channel",
    "Flags",
    "Frame",
    "FrameHeader",
    "FrameReader",
    "FrameType",
    "complete_header",
    "crc32c",
    "is_grease_channel",
    "pull_frame",
    "pull_frame_header",
    "pull_frame_header_reference",
    "pull_frame_reference",
    "push_frame",
    "push_frame_header",
    "push_header_prefix",
]

#: Frame magic, "NPAM" (draft §4.1).
MAGIC = b"NPAM"
#: Wire major version carried in the high nibble of octet 4; matches ALPN "n-pamp/2".
VERSION = 2
#: Fixed header size (draft §4.1).
HEADER_SIZE = 36
#: Octets 0-20: covered by the CRC32C and used verbatim as the AEAD AAD (draft §4.2, §7.3).
CRC_COVERED_SIZE = 21
#: Number of trailing reserved octets (draft §4.1).
RESERVED_SIZE = 11
#: Largest u64 sequence number (draft §4.1); never wrapped within one key epoch.
MAX_SEQUENCE = 2**64 - 1
#: Largest value of the u32 Payload Length field.
MAX_PAYLOAD_FIELD = 2**32 - 1
#: Default cap: whole frame <= 16 MiB, like the Go reference SDK (digest §1.5).
DEFAULT_MAX_PAYLOAD_LENGTH = 16 * 1024 * 1024 - HEADER_SIZE
#: GREASE channel ids that receivers ignore (draft §6.3, registries/channels.csv).
GREASE_CHANNELS = range(0xF000, 0xFFFF)
#: Channel id that must never appear on the wire (registries/channels.csv).
FORBIDDEN_CHANNEL_ID = 0xFFFF

#: Octets 0-20 (magic, version|flags, type, channel, seq, length): the CRC input and the AAD.
HEADER_PREFIX = struct.Struct(">4sBHHQI")
#: Octets 21-35 in one pack: the CRC32C of the prefix, then the 11 reserved zero octets.
HEADER_TAIL = struct.Struct(">I11x")
_PREFIX = HEADER_PREFIX
_TAIL = HEADER_TAIL
_HEADER = struct.Struct(">4sBHHQII11s")  # octets 0-35
_RESERVED = bytes(RESERVED_SIZE)
_new_tuple = tuple.__new__
# The compiled header decode: 8 % of a replay's instructions per event (docs/npamp.md).
_fast_header = None if _speedups is None else _speedups.pull_header
_fast_frame = None if _speedups is None else _speedups.pull_frame


class Flags(IntFlag):
    """Header flag bits (low nibble of octet 4, draft §4.3)."""

    NONE = 0
    #: Scheduling priority only.
    URG = 0x01
    #: The payload region is AEAD-sealed.
    ENC = 0x02
    #: Compressed (no algorithm is defined; never sent, rejected by the association).
    COMP = 0x04
    #: Fragment (no reassembly is defined; never sent, rejected by the association).
    FRAG = 0x08


class FrameType(IntEnum):
    """Frame types with a fixed meaning (registries/frame_types_reserved.csv, spec/10 §9)."""

    PING = 0x0001
    PONG = 0x0002
    CLOSE = 0x0003
    CLOSE_ACK = 0x0004
    ERROR = 0x0005
    KEY_UPDATE = 0x0006
    KEY_UPDATE_ACK = 0x0007
    PATH_CHALLENGE = 0x0008
    PATH_RESPONSE = 0x0009
    FLOW_UPDATE = 0x000A
    # Control channel only:
    CLIENT_HELLO = 0x0100
    SERVER_HELLO = 0x0101
    SERVER_AUTH = 0x0102
    CLIENT_AUTH = 0x0103
    MASTER_RATCHET = 0x0104
    MASTER_RATCHET_ACK = 0x0105
    REKEM = 0x0106
    REKEM_ACK = 0x0107
    HELLO = 0x0110
    HELLO_DONE = 0x0111


class Channel(IntEnum):
    """Core channel ids (registries/channels.csv)."""

    CONTROL = 0x0000
    MEMORY = 0x0001
    CAPABILITY = 0x0002
    IDENTITY = 0x0003
    GOVERNANCE = 0x0004
    IMMUNE = 0x0005
    FEDERATION = 0x0006
    SETTLEMENT = 0x0007
    COMPLIANCE = 0x0008
    SENSORY = 0x0009
    TELEMETRY = 0x000A
    AUDIT = 0x000B
    STREAM = 0x000C
    BRIDGE = 0x000D
    COMMERCE = 0x000E
    INTERACTION = 0x000F
    DISCOVERY = 0x0010
    WORKFLOW = 0x0011
    KNOWLEDGE = 0x0012
    SPATIAL = 0x0013


# Plain ints for the hot paths: IntFlag arithmetic costs about a microsecond per operation.
_ENC = int(Flags.ENC)
_URG = int(Flags.URG)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as used by the header (native implementation)."""
    return int(google_crc32c.value(bytes(data)))


def is_grease_channel(channel: int) -> bool:
    """Whether ``channel`` is in the GREASE range 0xF000-0xFFFE."""
    return 0xF000 <= channel <= 0xFFFE


class _HeaderFields(NamedTuple):
    frame_type: int
    channel: int
    seq: int
    payload_length: int
    flags: int
    version: int


class FrameHeader(_HeaderFields):
    """A decoded (or to-be-encoded) frame header: an immutable tuple of its fields.

    A tuple rather than a dataclass because one is built per frame received: construction
    costs a fifth of a frozen dataclass's. Building one by hand validates every width;
    :func:`pull_frame_header` builds them unchecked, from fields that ``struct`` already bounded.

    Attributes:
        frame_type: u16 frame type, interpreted per channel.
        channel: u16 channel id.
        seq: u64 sequence number, per (channel, direction, epoch).
        payload_length: Number of octets following the header.
        flags: Low-nibble flag bits (see :class:`Flags`), as a plain int.
        version: Wire version nibble (always 2 once decoded).
    """

    __slots__ = ()

    def __new__(
        cls,
        *,
        frame_type: int,
        channel: int,
        seq: int,
        payload_length: int,
        flags: int = 0,
        version: int = VERSION,
    ) -> FrameHeader:
        """Build a header, checking that every field fits its width.

        Raises:
            LocalProtocolError: A field does not fit; ``PayloadTooLarge`` above the u32 field.
        """
        if not 0 <= version <= 0xF or not 0 <= flags <= 0xF:
            raise LocalProtocolError("version and flags must each fit in a nibble")
        if not 0 <= frame_type <= 0xFFFF or not 0 <= channel <= 0xFFFF:
            raise LocalProtocolError("frame type and channel must fit in u16")
        if not 0 <= seq <= MAX_SEQUENCE:
            raise LocalProtocolError(f"sequence number {seq} does not fit in u64")
        if not 0 <= payload_length <= MAX_PAYLOAD_FIELD:
            raise PayloadTooLarge(f"payload length {payload_length} does not fit in u32")
        return _new_tuple(cls, (frame_type, channel, seq, payload_length, flags, version))

    @property
    def encrypted(self) -> bool:
        """Whether ENC is set."""
        return bool(self[4] & _ENC)

    @property
    def urgent(self) -> bool:
        """Whether URG is set."""
        return bool(self[4] & _URG)


class Frame(NamedTuple):
    """A whole frame as read from the wire: header plus raw payload region.

    Attributes:
        header: The validated header.
        payload: The payload region (ciphertext||tag when ENC is set).
    """

    header: FrameHeader
    payload: bytes

    @property
    def frame_type(self) -> int:
        """Shortcut for ``header.frame_type``."""
        return self[0][0]

    @property
    def channel(self) -> int:
        """Shortcut for ``header.channel``."""
        return self[0][1]

    @property
    def seq(self) -> int:
        """Shortcut for ``header.seq``."""
        return self[0][2]

    @property
    def grease(self) -> bool:
        """Whether the frame is on a GREASE channel and must be ignored."""
        return 0xF000 <= self[0][1] <= 0xFFFE


def push_header_prefix(
    flags: int, frame_type: int, channel: int, seq: int, payload_length: int, version: int = VERSION
) -> bytes:
    """Encode header octets 0-20 (the CRC input and the AEAD AAD).

    Raises:
        LocalProtocolError: A field does not fit its width.
    """
    try:
        return _PREFIX.pack(MAGIC, (version << 4) | flags, frame_type, channel, seq, payload_length)
    except struct.error as exc:
        raise LocalProtocolError(f"header field out of range: {exc}") from exc


def complete_header(prefix: bytes) -> bytes:
    """Append the CRC32C and the 11 reserved zero octets to header octets 0-20."""
    return prefix + _TAIL.pack(google_crc32c.value(prefix))


def push_frame_header(header: FrameHeader) -> bytes:
    """Encode a 36-octet header, computing the CRC32C."""
    h = header
    return complete_header(
        push_header_prefix(h.flags, h.frame_type, h.channel, h.seq, h.payload_length, h.version)
    )


def push_frame(frame_type: int, channel: int, seq: int, payload: bytes, flags: int = 0) -> bytes:
    """Encode a whole frame whose payload region is ``payload`` verbatim.

    Raises:
        LocalProtocolError: A field does not fit; ``PayloadTooLarge`` above the u32 field.
    """
    if len(payload) > MAX_PAYLOAD_FIELD:
        raise PayloadTooLarge(f"payload of {len(payload)} octets does not fit in u32")
    return complete_header(push_header_prefix(flags, frame_type, channel, seq, len(payload))) + (
        payload
    )


def pull_frame_header(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH,
) -> FrameHeader:
    """Decode and validate the 36-octet header at ``buf[offset:]``.

    A valid header is decoded by the compiled :mod:`iobridge.npamp._speedups` when it is
    installed; anything it does not accept goes to the reference decoder, which raises the
    precise error (the two are compared by a property test).

    Args:
        buf: Buffer holding at least the header.
        offset: Where the header starts.
        max_payload_length: Largest Payload Length accepted.

    Returns:
        The validated header.

    Raises:
        FrameDecodeError: Fewer than 36 octets available.
        CrcMismatch, BadMagic, UnsupportedVersion, ReservedNotZero, ForbiddenFrameType,
        ForbiddenChannel, FrameTooLarge: The matching MUST-reject rule, checked in this order.
    """
    if _fast_header is not None:
        header = _fast_header(FrameHeader, buf, offset, max_payload_length)
        if header is not None:
            return header
    return pull_frame_header_reference(buf, offset, max_payload_length=max_payload_length)


def pull_frame_header_reference(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH,
) -> FrameHeader:
    """The pure-Python :func:`pull_frame_header` (same contract; the reference)."""
    if len(buf) - offset < HEADER_SIZE:
        raise FrameDecodeError(f"header truncated: {len(buf) - offset} of 36 octets")
    magic, verflags, frame_type, channel, seq, length, crc, reserved = _HEADER.unpack_from(
        buf, offset
    )
    covered = buf[offset : offset + CRC_COVERED_SIZE]
    computed = google_crc32c.value(covered if type(covered) is bytes else bytes(covered))
    if computed != crc:
        raise CrcMismatch(f"header CRC32C 0x{crc:08x} != computed 0x{computed:08x}")
    if magic != MAGIC:
        raise BadMagic(f"bad magic {magic!r}")
    if verflags >> 4 != VERSION:
        raise UnsupportedVersion(f"unsupported wire version {verflags >> 4}")
    if reserved != _RESERVED:
        raise ReservedNotZero("reserved header octets 25-35 are not all zero")
    if frame_type == 0:
        raise ForbiddenFrameType("frame type 0x0000 must not be used")
    if channel == FORBIDDEN_CHANNEL_ID:
        raise ForbiddenChannel("channel 0xFFFF must not appear on the wire")
    if length > max_payload_length:
        raise FrameTooLarge(f"payload length {length} exceeds cap {max_payload_length}")
    # Unchecked construction: struct already bounded every field to its width.
    return _new_tuple(FrameHeader, (frame_type, channel, seq, length, verflags & 0x0F, VERSION))


def pull_frame(buf: bytes, *, max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH) -> Frame:
    """Decode exactly one whole frame; Payload Length must equal the octets after the header.

    Like :func:`pull_frame_header`, a valid frame is decoded by the compiled module when it is
    installed, anything else by :func:`pull_frame_reference`, which raises the precise error.

    Raises:
        FrameDecodeError: Any header rule, or a length mismatch.
    """
    if _fast_frame is not None:
        frame = _fast_frame(Frame, FrameHeader, buf, max_payload_length)
        if frame is not None:
            return frame
    return pull_frame_reference(buf, max_payload_length=max_payload_length)


def pull_frame_reference(
    buf: bytes, *, max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH
) -> Frame:
    """The pure-Python :func:`pull_frame` (same contract; the reference)."""
    header = pull_frame_header_reference(buf, max_payload_length=max_payload_length)
    if header.payload_length != len(buf) - HEADER_SIZE:
        raise FrameDecodeError(
            f"payload length {header.payload_length} != {len(buf) - HEADER_SIZE} octets present"
        )
    payload = buf[HEADER_SIZE:]  # one copy (slicing bytes already gives bytes)
    return _new_tuple(Frame, (header, payload if type(payload) is bytes else bytes(payload)))


class FrameReader:
    """Receive buffer that turns a byte stream (any chunking) into whole frames.

    Frames are written back to back over TCP+TLS with no extra length prefix (digest §2.8).
    The header is validated as soon as its 36 octets arrive, so the buffered incomplete input
    never exceeds one header plus ``max_payload_length``. After a decode error the reader is
    poisoned: every later call raises the same error, since the stream has lost framing.
    """

    def __init__(self, *, max_payload_length: int = DEFAULT_MAX_PAYLOAD_LENGTH) -> None:
        """Create an empty reader.

        Args:
            max_payload_length: Largest Payload Length accepted (default 16 MiB - 36).
        """
        self._max = max_payload_length
        self._buf = bytearray()
        self._pos = 0
        self._header: FrameHeader | None = None
        self._error: FrameDecodeError | None = None

    @property
    def buffered(self) -> int:
        """Number of received octets not yet returned as frames."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes) -> None:
        """Append received octets (no parsing happens here)."""
        if self._error is not None:
            raise self._error
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, or ``None`` if more data is needed.

        Raises:
            FrameDecodeError: The stream violates a header rule (reader is then poisoned).
        """
        if self._error is not None:
            raise self._error
        if self._header is None:
            if len(self._buf) - self._pos < HEADER_SIZE:
                return None
            try:
                self._header = pull_frame_header(self._buf, self._pos, max_payload_length=self._max)
            except FrameDecodeError as exc:
                self._error = exc
                raise
        start = self._pos + HEADER_SIZE
        end = start + self._header.payload_length
        if len(self._buf) < end:
            return None
        with memoryview(self._buf) as view:  # one copy out of the buffer, not two
            payload = bytes(view[start:end])
        frame = _new_tuple(Frame, (self._header, payload))
        self._header = None
        self._pos = end
        return frame

    def feed(self, data: bytes) -> list[Frame]:
        """Append ``data`` and return every frame that is now complete.

        Frames that precede a malformed one are returned first; the error is then raised by
        the next call (the reader is poisoned), so no complete frame is ever lost.

        Raises:
            FrameDecodeError: The first frame now available is malformed.
        """
        self.receive_data(data)
        frames: list[Frame] = []
        try:
            while (frame := self.next_frame()) is not None:
                frames.append(frame)
        except FrameDecodeError:
            if not frames:
                raise
        return frames

    def __iter__(self) -> Iterator[Frame]:
        """Yield complete frames until more data is needed."""
        while (frame := self.next_frame()) is not None:
            yield frame
