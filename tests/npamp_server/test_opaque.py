"""AG-UI under NPAMP-CC-OPAQUE (MAP-AGUI §2 fallback): our opaque client and raw peers against
our server over real TLS on loopback, for a peer agreed on a private protocol_id only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError
from tests.helpers import run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.config import NpampSettings
from iobridge.errors import NotFoundError
from iobridge.npamp.bridge import BridgeFrameType, Effect, SafetyLabel, TransportErrorCode
from iobridge.npamp.bridge.envelope import (
    BridgeEnvelope,
    BridgeMessage,
    Control,
    MessageKind,
    StreamControl,
    pull_bridge_error_body,
    pull_bridge_message,
    push_bridge_message,
)
from iobridge.npamp.bridge.opaque import OpaqueSession
from iobridge.npamp.handshake import IdentityKey
from iobridge.npamp_server import client as agui_client
from iobridge.npamp_server.client import AgUiEvent, RunRefused

from .conftest import WAIT, Harness, StartHarness

pytestmark = pytest.mark.timeout(30)
OPAQUE_ID = 0x50
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}
LABEL = SafetyLabel(effect=Effect.NON_IDEMPOTENT_WRITE)


def opaque_only(key: IdentityKey, **extra: Any) -> dict[str, Any]:
    """Settings: this key agreed on OPAQUE_ID for opaque carriage, nobody on the STREAM id."""
    return {
        "agui_peers": [],
        "trusted_peers": "*",
        "opaque_peers": [{"fingerprint": key.fingerprint, "protocol_id": OPAQUE_ID}],
        **extra,
    }


def opaque_client(h: Harness, key: IdentityKey, **kwargs: Any) -> Any:
    return agui_client.connect_opaque(
        "127.0.0.1", h.port, identity=key, pinned=[h.server_key.fingerprint],
        protocol_id=kwargs.pop("protocol_id", OPAQUE_ID), **kwargs,
    )


async def collect(stream: Any) -> list[AgUiEvent]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


def gated_agent(gate: asyncio.Event) -> FunctionAgent:
    async def paced(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "a "
        await gate.wait()
        yield "b"

    return FunctionAgent(paced, id="paced")


async def test_run_carried_opaquely_is_the_json_array_of_the_log_octets(
    harness: StartHarness, client_key: IdentityKey
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h, h.raw(client_key) as peer:
        session = OpaqueSession(protocol_id=OPAQUE_ID)
        session.request(b"o1", json.dumps(run_body("hello")).encode(), method="POST /run",
                        safety_label=LABEL)
        ((ft, payload),) = session.data_to_send()
        await peer.send(ft, payload)
        frames = await peer.stream()
        log = [data for _, data in h.run("r1").log.entries()]
        assert [m.frame_type for m in frames] == (
            [BridgeFrameType.BRIDGE_STREAM_DATA] * len(log) + [BridgeFrameType.BRIDGE_STREAM_END]
        )
        for msg in frames:  # plain Bridge: no StreamControl, no method, the agreed id, JSON
            assert msg.stream_control is None and msg.envelope.method == ""
            assert msg.envelope.protocol_id == OPAQUE_ID and msg.envelope.content_type == 0x01
            assert msg.envelope.correlation_id == b"o1"
        assert frames[-1].envelope.final
        assert b"".join(m.body for m in frames) == b"[" + b",".join(log) + b"]"


async def test_client_run_yields_every_event_octet_for_octet(
    harness: StartHarness, client_key: IdentityKey
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h, opaque_client(h, client_key) as c:
        stream = c.run(run_body("hello"))
        events = await collect(stream)
        log = [data for _, data in h.run("r1").log.entries()]
        assert [e.raw for e in events] == log
        assert [e.event_id for e in events] == list(range(1, len(log) + 1))
        assert events[0].type == "RUN_STARTED" and events[-1].type == "RUN_FINISHED"
        assert stream.ended


async def test_frontend_tool_result_goes_back_in_the_same_run(
    harness: StartHarness, client_key: IdentityKey
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h, opaque_client(h, client_key) as c:
        seen: list[AgUiEvent] = []
        async with asyncio.timeout(WAIT):
            async for event in c.run(run_body('get_weather {"city": "Paris"}', tools=[WEATHER])):
                seen.append(event)
                if event.type == "TOOL_CALL_END":
                    call_id = event.data["toolCallId"]
                    assert not any(e.type == "TOOL_CALL_RESULT" for e in seen)
                    answer = await c.submit_tool_result("r1", call_id, {"result": {"sky": "clear"}})
                    assert answer == {"status": "accepted"}
                    with pytest.raises(RunRefused) as again:  # the call already has a result
                        await c.submit_tool_result("r1", call_id, {"content": "twice"})
                    assert again.value.transport_code is None
                    error = json.loads(again.value.body)["error"]
                    assert error["code"] == "TOOL_RESULT_ALREADY_SUBMITTED"
        result = next(e for e in seen if e.type == "TOOL_CALL_RESULT")
        assert json.loads(result.data["content"]) == {"sky": "clear"}
        reply = "".join(e.data["delta"] for e in seen if e.type == "TEXT_MESSAGE_CONTENT")
        assert 'get_weather returned {"sky":"clear"}' in reply
        assert seen[-1].type == "RUN_FINISHED"


async def test_cancel_stops_the_run_which_ends_cancelled(
    harness: StartHarness, client_key: IdentityKey
) -> None:
    gate = asyncio.Event()  # never set: the run waits until cancelled
    body = run_body("x", agentId="paced")
    async with (
        harness(agents=[gated_agent(gate)], npamp=opaque_only(client_key)) as h,
        opaque_client(h, client_key) as c,
    ):
        seen: list[AgUiEvent] = []
        async with asyncio.timeout(WAIT):
            async for event in c.run(body):
                seen.append(event)
                if event.type == "TEXT_MESSAGE_CONTENT":
                    assert await c.cancel("r1") == {"status": "cancelling"}
        assert seen[-1].type == "RUN_FINISHED"
        assert seen[-1].data["outcome"]["type"] == "cancelled"
        assert await c.cancel("r1") == {"status": "ended"}


async def test_refusals_of_the_io_protocol_are_its_own_error_objects(
    harness: StartHarness, client_key: IdentityKey, other_key: IdentityKey
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h, opaque_client(h, client_key) as c:
        with pytest.raises(RunRefused) as bad:  # not a RunAgentInput: HTTP would answer 400
            await collect(c.run(b'{"threadId": 5}'))
        assert bad.value.transport_code is None
        assert json.loads(bad.value.body)["error"]["code"] == "INVALID_REQUEST"
        with pytest.raises(NotFoundError):
            h.run("r1")  # nothing was started
        # An unknown run: the io protocol's 404 object.
        with pytest.raises(RunRefused) as missing:
            await c.cancel("no-such-run")
        assert json.loads(missing.value.body)["error"]["code"] == "RUN_NOT_FOUND"
        with pytest.raises(RunRefused) as no_call:
            await c.submit_tool_result("no-such-run", "c1", {"content": "x"})
        assert json.loads(no_call.value.body)["error"]["code"] == "RUN_NOT_FOUND"
        # The result body is parsed as HTTP parses it, before the run is looked up.
        with pytest.raises(RunRefused) as bad_result:
            await c.submit_tool_result("no-such-run", "c1", {"result": 1, "isError": "yes"})
        assert json.loads(bad_result.value.body) == {"error": {
            "code": "INVALID_REQUEST", "message": "isError must be a boolean"}}


async def test_transport_refusals(
    harness: StartHarness, client_key: IdentityKey, other_key: IdentityKey
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h:
        # A label above the anonymous ceiling (non_idempotent_write): SafetyPolicy, no run.
        async with opaque_client(h, client_key, safety=Effect.DESTRUCTIVE) as c:
            with pytest.raises(RunRefused) as unsafe:
                await collect(c.run(run_body("x")))
            assert unsafe.value.transport_code is TransportErrorCode.SAFETY_POLICY
        # A peer without the opaque agreement: ProtocolUnsupported.
        async with opaque_client(h, other_key) as c:
            with pytest.raises(RunRefused) as stranger:
                await collect(c.run(run_body("x", run_id="r2")))
            assert stranger.value.transport_code is TransportErrorCode.PROTOCOL_UNSUPPORTED
        # The opaque-only peer speaking the STREAM mapping on 0x35: ProtocolUnsupported.
        async with agui_client.connect(
            "127.0.0.1", h.port, identity=client_key, pinned=[h.server_key.fingerprint]
        ) as c:
            with pytest.raises(RunRefused) as streamed:
                await collect(c.run(run_body("x", run_id="r3")))
            assert streamed.value.transport_code is TransportErrorCode.PROTOCOL_UNSUPPORTED
        with pytest.raises(NotFoundError):
            h.run("r1")
        with pytest.raises(NotFoundError):
            h.run("r3")


def _raw_payload(
    *, method: str = "POST /run", content_type: int = 0x01, sc: StreamControl | None = None
) -> bytes:
    envelope = BridgeEnvelope(
        protocol_id=OPAQUE_ID, message_kind=MessageKind.REQUEST, content_type=content_type,
        correlation_id=b"q1", method=method,
    )
    msg = BridgeMessage(
        frame_type=BridgeFrameType.BRIDGE_REQUEST, envelope=envelope, stream_control=sc,
        safety_label=LABEL, body=json.dumps(run_body("x")).encode(),
    )
    return push_bridge_message(msg)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (_raw_payload(method="GET /agents"), TransportErrorCode.METHOD_UNSUPPORTED),
        (_raw_payload(method="run"), TransportErrorCode.METHOD_UNSUPPORTED),
        (_raw_payload(content_type=0x07), TransportErrorCode.ENVELOPE_MALFORMED),
        (_raw_payload(content_type=0x02), TransportErrorCode.ENVELOPE_MALFORMED),
        (
            _raw_payload(sc=StreamControl(control=Control.RESUME, event_id=0)),
            TransportErrorCode.ENVELOPE_MALFORMED,
        ),
    ],
    ids=["unknown-route", "stream-method", "unassigned-content-type", "cbor-not-accepted",
         "stream-control"],
)
async def test_malformed_or_uncarried_opaque_requests_are_answered(
    harness: StartHarness, client_key: IdentityKey, payload: bytes, code: TransportErrorCode
) -> None:
    async with harness(npamp=opaque_only(client_key)) as h, h.raw(client_key) as peer:
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, payload)
        frame = await peer.frame()
        reply = pull_bridge_message(frame.frame_type, frame.payload)
        assert reply.frame_type is BridgeFrameType.BRIDGE_ERROR
        assert reply.envelope.protocol_id == OPAQUE_ID and reply.envelope.correlation_id == b"q1"
        body = pull_bridge_error_body(reply.body)
        assert body is not None and body.code is code
        with pytest.raises(NotFoundError):
            h.run("r1")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"protocol_id": 0x35}, "AG-UI STREAM id"),
        ({"protocol_id": 0x80}, "less than or equal to 127"),
        ({"protocol_id": 0x0F}, "greater than or equal to 16"),
        ({"protocol_id": 0x50, "fingerprint": "sha256:nothex"}, "not a key fingerprint"),
    ],
)
def test_opaque_peer_settings_are_checked(
    client_key: IdentityKey, entry: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        NpampSettings(opaque_peers=[{"fingerprint": client_key.fingerprint, **entry}])


def test_an_opaque_peer_is_listed_once(client_key: IdentityKey) -> None:
    peer = {"fingerprint": client_key.fingerprint, "protocol_id": 0x50}
    with pytest.raises(ValidationError, match="listed twice"):
        NpampSettings(opaque_peers=[peer, {**peer, "protocol_id": 0x51}])


async def test_another_principals_run_answers_like_a_missing_one(
    harness: StartHarness, client_key: IdentityKey, other_key: IdentityKey
) -> None:
    gate = asyncio.Event()
    npamp = {
        "agui_peers": [],
        "opaque_peers": [
            {"fingerprint": client_key.fingerprint, "protocol_id": OPAQUE_ID},
            {"fingerprint": other_key.fingerprint, "protocol_id": OPAQUE_ID},
        ],
        "peers": [
            {"fingerprint": client_key.fingerprint, "principal": "alice"},
            {"fingerprint": other_key.fingerprint, "principal": "bob"},
        ],
    }
    async with (
        harness(agents=[gated_agent(gate)], npamp=npamp) as h,
        opaque_client(h, client_key) as alice,
        opaque_client(h, other_key) as bob,
    ):
        events = alice.run(run_body("x", run_id="shared", agentId="paced")).__aiter__()
        async with asyncio.timeout(WAIT):
            assert (await anext(events)).type == "RUN_STARTED"
        answers = []
        for run_id in ("shared", "nope"):
            with pytest.raises(RunRefused) as refused:
                await bob.cancel(run_id)
            answers.append(json.loads(refused.value.body)["error"])
        assert answers[0]["code"] == answers[1]["code"] == "RUN_NOT_FOUND"
        assert answers[0]["message"].replace("shared", "nope") == answers[1]["message"]
        assert h.run("shared", "alice").log.last_seq >= 1  # alice's run is untouched
        gate.set()
