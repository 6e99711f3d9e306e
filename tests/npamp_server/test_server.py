"""AG-UI over N-PAMP end to end: our client and raw peers against our server, real TLS on
loopback, one Backend also served over HTTP. One test per MAP-AGUI §10 clause."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.helpers import parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.npamp.bridge import pull_protocol_record
from iobridge.npamp.bridge.envelope import (
    BridgeEnvelope,
    BridgeFrameType,
    BridgeMessage,
    CorrelationIdMissing,
    Effect,
    MessageKind,
    SafetyLabel,
    StreamControl,
    TransportErrorCode,
    pull_bridge_error_body,
    pull_bridge_message,
    pull_envelope,
    push_bridge_message,
    push_envelope,
)
from iobridge.npamp_server import client as agui_client
from iobridge.npamp_server import server as server_module
from iobridge.npamp_server.client import AgUiEvent, RunRefused

from .conftest import BRIDGE, DISCOVERY, INTERACTION, WAIT, Harness, StartHarness

pytestmark = pytest.mark.timeout(30)
WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


async def collect(stream: Any) -> list[AgUiEvent]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


def counting_agent() -> FunctionAgent:
    """Deterministic: three deltas."""

    async def count(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for word in ("one ", "two ", "three"):
            yield word

    return FunctionAgent(count, id="count")


def gated_agent(gate: asyncio.Event) -> FunctionAgent:
    """Two deltas, then waits for ``gate``, then three more."""

    async def paced(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "a "
        yield "b "
        await gate.wait()
        for word in ("c ", "d ", "e"):
            yield word

    return FunctionAgent(paced, id="paced")


def error_code(msg: BridgeMessage) -> TransportErrorCode | None:
    assert msg.frame_type is BridgeFrameType.BRIDGE_ERROR
    body = pull_bridge_error_body(msg.body)
    return None if body is None else body.code


def log_of(h: Harness, run_id: str, owner: str = "anonymous") -> list[tuple[int, bytes]]:
    return list(h.run(run_id, owner).log.entries())


# --- §10 clause 1: octet-for-octet under the agreed protocol_id, JSON ------------------------


async def test_clause1_event_bytes_are_the_sse_payloads_under_0x35(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(agents=[counting_agent()]) as h:
        async with h.raw(client_key) as peer:
            await peer.send(
                BridgeFrameType.BRIDGE_REQUEST,
                peer.run_payload(b"c1", json.dumps(run_body("x", agentId="count")).encode()),
            )
            frames = await peer.stream()
        assert all(m.envelope.protocol_id == 0x35 for m in frames)
        assert all(m.envelope.content_type == 0x01 for m in frames)
        carried = [(m.stream_control.event_id, m.body) for m in frames[:-1]]  # type: ignore[union-attr]
        assert carried == log_of(h, "r1")
        # The same run's SSE stream (resume from 0) carries exactly these octets after "data: ".
        assert h.http is not None
        sse = (await h.http.get("/io-bridge/runs/r1/events")).text
        payloads = [
            line[len("data: ") :].encode()
            for line in sse.split("\n")
            if line.startswith("data: ")
        ]
        assert payloads == [body for _, body in carried]
        assert [e["type"] for e in parse_sse(sse)][-1] == "RUN_FINISHED"


# --- §10 clause 2: frame mapping ------------------------------------------------------------


async def test_clause2_run_is_request_then_data_frames_then_one_final_end(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        await peer.send(
            BridgeFrameType.BRIDGE_REQUEST,
            peer.run_payload(b"tool-run", json.dumps(run_body("what is 2 + 3")).encode()),
        )
        frames = await peer.stream()
        *data, end = frames
        assert all(m.frame_type is BridgeFrameType.BRIDGE_STREAM_DATA for m in data)
        assert all(m.envelope.message_kind == MessageKind.STREAM_DATA for m in data)
        assert all(m.envelope.method == "" for m in frames)
        assert all(m.envelope.correlation_id == b"tool-run" for m in frames)
        ids = [m.stream_control.event_id for m in data]  # type: ignore[union-attr]
        assert ids == list(range(1, len(data) + 1))
        assert end.frame_type is BridgeFrameType.BRIDGE_STREAM_END
        assert end.envelope.message_kind == MessageKind.STREAM_END and end.envelope.final
        assert end.stream_control is not None and end.stream_control.event_id == len(data) + 1
        assert all(m.stream_control.resumable for m in frames)  # type: ignore[union-attr]
        types = [json.loads(m.body)["type"] for m in data]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
        assert {"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"} <= set(
            types
        )
        text = "".join(
            json.loads(m.body)["delta"]
            for m in data
            if json.loads(m.body)["type"] == "TEXT_MESSAGE_CONTENT"
        )
        assert "5" in text
        assert await peer.silent()  # nothing after the single END


async def test_text_run_through_the_client(harness: StartHarness, client_key: Any) -> None:
    async with harness() as h, h.client(client_key) as client:
        stream = client.run(run_body("hello"))
        events = await collect(stream)
    types = [e.type for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert "TEXT_MESSAGE_CONTENT" in types
    assert [e.event_id for e in events] == list(range(1, len(events) + 1))
    assert stream.ended and not stream.cancelled and stream.resumable
    assert all(e.data == json.loads(e.raw) for e in events)


async def test_frontend_tool_next_run_mode_continues_in_run_two(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.client(client_key) as client:
        first = await collect(client.run(run_body("get_weather", run_id="r1", tools=[WEATHER])))
        call_id = next(e.data["toolCallId"] for e in first if e.type == "TOOL_CALL_END")
        assert first[-1].data["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
        assert not any(e.type == "TOOL_CALL_RESULT" for e in first)
        follow = {
            "threadId": "t1", "runId": "r2", "tools": [WEATHER], "context": [],
            "messages": [{"id": "tm1", "role": "tool", "toolCallId": call_id,
                          "content": '{"sky": "clear"}'}],
            "forwardedProps": {},
        }
        second = await collect(client.run(follow))
        text = "".join(e.data["delta"] for e in second if e.type == "TEXT_MESSAGE_CONTENT")
        assert text == 'The tool get_weather returned {"sky": "clear"}.'
        assert h.backend.store is not None


# --- §10 clause 3: RUN_ERROR in-stream; failures below AG-UI as BRIDGE_ERROR -----------------


async def test_clause3_run_error_in_stream_and_undelivered_runs_as_bridge_error(
    harness: StartHarness, client_key: Any
) -> None:
    async def boom(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "partial"
        raise RuntimeError("secret internals")

    async with harness(agents=[FunctionAgent(boom, id="boom")]) as h, h.raw(client_key) as peer:
        body = json.dumps(run_body("x", agentId="boom")).encode()
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"e1", body))
        *data, end = await peer.stream()
        last = json.loads(data[-1].body)
        assert last["type"] == "RUN_ERROR" and "secret" not in last["message"]
        assert end.frame_type is BridgeFrameType.BRIDGE_STREAM_END
        # Not delivered: unknown agent, malformed RunAgentInput, busy runId.
        for corr, raw in [
            (b"e2", json.dumps(run_body("x", run_id="r2", agentId="nobody")).encode()),
            (b"e3", b'{"threadId": 5}'),
            (b"e4", b"not json"),
        ]:
            await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(corr, raw))
            (reply,) = await peer.stream()
            assert reply.envelope.correlation_id == corr
            assert error_code(reply) is TransportErrorCode.NOT_DELIVERED
        assert h.runtime.active_runs == 0


async def test_every_client_connect_shares_one_tls_context(
    harness: StartHarness, client_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    real = agui_client.client_ssl_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(agui_client, "client_ssl_context", counting)
    agui_client._default_ssl_context.cache_clear()
    try:
        async with harness() as h:
            for run_id in ("c1", "c2", "c3"):
                async with h.client(client_key) as client:
                    events = [e.type async for e in client.run(run_body("hi", run_id=run_id))]
                    assert events[-1] == "RUN_FINISHED"
    finally:
        agui_client._default_ssl_context.cache_clear()
    assert len(built) == 1  # built once, with no CA store: verification is off (keys pinned)
    assert built[0].cert_store_stats()["x509_ca"] == 0  # type: ignore[attr-defined]


async def test_busy_thread_is_not_delivered(harness: StartHarness, client_key: Any) -> None:
    gate = asyncio.Event()
    async with harness(agents=[gated_agent(gate)]) as h, h.client(client_key) as client:
        live = client.run(run_body("x", run_id="r1", agentId="paced"))
        iterator = aiter(live)
        assert (await anext(iterator)).type == "RUN_STARTED"
        with pytest.raises(RunRefused) as refused:
            await collect(client.run(run_body("y", run_id="r2", agentId="paced")))
        assert refused.value.transport_code is TransportErrorCode.NOT_DELIVERED
        assert "THREAD_BUSY" in refused.value.reason
        gate.set()
        rest = [e async for e in iterator]
        assert rest[-1].type == "RUN_FINISHED"
        assert h.run("r1").log.closed


async def test_unknown_method_is_method_unsupported(harness: StartHarness, client_key: Any) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        envelope = BridgeEnvelope(
            protocol_id=0x35, message_kind=MessageKind.REQUEST, content_type=0x01,
            correlation_id=b"m1", method="connect",
        )
        payload = push_bridge_message(
            BridgeMessage(
                frame_type=BridgeFrameType.BRIDGE_REQUEST, envelope=envelope,
                safety_label=SafetyLabel(effect=Effect.READ_ONLY), body=b"{}",
            )
        )
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, payload)
        (reply,) = await peer.stream()
        assert error_code(reply) is TransportErrorCode.METHOD_UNSUPPORTED
        assert h.runtime.active_runs == 0


async def test_unagreed_peer_gets_protocol_unsupported_and_no_run(
    harness: StartHarness, client_key: Any, other_key: Any
) -> None:
    npamp = {"agui_peers": [other_key.fingerprint], "announce_discovery": True}
    async with harness(npamp=npamp) as h:
        async with h.raw(client_key) as peer:
            body = json.dumps(run_body("hello")).encode()
            await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"p1", body))
            (reply,) = await peer.stream()
            assert error_code(reply) is TransportErrorCode.PROTOCOL_UNSUPPORTED
            assert await peer.silent(None)  # no announcement, nothing else
        with pytest.raises(Exception):  # noqa: B017 - the run never existed
            h.run("r1")


async def test_other_protocol_id_from_an_agreed_peer_is_unsupported(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        payload = bytearray(peer.run_payload(b"p2", json.dumps(run_body("x")).encode()))
        assert payload[4] == 0x35
        payload[4] = 0x36
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, bytes(payload))
        (reply,) = await peer.stream()
        assert error_code(reply) is TransportErrorCode.PROTOCOL_UNSUPPORTED
        assert h.runtime.active_runs == 0


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("message_kind contradicts the frame type", lambda p: p[:5] + b"\x02" + p[6:]),
        ("StreamControl of 10 octets", None),
        ("StreamControl version 2", None),
        ("cancel control on a request", None),
    ],
)
async def test_malformed_envelopes_are_envelope_malformed_and_start_nothing(
    harness: StartHarness, client_key: Any, name: str, mutate: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        valid = peer.run_payload(b"bad", json.dumps(run_body("x")).encode())
        request = pull_bridge_message(BridgeFrameType.BRIDGE_REQUEST, valid)
        envelope = push_envelope(request.envelope)
        body = json.dumps(run_body("x")).encode()
        if mutate is not None:
            payload = mutate(valid)
        elif name == "StreamControl of 10 octets":
            payload = envelope + b"\x00\x11\x00\x0a\x01\x01\x00" + bytes(7) + body
        elif name == "StreamControl version 2":
            payload = envelope + b"\x00\x11\x00\x0b\x02\x01\x00" + bytes(8) + body
        else:
            payload = envelope + b"\x00\x11\x00\x0b\x01\x02\x00" + bytes(8) + body
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, payload)
        (reply,) = await peer.stream()
        assert error_code(reply) is TransportErrorCode.ENVELOPE_MALFORMED, name
        assert h.runtime.active_runs == 0
        # The association survives: a good run still works.
        await peer.send(
            BridgeFrameType.BRIDGE_REQUEST,
            peer.run_payload(b"good", json.dumps(run_body("x", run_id="ok")).encode()),
        )
        assert (await peer.stream())[-1].frame_type is BridgeFrameType.BRIDGE_STREAM_END


def _label_before_envelope(payload: bytes) -> bytes:
    env_end = 4 + int.from_bytes(payload[2:4], "big")
    label_end = env_end + 4 + int.from_bytes(payload[env_end + 2 : env_end + 4], "big")
    return payload[env_end:label_end] + payload[:env_end] + payload[label_end:]


def _trailing_envelope_octet(payload: bytes) -> bytes:
    env_len = int.from_bytes(payload[2:4], "big")
    return payload[:2] + (env_len + 1).to_bytes(2, "big") + payload[4 : 4 + env_len] + b"X" + (
        payload[4 + env_len :]
    )


def _null_protocol_id(payload: bytes) -> bytes:
    return payload[:4] + b"\x00" + payload[5:]


@pytest.mark.parametrize(
    ("probe", "corr", "mutate"),
    [
        ("SafetyLabel before the envelope", b"q1", _label_before_envelope),
        ("trailing octet in the envelope", b"q2", _trailing_envelope_octet),
        ("empty correlation_id", b"", None),
        ("protocol_id 0x00", b"q4", _null_protocol_id),
    ],
)
async def test_independent_peer_probes_are_answered_with_a_valid_bridge_error(
    harness: StartHarness, client_key: Any, probe: str, corr: bytes, mutate: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        body = json.dumps(run_body("x")).encode()
        if mutate is None:  # the session refuses to build an empty id: splice it out by hand
            payload = peer.run_payload(b"q3", body)
            payload = b"\x00\x10" + (int.from_bytes(payload[2:4], "big") - 2).to_bytes(
                2, "big"
            ) + payload[4:8] + b"\x00" + payload[11:]
        else:
            payload = mutate(peer.run_payload(corr, body))
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, payload)
        frame = await peer.frame()
        assert frame.frame_type == BridgeFrameType.BRIDGE_ERROR, probe
        tlv_len = int.from_bytes(frame.payload[2:4], "big")
        answer = pull_envelope(frame.payload[4 : 4 + tlv_len])
        assert answer.protocol_id == 0x35 and answer.message_kind == MessageKind.ERROR
        assert answer.correlation_id == corr
        error = pull_bridge_error_body(frame.payload[4 + tlv_len :])
        assert error is not None and error.code is TransportErrorCode.ENVELOPE_MALFORMED
        if corr:  # a strict peer accepts the answer: it passes every receive rule
            assert pull_bridge_message(frame.frame_type, frame.payload).envelope == answer
        else:  # nothing to echo: the empty id is the honest answer (docs: Rejections)
            with pytest.raises(CorrelationIdMissing):
                pull_bridge_message(frame.frame_type, frame.payload)
        assert h.runtime.active_runs == 0
        assert await peer.silent()  # exactly one answer


async def test_null_protocol_id_is_envelope_malformed_and_starts_nothing(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:
        payload = bytearray(peer.run_payload(b"n1", json.dumps(run_body("x")).encode()))
        payload[4] = 0x00
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, bytes(payload))
        frame = await peer.frame()
        # The reply is itself a valid Bridge frame: it carries the agreed protocol_id (0x00 may
        # not be used, NPAMP-REG §4) and echoes the request's correlation_id.
        reply = pull_bridge_message(frame.frame_type, frame.payload)
        assert reply.envelope.protocol_id == 0x35 and reply.envelope.correlation_id == b"n1"
        assert error_code(reply) is TransportErrorCode.ENVELOPE_MALFORMED
        assert h.runtime.active_runs == 0


# --- §10 clause 4: one run, one stream, in order, untouched ---------------------------------


async def test_clause4_concurrent_runs_each_on_their_own_stream_in_order(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(agents=[counting_agent()]) as h, h.client(client_key) as client:
        streams = [
            client.run(run_body("x", thread_id=f"t{i}", run_id=f"r{i}", agentId="count"))
            for i in range(3)
        ]
        results = await asyncio.gather(*(collect(s) for s in streams))
        for i, events in enumerate(results):
            assert {e.data.get("runId") for e in events if "runId" in e.data} == {f"r{i}"}
            assert [(e.event_id, e.raw) for e in events] == log_of(h, f"r{i}")
        assert len({s.correlation_id for s in streams}) == 3


async def test_unknown_event_types_are_carried(harness: StartHarness, client_key: Any) -> None:
    from iobridge.agents.outputs import CustomEvent

    async def custom(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield CustomEvent(name="future-thing", value={"x": 1})

    async with harness(agents=[FunctionAgent(custom, id="custom")]) as h:
        async with h.client(client_key) as client:
            events = await collect(client.run(run_body("x", agentId="custom")))
        assert [(e.event_id, e.raw) for e in events] == log_of(h, "r1")
        assert "CUSTOM" in [e.type for e in events]


# --- §10 clause 5: resume and cancel ---------------------------------------------------------


async def test_clause5_resume_on_a_new_association_delivers_every_event_once(
    harness: StartHarness, client_key: Any
) -> None:
    gate = asyncio.Event()
    async with harness(agents=[gated_agent(gate)], npamp={"anonymous_max_effect": 3}) as h:
        seen: list[AgUiEvent] = []
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="paced"), safety=Effect.DESTRUCTIVE)
            async with asyncio.timeout(WAIT):
                async for event in stream:
                    seen.append(event)
                    if event.type == "TEXT_MESSAGE_CONTENT":
                        break
            corr, cursor = stream.correlation_id, stream.last_event_id
        assert cursor > 0
        await asyncio.sleep(0.05)
        run = h.run("r1")
        assert not run.done  # the association dropped; the run goes on for the resume grace
        gate.set()
        async with h.client(client_key) as client:
            resumed = client.resume(corr, cursor, safety=Effect.DESTRUCTIVE)
            seen += await collect(resumed)
        assert [(e.event_id, e.raw) for e in seen] == log_of(h, "r1")
        assert seen[-1].type == "RUN_FINISHED"
        assert resumed.ended and not resumed.cancelled


async def test_a_replay_larger_than_one_write_is_carried_in_slices_in_order(
    harness: StartHarness, client_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume from 0 replays the retained log as one batch, written SEND_SLICE events at a
    time: every event once, in order, then the END (here 2 per write: 8 writes)."""
    monkeypatch.setattr(server_module, "SEND_SLICE", 2)
    async with harness(agents=[counting_agent()]) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="count"))
            await collect(stream)
        async with h.client(client_key) as client:
            replayed = client.resume(stream.correlation_id, 0)
            events = await collect(replayed)
        log = log_of(h, "r1")
        assert len(log) > 2 * server_module.SEND_SLICE
        assert [(e.event_id, e.raw) for e in events] == log
        assert replayed.ended and events[-1].type == "RUN_FINISHED"


