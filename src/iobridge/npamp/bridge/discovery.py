"""NPAMP-DISC on the Discovery channel ``0x0010``: the protocol record, queries and their answers.

Optional (MAP-AGUI §7): a peer MAY advertise, on the Discovery channel ``0x0010``, that it
carries AG-UI. Only advertise it to a peer that agreed out of band on the experimental
protocol_id (NPAMP-REG §7.1), and never advertise what the Bridge would then refuse.

:class:`DiscoveryResponder` is the sans-IO answering side: fed each Discovery frame, it returns
the frames to send back. A DISCO_QUERY gets a DISCO_RESULT (§6.2) with the records that pass
its filter (§6.1: conjunctive ``kinds``, ``protocol_ids``; ``name_prefix`` restricts only tool
and agent records, so a protocol record passes it); we never paginate, so any ``cursor`` is
stale (§6.2). A DISCO_SUBSCRIBE is refused (``SubscriptionRefused``, §7.2); announcements,
replies, updates and unsubscribes are never answered (§7). A malformed query is answered with
DISCO_ERROR echoing its ``corr`` when one can be read (§4.1, §9), else dropped: a DISCO_ERROR
must echo a non-empty ``corr`` (§4.2).

Discovery payloads are deterministic CBOR maps with unsigned-integer keys (RFC 8949 §4.2:
shortest-form heads, definite lengths, keys sorted by encoded form). This module carries the
small subset a record needs (uint, byte/text string, array, map). NPAMP-REG assigns no numeric
carriage-class codes; :data:`CARRIAGE_CLASS_STREAM` = 4 follows the NPAMP-REG §5 table order
and is a local, non-interoperable choice (digest §10.18).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from iobridge.npamp.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "CARRIAGE_CLASS_STREAM",
    "DEFAULT_MAX_QUERY_SIZE",
    "DISCOVERY_CHANNEL",
    "DiscoErrorCode",
    "DiscoFrameType",
    "DiscoKindMismatch",
    "DiscoveryMalformed",
    "DiscoveryQuery",
    "DiscoveryResponder",
    "ProtocolRecord",
    "agui_record",
    "pull_disco_query",
    "pull_protocol_record",
    "push_disco_announce",
    "push_disco_error",
    "push_disco_query",
    "push_disco_result",
    "push_protocol_record",
]

#: The Discovery channel (core channel registry).
DISCOVERY_CHANNEL = 0x0010
#: Local numbering of the STREAM carriage class (see the module docstring).
CARRIAGE_CLASS_STREAM = 4
_KIND_PROTOCOL = 1
#: Largest DISCO_QUERY payload answered: a query is a handful of filter fields (§10: bound
#: what a peer can make us parse).
DEFAULT_MAX_QUERY_SIZE = 4096
#: Deepest CBOR nesting accepted (a record is three levels deep); bounds the recursion.
_MAX_DEPTH = 8

CborValue = bool | int | bytes | str | list["CborValue"] | dict[int, "CborValue"]


class DiscoFrameType(IntEnum):
    """Discovery-channel frame types (NPAMP-DISC §3)."""

    DISCO_QUERY = 0x0100
    DISCO_RESULT = 0x0101
    DISCO_ERROR = 0x0102
    DISCO_ANNOUNCE = 0x0103
    DISCO_SUBSCRIBE = 0x0104
    DISCO_UPDATE = 0x0105
    DISCO_UNSUBSCRIBE = 0x0106


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
    """A Discovery payload is not the deterministic CBOR a record requires.

    Attributes:
        corr: The payload's ``corr``, when it could be read (to echo in the DISCO_ERROR).
    """

    disco_code: ClassVar[DiscoErrorCode] = DiscoErrorCode.MALFORMED_PAYLOAD

    def __init__(self, message: str = "", *, corr: bytes | None = None) -> None:
        super().__init__(message)
        self.corr = corr


class DiscoKindMismatch(DiscoveryMalformed):
    """``frame_kind`` contradicts the frame header's type (NPAMP-DISC §4.2)."""

    disco_code = DiscoErrorCode.KIND_MISMATCH


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveryQuery:
    """A decoded DISCO_QUERY (NPAMP-DISC §6.1); ``None`` means the filter field is absent."""

    #: Correlation id, 1-64 octets, echoed by the answer.
    corr: bytes
    #: Record kinds wanted.
    kinds: tuple[int, ...] | None = None
    #: protocol_ids wanted (protocol, tool and agent records).
    protocol_ids: tuple[int, ...] | None = None
    #: Name prefix of tool and agent records.
    name_prefix: str | None = None
    #: Return what can be represented instead of failing (§6.3).
    tolerant: bool = False
    #: Continuation token of a paginated result (§6.2).
    cursor: bytes | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.corr) <= 64:
            raise LocalProtocolError("corr must be 1-64 octets")


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
        return b"\xf5" if value else b"\xf4"
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


