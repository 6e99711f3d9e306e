"""NPAMP-DISC protocol Discovery Record (§5, §5.1) for advertising AG-UI carriage.

Optional (MAP-AGUI §7): a peer MAY announce, on the Discovery channel ``0x0010``, that it
carries AG-UI. Only advertise it to a peer that agreed out of band on the experimental
protocol_id (NPAMP-REG §7.1), and never advertise what the Bridge would then refuse.

Discovery payloads are deterministic CBOR maps with unsigned-integer keys (RFC 8949 §4.2:
shortest-form heads, definite lengths, keys sorted by encoded form). This module carries the
small subset a record needs (uint, byte/text string, array, map). NPAMP-REG assigns no numeric
carriage-class codes; :data:`CARRIAGE_CLASS_STREAM` = 4 follows the NPAMP-REG §5 table order
and is a local, non-interoperable choice (digest §10.18).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from iobridge.npamp.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "CARRIAGE_CLASS_STREAM",
    "DISCOVERY_CHANNEL",
    "DiscoErrorCode",
    "DiscoveryMalformed",
    "ProtocolRecord",
    "agui_record",
    "pull_protocol_record",
    "push_protocol_record",
]

#: The Discovery channel (core channel registry).
DISCOVERY_CHANNEL = 0x0010
#: Local numbering of the STREAM carriage class (see the module docstring).
CARRIAGE_CLASS_STREAM = 4
_KIND_PROTOCOL = 1

CborValue = int | bytes | str | list["CborValue"] | dict[int, "CborValue"]


class DiscoErrorCode(IntEnum):
    """DISCO_ERROR codes (NPAMP-DISC §9)."""

    MALFORMED_PAYLOAD = 1
    KIND_MISMATCH = 2
    UNKNOWN_RECORD_KIND = 3
    FILTER_UNSUPPORTED = 4
    STALE_CURSOR = 5
    SUBSCRIPTION_REFUSED = 6
    NOT_ADVERTISED = 7


class DiscoveryMalformed(RemoteProtocolError):
    """A Discovery payload is not the deterministic CBOR a record requires."""

    disco_code: ClassVar[DiscoErrorCode] = DiscoErrorCode.MALFORMED_PAYLOAD


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolRecord:
    """A Discovery Record of kind 1 (protocol), NPAMP-DISC §5 and §5.1."""

    #: Stable id of the record among the peer's advertisements (1-32 octets).
    record_id: bytes
    #: Strictly greater replaces an earlier advertisement of ``record_id``.
    revision: int
    #: The BridgeEnvelope protocol_id advertised.
    protocol_id: int
    #: The carriage class (local numbering, see the module docstring).
    carriage_class: int
    #: Channels carrying it; ``None`` means the Bridge channel default.
    channels: tuple[int, ...] | None = None
    #: Accepted content_type values.
    content_types: tuple[int, ...] | None = None
    #: Foreign operation names.
    methods: tuple[str, ...] | None = None
    #: Advisory human-readable name.
    label: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.record_id) <= 32:
            raise LocalProtocolError("record_id must be 1-32 octets")
        if not 0 <= self.protocol_id <= 0xFF:
            raise LocalProtocolError("protocol_id must fit in u8")
        if self.revision < 0 or self.carriage_class < 0:
            raise LocalProtocolError("revision and carriage_class are unsigned")


def agui_record(protocol_id: int, *, revision: int = 1) -> ProtocolRecord:
    """The AG-UI advertisement: STREAM class, Bridge channel, JSON, method ``run``."""
    return ProtocolRecord(
        record_id=b"agui",
        revision=revision,
        protocol_id=protocol_id,
        carriage_class=CARRIAGE_CLASS_STREAM,
        channels=(0x000D,),
        content_types=(0x01,),
        methods=("run",),
    )


# --- deterministic CBOR subset -------------------------------------------------------------


def _head(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes(((major << 5) | arg,))
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if arg < 1 << (8 * size):
            return bytes(((major << 5) | info,)) + arg.to_bytes(size, "big")
    raise LocalProtocolError("CBOR argument does not fit in 64 bits")


def _push(value: CborValue) -> bytes:
    if isinstance(value, bool):
        raise LocalProtocolError("booleans are not used in Discovery records")
    if isinstance(value, int):
        if value < 0:
            raise LocalProtocolError("negative integers are not used in Discovery records")
        return _head(0, value)
    if isinstance(value, bytes):
        return _head(2, len(value)) + value
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(value, list):
        return _head(4, len(value)) + b"".join(_push(v) for v in value)
    items = sorted((_push(k), _push(v)) for k, v in value.items())
    return _head(5, len(items)) + b"".join(k + v for k, v in items)


def _pull(buf: bytes, pos: int) -> tuple[CborValue, int]:
    if pos >= len(buf):
        raise DiscoveryMalformed("CBOR truncated")
    major, info = buf[pos] >> 5, buf[pos] & 0x1F
    pos += 1
    if info < 24:
        arg = info
    elif info <= 27:
        size = 1 << (info - 24)
        if pos + size > len(buf):
            raise DiscoveryMalformed("CBOR head truncated")
        arg = int.from_bytes(buf[pos : pos + size], "big")
        if arg < (24 if size == 1 else 1 << (4 * size)):
            raise DiscoveryMalformed("CBOR integer not in shortest form")
        pos += size
    else:
        raise DiscoveryMalformed("indefinite lengths and reserved heads are not deterministic")
    if major == 0:
        return arg, pos
    if major in (2, 3):
        if pos + arg > len(buf):
            raise DiscoveryMalformed("CBOR string truncated")
        raw = buf[pos : pos + arg]
        if major == 2:
            return bytes(raw), pos + arg
        try:
            return raw.decode("utf-8"), pos + arg
        except UnicodeDecodeError as exc:
            raise DiscoveryMalformed("CBOR text is not UTF-8") from exc
    if major == 4:
        items: list[CborValue] = []
        for _ in range(arg):
            if pos >= len(buf):
                raise DiscoveryMalformed("CBOR array truncated")
            item, pos = _pull(buf, pos)
            items.append(item)
        return items, pos
    if major == 5:
        out: dict[int, CborValue] = {}
        last = b""
        for _ in range(arg):
            start = pos
            key, pos = _pull(buf, pos)
            if not isinstance(key, int):
                raise DiscoveryMalformed("Discovery map keys are unsigned integers")
            if buf[start:pos] <= last and last:
                raise DiscoveryMalformed("CBOR map keys not in deterministic order")
            last = buf[start:pos]
            out[key], pos = _pull(buf, pos)
        return out, pos
    # major 1 (negative int) as a key is handled by the caller's rules; as a value, unused
    raise DiscoveryMalformed(f"CBOR major type {major} is not used in Discovery records")


def _uint_list(value: CborValue, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise DiscoveryMalformed(f"{what} must be an array of unsigned integers")
    return tuple(v for v in value if isinstance(v, int))


# --- the record ----------------------------------------------------------------------------


def push_protocol_record(record: ProtocolRecord) -> bytes:
    """Encode a protocol Discovery Record as deterministic CBOR."""
    body: dict[int, CborValue] = {0: record.protocol_id, 1: record.carriage_class}
    if record.channels is not None:
        body[2] = list(record.channels)
    if record.content_types is not None:
        body[3] = list(record.content_types)
    if record.methods is not None:
        body[4] = list(record.methods)
    outer: dict[int, CborValue] = {
        0: record.record_id,
        1: _KIND_PROTOCOL,
        2: record.revision,
        4: body,
    }
    if record.label is not None:
        outer[3] = record.label
    return _push(outer)


def pull_protocol_record(raw: bytes) -> ProtocolRecord:
    """Decode a protocol Discovery Record; unknown non-negative keys are ignored (§4.1).

    Raises:
        DiscoveryMalformed: Not deterministic CBOR, a required key missing or mistyped, or
            a record of another kind.
    """
    value, end = _pull(raw, 0)
    if end != len(raw):
        raise DiscoveryMalformed("octets after the CBOR record")
    if not isinstance(value, dict):
        raise DiscoveryMalformed("a record is a CBOR map")
    record_id, kind, revision, body = value.get(0), value.get(1), value.get(2), value.get(4)
    if not isinstance(record_id, bytes) or not 1 <= len(record_id) <= 32:
        raise DiscoveryMalformed("record_id must be a 1-32 octet byte string")
    if kind != _KIND_PROTOCOL:
        raise DiscoveryMalformed(f"record kind {kind!r} is not a protocol record")
    if not isinstance(revision, int) or not isinstance(body, dict):
        raise DiscoveryMalformed("revision and body are required")
    label = value.get(3)
    if label is not None and not isinstance(label, str):
        raise DiscoveryMalformed("label must be text")
    protocol_id, carriage = body.get(0), body.get(1)
    if not isinstance(protocol_id, int) or protocol_id > 0xFF or not isinstance(carriage, int):
        raise DiscoveryMalformed("protocol_id (0-255) and carriage_class are required")
    methods = body.get(4)
    if methods is not None and (
        not isinstance(methods, list) or not all(isinstance(m, str) for m in methods)
    ):
        raise DiscoveryMalformed("methods must be an array of text strings")
    return ProtocolRecord(
        record_id=record_id,
        revision=revision,
        protocol_id=protocol_id,
        carriage_class=carriage,
        channels=None if 2 not in body else _uint_list(body[2], "channels"),
        content_types=None if 3 not in body else _uint_list(body[3], "content_types"),
        methods=None if methods is None else tuple(m for m in methods if isinstance(m, str)),
        label=label,
    )