async def test_the_write_holding_the_terminal_event_carries_the_end(
    harness: StartHarness, client_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch that ends the run goes out with the stream's END in the same write (as the
    SSE body ends in the write of its last batch): live, and in the last slice of a replay."""
    from iobridge.npamp.aio import Association

    writes: list[list[int]] = []
    send_many = Association.send_many

    async def recording(self: Association, channel: int, frames: Any) -> None:
        frames = list(frames)
        writes.append([frame_type for frame_type, _ in frames])
        await send_many(self, channel, frames)

    monkeypatch.setattr(Association, "send_many", recording)
    monkeypatch.setattr(server_module, "SEND_SLICE", 2)
    data, end = BridgeFrameType.BRIDGE_STREAM_DATA, BridgeFrameType.BRIDGE_STREAM_END
    async with harness(agents=[counting_agent()]) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="count"))
            events = await collect(stream)
        assert events[-1].type == "RUN_FINISHED" and stream.ended
        live = [w for w in writes if data in w or end in w]
        assert [w.count(end) for w in live] == [0] * (len(live) - 1) + [1]
        assert live[-1][-2:] == [data, end]  # RUN_FINISHED and END: one write
        writes.clear()
        async with h.client(client_key) as client:
            replayed = client.resume(stream.correlation_id, 0)
            assert [e.raw for e in await collect(replayed)] == [e.raw for e in events]
        replay = [w for w in writes if data in w or end in w]
        assert replay[-1] == ([data, data, end] if len(events) % 2 == 0 else [data, end])
        assert sum(w.count(end) for w in replay) == 1


async def test_resume_is_refused_for_another_principal(
    harness: StartHarness, client_key: Any, other_key: Any
) -> None:
    peers = [
        {"fingerprint": client_key.fingerprint, "principal": "alice", "resource_ids": ["ra"]},
        {"fingerprint": other_key.fingerprint, "principal": "bob", "resource_ids": ["rb"]},
    ]
    auth = {"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]}
    async with harness(agents=[counting_agent()], auth=auth, npamp={"peers": peers}) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="count"))
            await collect(stream)
        async with h.client(other_key) as client:
            with pytest.raises(RunRefused) as refused:
                await collect(client.resume(stream.correlation_id, 1))
        assert refused.value.transport_code is TransportErrorCode.NOT_RESUMABLE
        async with h.client(client_key) as client:
            again = await collect(client.resume(stream.correlation_id, 2))
        assert [(e.event_id, e.raw) for e in again] == log_of(h, "r1", owner="alice")[2:]


async def test_not_resumable_after_retention_or_for_unknown_stream(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(agents=[counting_agent()], retention_seconds=0.2) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="count"))
            await collect(stream)
            with pytest.raises(RunRefused) as unknown:
                await collect(client.resume(b"never-started", 0))
            assert unknown.value.transport_code is TransportErrorCode.NOT_RESUMABLE
        await asyncio.sleep(0.3)
        async with h.client(client_key) as client:
            with pytest.raises(RunRefused) as expired:
                await collect(client.resume(stream.correlation_id, 1))
        assert expired.value.transport_code is TransportErrorCode.NOT_RESUMABLE


async def test_cancel_is_answered_by_exactly_one_cancel_ack(
    harness: StartHarness, client_key: Any
) -> None:
    gate = asyncio.Event()  # never set: the run waits until cancelled
    async with harness(agents=[gated_agent(gate)]) as h, h.raw(client_key) as peer:
        body = json.dumps(run_body("x", agentId="paced")).encode()
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"k1", body))
        data = []
        while len(data) < 3:  # RUN_STARTED, TEXT_MESSAGE_START, first content
            frame = await peer.frame()
            data.append(pull_bridge_message(frame.frame_type, frame.payload))
        for m in data:
            peer.session.receive_frame(m.frame_type, push_bridge_message(m))
        peer.session.cancel_run(b"k1")
        ((ft, cancel),) = peer.session.data_to_send()
        await peer.send(ft, cancel)
        rest = await peer.stream()
        acks = [m for m in rest if m.frame_type is BridgeFrameType.BRIDGE_STREAM_END]
        assert len(acks) == 1 and acks[0] is rest[-1]
        ack = acks[0].stream_control
        assert ack is not None and ack.cancel_ack and acks[0].envelope.final
        sent = [m.stream_control.event_id for m in data + rest[:-1]]  # type: ignore[union-attr]
        assert ack.event_id == sent[-1]
        assert await peer.silent()
        run = h.run("r1")
        async with asyncio.timeout(WAIT):
            while not run.done:
                await asyncio.sleep(0.01)
        final = json.loads(run.log.entries()[-1][1])
        assert final["type"] == "RUN_FINISHED" and final["outcome"] == {"type": "cancelled"}
        # A cancelled stream is released: resuming it is refused.
        resume = StreamControl(control=0x01, event_id=1)
        z_payload = peer.run_payload(b"z", b"{}")
        envelope = pull_bridge_message(BridgeFrameType.BRIDGE_REQUEST, z_payload)
        payload = push_bridge_message(
            BridgeMessage(
                frame_type=BridgeFrameType.BRIDGE_REQUEST,
                envelope=BridgeEnvelope(
                    protocol_id=0x35, message_kind=1, content_type=1,
                    correlation_id=b"k1", method=envelope.envelope.method,
                ),
                stream_control=resume, safety_label=SafetyLabel(effect=Effect.DESTRUCTIVE),
            )
        )
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, payload)
        (refusal,) = await peer.stream()
        assert error_code(refusal) is TransportErrorCode.NOT_RESUMABLE


async def test_clause5_cancel_through_the_client_is_normal_completion(
    harness: StartHarness, client_key: Any
) -> None:
    gate = asyncio.Event()
    async with harness(agents=[gated_agent(gate)]) as h, h.client(client_key) as client:
        stream = client.run(run_body("x", agentId="paced"))
        events = []
        async with asyncio.timeout(WAIT):
            async for event in stream:
                events.append(event)
                if event.type == "TEXT_MESSAGE_CONTENT":
                    await client.cancel(stream)
                    await client.cancel(stream)  # a second cancel does nothing
        assert stream.cancelled and stream.ended
        assert [e.type for e in events][:2] == ["RUN_STARTED", "TEXT_MESSAGE_START"]
        assert h.run("r1").stop_reason == "cancelled"


# --- §10 clause 6: SafetyLabel ---------------------------------------------------------------


async def test_clause6_missing_label_is_destructive_and_refused_by_policy(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness() as h, h.raw(client_key) as peer:  # anonymous max: non_idempotent_write
        body = json.dumps(run_body("x")).encode()
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"s1", body, label=None))
        (reply,) = await peer.stream()
        assert error_code(reply) is TransportErrorCode.SAFETY_POLICY
        declared = SafetyLabel(effect=Effect.DESTRUCTIVE)
        s2 = peer.run_payload(b"s2", body, label=declared)
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, s2)
        (reply,) = await peer.stream()
        assert error_code(reply) is TransportErrorCode.SAFETY_POLICY
        with pytest.raises(Exception):  # noqa: B017 - never started
            h.run("r1")
    async with harness(npamp={"anonymous_max_effect": 3}) as h, h.raw(client_key) as peer:
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"s3", body, label=None))
        assert (await peer.stream())[-1].frame_type is BridgeFrameType.BRIDGE_STREAM_END


async def test_clause6_client_labels_every_run_and_a_favourable_label_grants_nothing(
    harness: StartHarness, client_key: Any
) -> None:
    peers = [
        {"fingerprint": client_key.fingerprint, "principal": "alice", "resource_ids": ["ra"],
         "max_effect": 3},
    ]
    auth = {"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]}
    async with harness(auth=auth, npamp={"peers": peers}) as h, h.client(client_key) as client:
        sent: list[bytes] = []
        original = client.association.send

        async def spy(channel: int, frame_type: int, payload: bytes, **kw: Any) -> None:
            sent.append(payload)
            await original(channel, frame_type, payload, **kw)

        client.association.send = spy  # type: ignore[method-assign]
        await collect(client.run(run_body("x", run_id="r1")))
        await collect(client.run(run_body("x", run_id="r2"), safety=Effect.DESTRUCTIVE))
        labels = [pull_bridge_message(BridgeFrameType.BRIDGE_REQUEST, p).safety_label for p in sent]
        assert [label.effect if label else None for label in labels] == [
            Effect.NON_IDEMPOTENT_WRITE, Effect.DESTRUCTIVE,
        ]
        assert h.run("r1", owner="alice").resource_id == "ra"
        # read_only on a foreign resource: refused like a missing resource.
        foreign = run_body("x", thread_id="t9", run_id="r3", resourceId="rb")
        with pytest.raises(RunRefused) as refused:
            await collect(client.run(foreign, safety=Effect.READ_ONLY))
        assert refused.value.transport_code is TransportErrorCode.NOT_DELIVERED


async def test_unmapped_peer_cannot_run_when_auth_is_on(
    harness: StartHarness, client_key: Any
) -> None:
    auth = {"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]}
    async with harness(auth=auth) as h, h.client(client_key) as client:
        with pytest.raises(RunRefused) as refused:
            await collect(client.run(run_body("x")))
        assert refused.value.transport_code is TransportErrorCode.NOT_DELIVERED
        assert h.runtime.active_runs == 0


# --- §10 clause 7: channels ------------------------------------------------------------------


async def test_clause7_interaction_channel_and_discovery_for_agreed_peers(
    harness: StartHarness, client_key: Any
) -> None:
    npamp = {"channels": [BRIDGE, INTERACTION], "announce_discovery": True}
    async with harness(agents=[counting_agent()], npamp=npamp) as h:
        async with h.raw(client_key) as peer:
            announce = await peer.frame(DISCOVERY)
            assert announce.frame_type == 0x0103
            assert announce.payload[:7] == b"\xa2\x00\x19\x01\x03\x02\x81"
            record = pull_protocol_record(announce.payload[7:])
            assert (record.protocol_id, record.carriage_class) == (0x35, 4)
            assert record.channels == (BRIDGE, INTERACTION) and record.methods == ("run",)
            body = json.dumps(run_body("x", agentId="count")).encode()
            i1 = peer.run_payload(b"i1", body)
            await peer.send(BridgeFrameType.BRIDGE_REQUEST, i1, INTERACTION)
            frames = await peer.stream(INTERACTION)
            assert await peer.silent(BRIDGE)  # never split across channels
        carried = [(m.stream_control.event_id, m.body) for m in frames[:-1]]  # type: ignore[union-attr]
        assert carried == log_of(h, "r1")
        async with h.client(client_key, channel=INTERACTION) as client:
            events = await collect(client.run(run_body("x", run_id="r2", agentId="count")))
            assert events[-1].type == "RUN_FINISHED"
            assert len(client.announcements) == 1


# NPAMP-DISC §4.2/§6.1: {0: 0x0100 DISCO_QUERY, 1: corr h'd1', 2: kinds [1 = protocol]}
DISCO_QUERY = bytes.fromhex("a3" "00190100" "01426431" "028101")


async def test_discovery_query_answered_with_the_agui_record_only_to_agreed_peers(
    harness: StartHarness, client_key: Any, other_key: Any
) -> None:
    npamp = {"agui_peers": [client_key.fingerprint], "trusted_peers": [other_key.fingerprint]}
    async with harness(npamp=npamp) as h:
        async with h.raw(client_key) as peer:
            await peer.send(0x0100, DISCO_QUERY, DISCOVERY)
            reply = await peer.frame(DISCOVERY)
            # DISCO_RESULT {0: 0x0101, 1: h'd1', 2: [record], 3: true} (§6.2)
            assert reply.frame_type == 0x0101
            assert reply.payload[:11] == bytes.fromhex("a4" "00190101" "01426431" "0281")
            assert reply.payload[-2:] == b"\x03\xf5"
            record = pull_protocol_record(reply.payload[11:-2])
            assert (record.protocol_id, record.carriage_class) == (0x35, 4)
            assert record.channels == (BRIDGE,) and record.methods == ("run",)
        async with h.raw(other_key) as peer:  # trusted, but not agreed on 0x35
            await peer.send(0x0100, DISCO_QUERY, DISCOVERY)
            reply = await peer.frame(DISCOVERY)
            assert reply.frame_type == 0x0101
            assert reply.payload == bytes.fromhex("a4" "00190101" "01426431" "0280" "03f5")


# --- §10 clause 8: no HTTP binding at the N-PAMP layer ---------------------------------------


async def test_clause8_no_sse_framing_and_no_run_state_in_envelopes(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(agents=[counting_agent()]) as h, h.raw(client_key) as peer:
        body = json.dumps(run_body("x", thread_id="thread-A", run_id="run-B", agentId="count"))
        await peer.send(BridgeFrameType.BRIDGE_REQUEST, peer.run_payload(b"q1", body.encode()))
        frames = await peer.stream()
        for m in frames[:-1]:
            assert m.body.startswith(b"{") and not m.body.startswith((b"data:", b"id:"))
            assert b"\n" not in m.body
            json.loads(m.body)
        for m in frames:
            assert m.envelope.correlation_id == b"q1" and m.envelope.method == ""
            assert b"thread-A" not in push_envelope(m.envelope)
        assert frames[-1].body == b""
        assert h.run("run-B").thread_id == "thread-A"


async def test_dropped_association_without_grace_cancels_the_run(
    harness: StartHarness, client_key: Any
) -> None:
    gate = asyncio.Event()  # never set
    async with harness(agents=[gated_agent(gate)], npamp={"resume_grace_seconds": 0}) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="paced"))
            async with asyncio.timeout(WAIT):
                async for event in stream:
                    if event.type == "TEXT_MESSAGE_CONTENT":
                        break
        run = h.run("r1")
        async with asyncio.timeout(WAIT):
            while not run.done:
                await asyncio.sleep(0.01)
        assert run.stop_reason == "disconnected"
        assert h.runtime.active_runs == 0


async def test_runs_over_the_admission_limit_are_not_delivered_with_the_code(
    harness: StartHarness, client_key: Any
) -> None:
    gate = asyncio.Event()
    async with harness(agents=[gated_agent(gate)], max_active_runs=1) as h:
        async with h.client(client_key) as client:
            live = client.run(run_body("x", run_id="r1", agentId="paced"))
            iterator = aiter(live)
            assert (await anext(iterator)).type == "RUN_STARTED"
            with pytest.raises(RunRefused) as refused:
                await collect(client.run(run_body("y", run_id="r2", thread_id="t2")))
            assert refused.value.transport_code is TransportErrorCode.NOT_DELIVERED
            assert refused.value.reason.startswith("TOO_MANY_RUNS")
            gate.set()
            assert [e async for e in iterator][-1].type == "RUN_FINISHED"
        assert h.backend.store is not None
        assert await h.backend.store.get_thread("t2") is None  # nothing stored for it


async def test_a_resume_before_the_replay_window_is_not_resumable(
    harness: StartHarness, client_key: Any
) -> None:
    async def many(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for i in range(200):
            if i % 8 == 0:
                await asyncio.sleep(0)
            yield f"{i} "

    agent = FunctionAgent(many, id="many")
    async with harness(agents=[agent], max_run_log_bytes=8192) as h:
        async with h.client(client_key) as client:
            stream = client.run(run_body("x", agentId="many"))
            events = await collect(stream)
            assert len(events) == 204 and events[-1].type == "RUN_FINISHED"
        async with h.client(client_key) as client:
            with pytest.raises(RunRefused) as refused:
                await collect(client.resume(stream.correlation_id, 1))
            assert refused.value.transport_code is TransportErrorCode.NOT_RESUMABLE
            assert "no longer retained" in refused.value.reason
        async with h.client(client_key) as client:
            tail = await collect(client.resume(stream.correlation_id, 202))
            assert [e.event_id for e in tail] == [203, 204]


async def test_the_resume_map_is_swept_of_runs_no_longer_retained(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(agents=[counting_agent()], max_retained_runs=1, max_active_runs=1) as h:
        async with h.client(client_key) as client:
            for n in range(5):
                body = run_body("x", run_id=f"r{n}", thread_id=f"t{n}", agentId="count")
                assert (await collect(client.run(body)))[-1].type == "RUN_FINISHED"
        # Bounded by retained + live runs: entries of evicted runs are dropped.
        assert len(h.server.streams) <= 2
        assert set(h.server.streams.run_ids()) <= {"r3", "r4"}