def _pull(buf: bytes, pos: int, depth: int = 0) -> tuple[CborValue, int]:
    if pos >= len(buf):
        raise DiscoveryMalformed("CBOR truncated")
    if depth > _MAX_DEPTH:
        raise DiscoveryMalformed(f"CBOR nested deeper than {_MAX_DEPTH} levels")
    major, info = buf[pos] >> 5, buf[pos] & 0x1F
    pos += 1
    if major == 7:
        if info in (20, 21):
            return info == 21, pos
        raise DiscoveryMalformed("the only CBOR simple values used are false and true")
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
            item, pos = _pull(buf, pos, depth + 1)
            items.append(item)
        return items, pos
    if major == 5:
        return _pull_map(buf, pos, arg, depth)
    # major 1 (negative int) as a key is handled by the caller's rules; as a value, unused
    raise DiscoveryMalformed(f"CBOR major type {major} is not used in Discovery records")


def _pull_map(buf: bytes, pos: int, count: int, depth: int) -> tuple[CborValue, int]:
    out: dict[int, CborValue] = {}
    last = b""
    try:
        for _ in range(count):
            start = pos
            if pos < len(buf) and buf[pos] >> 5 == 1:
                raise DiscoveryMalformed("a negative map key is forward-incompatible (§4.1)")
            key, pos = _pull(buf, pos, depth + 1)
            if not isinstance(key, int) or isinstance(key, bool):
                raise DiscoveryMalformed("Discovery map keys are unsigned integers")
            if buf[start:pos] <= last and last:
                raise DiscoveryMalformed("CBOR map keys not in deterministic order")
            last = buf[start:pos]
            out[key], pos = _pull(buf, pos, depth + 1)
    except DiscoveryMalformed as exc:
        corr = out.get(1)
        if depth == 0 and exc.corr is None and isinstance(corr, bytes) and 1 <= len(corr) <= 64:
            exc.corr = corr  # read before the fault: the DISCO_ERROR can still correlate
        raise
    return out, pos


