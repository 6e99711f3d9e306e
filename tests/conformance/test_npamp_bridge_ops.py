"""Bridge conformance-adapter ops against the corpus vectors, directly and via the adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iobridge.conformance import npamp_adapter as adapter
from iobridge.conformance.npamp_bridge_ops import BRIDGE_OPS

VECTORS = json.loads((Path(__file__).parents[1] / "npamp" / "vectors" / "bridge.json").read_text())


def call(op: str, inp: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = adapter.handle({"op": op, "in": inp})
    return response


def test_adapter_merges_every_bridge_op() -> None:
    assert set(BRIDGE_OPS) == {
        "bridge.envelope.decode",
        "bridge.envelope.encode",
        "bridge.correlate",
    }
    assert all(adapter.OPS[name] is op for name, op in BRIDGE_OPS.items())


@pytest.mark.parametrize("case", VECTORS["decode_valid"], ids=lambda c: f"tc{c['tcId']}")
def test_decode_then_encode(case: dict[str, Any]) -> None:
    out = call(
        "bridge.envelope.decode", {"frameType": case["frameType"], "payload": case["payload"]}
    )
    assert out == {"out": case["expected"]}
    fields = {"frameType": case["frameType"], **case["expected"]}
    encoded = call("bridge.envelope.encode", {"fields": fields})
    assert encoded == {"out": {"payload": case["payload"]}}


@pytest.mark.parametrize("case", VECTORS["decode_invalid"], ids=lambda c: f"tc{c['tcId']}")
def test_decode_rejects(case: dict[str, Any]) -> None:
    out = call(
        "bridge.envelope.decode", {"frameType": case["frameType"], "payload": case["payload"]}
    )
    assert set(out) == {"error"}


@pytest.mark.parametrize("case", VECTORS["correlate"], ids=lambda c: f"tc{c['tcId']}")
def test_correlate(case: dict[str, Any]) -> None:
    inp = {
        k: case[k] for k in ("requestFrameType", "requestPayload", "replyFrameType", "replyPayload")
    }
    assert call("bridge.correlate", inp) == {"out": {"match": case["match"]}}


@pytest.mark.parametrize(
    "inp",
    [
        {"frameType": "256", "payload": "00"},
        {"frameType": 256, "payload": "zz"},
        {"frameType": 256, "payload": 5},
        {"payload": "00"},
    ],
)
def test_badly_shaped_input_is_an_error_not_a_crash(inp: dict[str, Any]) -> None:
    assert set(call("bridge.envelope.decode", inp)) == {"error"}


def test_encode_refuses_an_invalid_message() -> None:
    fields = {
        "frameType": 256,
        "protocol_id": 0x35,
        "message_kind": 1,
        "content_type": 1,
        "flags": 0,
        "corr": "",
        "method": "run",
        "safety": None,
        "foreign": "",
    }
    assert set(call("bridge.envelope.encode", {"fields": fields})) == {"error"}
