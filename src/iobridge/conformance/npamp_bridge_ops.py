"""Bridge ops of the conformance adapter (digest §8.1); merged into ``adapter.OPS``.

Each op takes the request's ``in`` object and returns its ``out`` object. Octet fields are
lowercase hex strings. A rejected input raises :class:`~iobridge.npamp.errors.NpampError`
(or ``ValueError``/``KeyError``/``TypeError`` for a badly shaped request), which the adapter
answers as ``{"error": ...}``. The corpus compares ``safety`` through Go's printed form, so it
is always present: ``null`` or ``{"effect": int, "scope": str}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iobridge.npamp.bridge.envelope import (
    BridgeEnvelope,
    BridgeFrameType,
    BridgeMessage,
    Effect,
    SafetyLabel,
    correlates,
    pull_bridge_message,
    push_bridge_message,
)

__all__ = ["BRIDGE_OPS"]


def _int(inp: dict[str, Any], key: str) -> int:
    value = inp[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key} must be an integer")
    return value


def _hex(inp: dict[str, Any], key: str) -> bytes:
    value = inp.get(key, "")
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a hex string")
    return bytes.fromhex(value)


def _decode(frame_type: int, payload: bytes) -> BridgeMessage:
    return pull_bridge_message(frame_type, payload)


def envelope_decode(inp: dict[str, Any]) -> dict[str, Any]:
    """``bridge.envelope.decode``: frameType, payload -> envelope fields, safety, foreign."""
    msg = _decode(_int(inp, "frameType"), _hex(inp, "payload"))
    env, label = msg.envelope, msg.safety_label
    return {
        "protocol_id": env.protocol_id,
        "message_kind": env.message_kind,
        "content_type": env.content_type,
        "flags": env.flags,
        "final": env.final,
        "corr": env.correlation_id.hex(),
        "method": env.method,
        "safety": None if label is None else {"effect": int(label.effect), "scope": label.scope},
        "foreign": msg.body.hex(),
    }


def envelope_encode(inp: dict[str, Any]) -> dict[str, Any]:
    """``bridge.envelope.encode``: fields{...} -> payload (canonical TLV order)."""
    fields = inp["fields"]
    if not isinstance(fields, dict):
        raise TypeError("fields must be an object")
    safety = fields.get("safety")
    label = None
    if safety is not None:
        scope = safety.get("scope", "")
        if not isinstance(scope, str):
            raise TypeError("safety.scope must be a string")
        label = SafetyLabel(effect=Effect(_int(safety, "effect")), scope=scope)
    method = fields.get("method", "")
    if not isinstance(method, str):
        raise TypeError("method must be a string")
    msg = BridgeMessage(
        frame_type=BridgeFrameType(_int(fields, "frameType")),
        envelope=BridgeEnvelope(
            protocol_id=_int(fields, "protocol_id"),
            message_kind=_int(fields, "message_kind"),
            content_type=_int(fields, "content_type"),
            flags=_int(fields, "flags"),
            correlation_id=_hex(fields, "corr"),
            method=method,
        ),
        safety_label=label,
        body=_hex(fields, "foreign"),
    )
    return {"payload": push_bridge_message(msg).hex()}


def correlate(inp: dict[str, Any]) -> dict[str, Any]:
    """``bridge.correlate``: does the reply echo the request's correlation_id (BRIDGE §5)?"""
    request = _decode(_int(inp, "requestFrameType"), _hex(inp, "requestPayload"))
    reply = _decode(_int(inp, "replyFrameType"), _hex(inp, "replyPayload"))
    return {"match": correlates(request.envelope, reply.envelope)}


#: Op name -> implementation, merged by :mod:`iobridge.conformance.npamp_adapter`.
BRIDGE_OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "bridge.envelope.decode": envelope_decode,
    "bridge.envelope.encode": envelope_encode,
    "bridge.correlate": correlate,
}