def _uint_list(value: CborValue, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
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


# --- query, result, error, announce (§6, §7.1, §9) -----------------------------------------


def push_disco_query(query: DiscoveryQuery) -> bytes:
    """Encode a DISCO_QUERY payload (the requesting side; tests and clients)."""
    fields: dict[int, CborValue] = {0: DiscoFrameType.DISCO_QUERY.value, 1: query.corr}
    if query.kinds is not None:
        fields[2] = list(query.kinds)
    if query.protocol_ids is not None:
        fields[3] = list(query.protocol_ids)
    if query.name_prefix is not None:
        fields[4] = query.name_prefix
    if query.tolerant:
        fields[5] = True
    if query.cursor is not None:
        fields[6] = query.cursor
    return _push(fields)


def pull_disco_query(
    payload: bytes, frame_type: int = DiscoFrameType.DISCO_QUERY
) -> DiscoveryQuery:
    """Decode a DISCO_QUERY (or, with ``frame_type``, the filter of a DISCO_SUBSCRIBE).

    Raises:
        DiscoveryMalformed: Not one deterministic-CBOR map, a required key absent or of the
            wrong type, or a negative key (§4.1); ``corr`` is attached when it was read.
        DiscoKindMismatch: ``frame_kind`` contradicts ``frame_type`` (§4.2).
    """
    value, end = _pull(payload, 0)
    if not isinstance(value, dict):
        raise DiscoveryMalformed("a Discovery payload is a CBOR map")
    corr = value.get(1)
    known = corr if isinstance(corr, bytes) and 1 <= len(corr) <= 64 else None
    if end != len(payload):
        raise DiscoveryMalformed("octets after the CBOR map", corr=known)
    kind = value.get(0)
    if not isinstance(kind, int) or isinstance(kind, bool):
        raise DiscoveryMalformed("frame_kind (0) is required", corr=known)
    if kind != frame_type:
        raise DiscoKindMismatch(
            f"frame_kind 0x{kind:04x} contradicts frame type 0x{frame_type:04x}", corr=known
        )
    if known is None:
        raise DiscoveryMalformed("corr (1) must be a 1-64 octet byte string")
    try:
        kinds = None if 2 not in value else _uint_list(value[2], "kinds")
        ids = None if 3 not in value else _uint_list(value[3], "protocol_ids")
    except DiscoveryMalformed as exc:
        exc.corr = known
        raise
    prefix, tolerant, cursor = value.get(4), value.get(5, False), value.get(6)
    if prefix is not None and not isinstance(prefix, str):
        raise DiscoveryMalformed("name_prefix (4) must be text", corr=known)
    if not isinstance(tolerant, bool):
        raise DiscoveryMalformed("tolerant (5) must be a boolean", corr=known)
    if cursor is not None and not isinstance(cursor, bytes):
        raise DiscoveryMalformed("cursor (6) must be a byte string", corr=known)
    return DiscoveryQuery(
        corr=known,
        kinds=kinds,
        protocol_ids=ids,
        name_prefix=prefix,
        tolerant=tolerant,
        cursor=cursor,
    )


def _records_array(records: Sequence[ProtocolRecord]) -> bytes:
    """A CBOR array of records, each encoded once by :func:`push_protocol_record`."""
    return _head(4, len(records)) + b"".join(push_protocol_record(r) for r in records)


def push_disco_result(corr: bytes, records: Sequence[ProtocolRecord]) -> bytes:
    """A complete DISCO_RESULT ``{0: 0x0101, 1: corr, 2: [records], 3: true}`` (§6.2)."""
    return (
        b"\xa4\x00\x19\x01\x01\x01" + _push(corr) + b"\x02" + _records_array(records) + b"\x03\xf5"
    )


def push_disco_error(corr: bytes, code: DiscoErrorCode, reason: str = "") -> bytes:
    """A DISCO_ERROR ``{0: 0x0102, 1: corr, 2: code, 3: reason}`` (§9)."""
    fields: dict[int, CborValue] = {0: DiscoFrameType.DISCO_ERROR.value, 1: corr, 2: int(code)}
    if reason:
        fields[3] = reason
    return _push(fields)


def push_disco_announce(records: Sequence[ProtocolRecord]) -> bytes:
    """A standalone DISCO_ANNOUNCE ``{0: 0x0103, 2: [records]}``, no ``corr`` (§7.1)."""
    return b"\xa2\x00\x19\x01\x03\x02" + _records_array(records)


def _matches(record: ProtocolRecord, query: DiscoveryQuery) -> bool:
    if query.kinds is not None and _KIND_PROTOCOL not in query.kinds:
        return False
    return query.protocol_ids is None or record.protocol_id in query.protocol_ids


class DiscoveryResponder:
    """Answers one association's Discovery frames with the records advertised to that peer.

    Args:
        records: What this peer may learn. Empty for a peer without agreement: it then gets
            an empty, non-committal DISCO_RESULT (§10), never the AG-UI record.
        max_query_size: Largest query payload parsed; a larger one is answered
            MalformedPayload without being decoded.
    """

    def __init__(
        self, records: Sequence[ProtocolRecord], *, max_query_size: int = DEFAULT_MAX_QUERY_SIZE
    ) -> None:
        self.records = tuple(records)
        self.max_query_size = max_query_size

    def receive_frame(self, frame_type: int, payload: bytes) -> list[tuple[int, bytes]]:
        """Process one decrypted Discovery frame.

        Returns:
            The ``(frame_type, payload)`` answers to send on the Discovery channel, in order.
        """
        if frame_type not in (DiscoFrameType.DISCO_QUERY, DiscoFrameType.DISCO_SUBSCRIBE):
            return []  # announcements, replies, updates, unsubscribes: never answered (§7)
        try:
            if len(payload) > self.max_query_size:
                raise DiscoveryMalformed(f"query of {len(payload)} octets exceeds the limit")
            query = pull_disco_query(payload, frame_type)
        except DiscoveryMalformed as exc:
            if exc.corr is None:
                return []  # no corr to echo: a DISCO_ERROR cannot correlate (§4.2)
            error = push_disco_error(exc.corr, exc.disco_code, str(exc)[:120])
            return [(DiscoFrameType.DISCO_ERROR, error)]
        if frame_type == DiscoFrameType.DISCO_SUBSCRIBE:
            refused = push_disco_error(
                query.corr, DiscoErrorCode.SUBSCRIPTION_REFUSED, "subscriptions are not offered"
            )
            return [(DiscoFrameType.DISCO_ERROR, refused)]
        if query.cursor is not None:
            stale = push_disco_error(query.corr, DiscoErrorCode.STALE_CURSOR, "no result is paged")
            return [(DiscoFrameType.DISCO_ERROR, stale)]
        found = [r for r in self.records if _matches(r, query)]
        return [(DiscoFrameType.DISCO_RESULT, push_disco_result(query.corr, found))]
