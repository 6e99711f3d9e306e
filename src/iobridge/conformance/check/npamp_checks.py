"""Grade an N-PAMP peer against the eight clauses of NPAMP-MAP-AGUI §10, over the wire.

The grader is an ordinary AG-UI consumer: it opens associations with iobridge's N-PAMP
transport, builds requests with the sans-IO :class:`BridgeSession`, and reads every reply frame
itself (:func:`pull_bridge_message`), so what it grades is what the peer put on the wire.
Clause 5's cancel needs a run that stays open: the grader declares a frontend tool, names it in
the message and asks for ``forwardedProps.toolResultMode = "in-run"`` (iobridge then waits for
a result that never comes); a peer whose run ends first has the cancel *skipped*.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from iobridge.conformance.check.conventions import echo_prompt, echo_tool
from iobridge.conformance.check.report import Failed, Outcome, Report, Result
from iobridge.conformance.check.stream import lifecycle_violations
from iobridge.npamp.aio import Association, TransportConfig, client_ssl_context
from iobridge.npamp.aio import connect as npamp_connect
from iobridge.npamp.bridge import (
    AGUI_PROTOCOL_ID,
    BRIDGE_CHANNEL,
    DISCOVERY_CHANNEL,
    BridgeFrameType,
    BridgeMessage,
    BridgeSession,
    ContentType,
    Effect,
    MessageKind,
    SafetyLabel,
    TransportErrorCode,
    pull_bridge_message,
    push_bridge_message,
)
from iobridge.npamp.bridge.envelope import pull_bridge_error_body
from iobridge.npamp.errors import NpampError
from iobridge.npamp.handshake import HandshakeConfig, IdentityKey, PinnedPeers

__all__ = ["NpampTarget", "check_npamp"]

SPEC = "NPAMP-MAP-AGUI §10"
#: A protocol_id the grader assumes the peer does not carry (experimental range, not AG-UI).
UNCARRIED_PROTOCOL_ID = 0x7E
#: Most frames the grader reads for one request.
MAX_FRAMES = 10_000
TITLES = {
    1: "AG-UI under its protocol_id, content_type JSON, octet for octet (§2, §3)",
    2: "run = BRIDGE_REQUEST 'run'; reply = STREAM_DATA events then one final STREAM_END, "
       "method_len 0, same correlation_id (§4.1, §4.2)",
    3: "failures below AG-UI are BRIDGE_ERROR, never success; RUN_ERROR stays in-stream "
       "(§3, §4.3)",
    4: "one run, one stream, in order, events not rewritten (§4, §5)",
    5: "resume from an event_id and cancel acknowledged by one cancel_ack END (§5)",
    6: "a missing SafetyLabel counts as destructive (§6)",
    7: "a run rides the Bridge channel, never the Discovery channel (§7)",
    8: "no HTTP/SSE framing at the N-PAMP layer (§8)",
}


@dataclass(frozen=True, slots=True)
class NpampTarget:
    """An N-PAMP peer and how to authenticate to it."""

    host: str
    port: int
    identity: IdentityKey
    pinned: list[str] = field(default_factory=list)
    agent: str | None = None
    timeout: float = 30.0


@dataclass(slots=True)
class Reply:
    """Every frame the peer sent for one request (its correlation_id), in order."""

    corr: bytes
    frames: list[tuple[int, BridgeMessage]] = field(default_factory=list)
    #: Frames that arrived on the Discovery channel meanwhile: (frame_type, payload).
    discovery: list[tuple[int, bytes]] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    cut: str = ""

    @property
    def data(self) -> list[BridgeMessage]:
        return [m for _, m in self.frames if m.frame_type is BridgeFrameType.BRIDGE_STREAM_DATA]

    def events(self) -> list[dict[str, Any]]:
        out = []
        for msg in self.data:
            try:
                event = json.loads(msg.body)
            except ValueError:
                event = None
            out.append(event if isinstance(event, dict) else {"type": None})
        return out

    @property
    def last(self) -> BridgeMessage | None:
        return self.frames[-1][1] if self.frames else None


def show(channel: int, msg: BridgeMessage) -> dict[str, Any]:
    """A frame as a report shows it."""
    env, sc = msg.envelope, msg.stream_control
    shown: dict[str, Any] = {
        "channel": f"0x{channel:04X}",
        "frameType": msg.frame_type.name,
        "protocolId": f"0x{env.protocol_id:02X}",
        "messageKind": env.message_kind,
        "contentType": env.content_type,
        "final": env.final,
        "correlationId": env.correlation_id.decode("utf-8", "replace"),
        "method": env.method,
    }
    if sc is not None:
        shown["streamControl"] = {"control": int(sc.control), "eventId": sc.event_id,
                                  "resumable": sc.resumable, "cancelAck": sc.cancel_ack}
    if msg.body:
        shown["body"] = msg.body[:400].decode("utf-8", "replace")
    return shown


class Peer:
    """One association: sends requests built by a BridgeSession, reads replies raw."""

    def __init__(self, assoc: Association, timeout: float) -> None:
        self.assoc, self.timeout = assoc, timeout
        self.session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)

    async def flush(self, session: BridgeSession | None = None) -> None:
        for frame_type, payload in (session or self.session).data_to_send():
            await self.assoc.send(BRIDGE_CHANNEL, frame_type, payload)

    async def read(self, reply: Reply, *, until_event: str | None = None) -> Reply:
        """Frames for ``reply.corr`` until END or ERROR (or an event of type ``until_event``)."""
        try:
            async with asyncio.timeout(self.timeout):
                while len(reply.frames) < MAX_FRAMES:
                    frame = await self.assoc.receive()
                    if frame.channel == DISCOVERY_CHANNEL:
                        reply.discovery.append((frame.frame_type, frame.payload))
                        continue
                    with contextlib.suppress(NpampError):
                        self.session.receive_frame(frame.frame_type, frame.payload)
                    try:
                        msg = pull_bridge_message(frame.frame_type, frame.payload)
                    except NpampError as exc:
                        reply.undecodable.append(f"frame 0x{frame.frame_type:04X}: {exc}")
                        continue
                    if msg.envelope.correlation_id != reply.corr:
                        continue
                    reply.frames.append((frame.channel, msg))
                    if msg.frame_type in (BridgeFrameType.BRIDGE_STREAM_END,
                                          BridgeFrameType.BRIDGE_ERROR):
                        return reply
                    if until_event and msg.frame_type is BridgeFrameType.BRIDGE_STREAM_DATA:
                        with contextlib.suppress(ValueError, AttributeError):
                            if json.loads(msg.body).get("type") == until_event:
                                return reply
        except TimeoutError:
            reply.cut = f"no end of stream within {self.timeout:g} s"
        except NpampError as exc:
            reply.cut = f"the association ended: {exc}"
        return reply

    async def run(self, body: bytes, *, label: SafetyLabel | None = None,
                  protocol_id: int = AGUI_PROTOCOL_ID, until_event: str | None = None,
                  unlabelled: bool = False) -> Reply:
        corr = os.urandom(8).hex().encode()
        session = self.session if protocol_id == AGUI_PROTOCOL_ID else BridgeSession(
            protocol_id=protocol_id)
        session.start_run(corr, body, safety_label=label or SafetyLabel(
            effect=Effect.NON_IDEMPOTENT_WRITE))
        if unlabelled:  # the same request, re-encoded without its SafetyLabel
            ((frame_type, payload),) = session.data_to_send()
            msg = pull_bridge_message(frame_type, payload)
            stripped = BridgeMessage(frame_type=msg.frame_type, envelope=msg.envelope,
                                     body=msg.body)
            await self.assoc.send(BRIDGE_CHANNEL, frame_type, push_bridge_message(stripped))
        else:
            await self.flush(session)
        return await self.read(Reply(corr), until_event=until_event)


@contextlib.asynccontextmanager
async def _associate(target: NpampTarget) -> AsyncIterator[Peer]:
    config = TransportConfig(
        handshake=HandshakeConfig(identities=[target.identity],
                                  peer_verifier=PinnedPeers(target.pinned)),
        handshake_timeout=target.timeout,
    )
    async with npamp_connect(target.host, target.port, client_ssl_context(verify=False),
                             config) as assoc:
        yield Peer(assoc, target.timeout)


class NpampCheck:
    def __init__(self, target: NpampTarget) -> None:
        self.target = target
        self.report = Report(f"npamp://{target.host}:{target.port}")
        self.problems: dict[int, tuple[str, Any]] = {}
        self.skips: dict[int, list[str]] = {}
        self.notes: dict[int, list[str]] = {}

    def note(self, clause: int, text: str, *, skipped: bool = False) -> None:
        (self.skips if skipped else self.notes).setdefault(clause, []).append(text)

    def fail(self, clause: int, detail: str, event: Any = None) -> None:
        self.problems.setdefault(clause, (detail, event))

    def body(self, text: str, **props: Any) -> tuple[bytes, dict[str, Any]]:
        if self.target.agent:
            props["agentId"] = self.target.agent
        run = {"threadId": f"check-{uuid.uuid4().hex[:12]}", "runId": str(uuid.uuid4()),
               "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": text}],
               "tools": [], "context": [], "state": {}, "forwardedProps": props}
        # Spaces and key order of our own choosing: the peer must hand them back unchanged.
        return json.dumps(run, indent=1).encode(), run

    def grade_stream(self, reply: Reply, run: dict[str, Any] | None) -> None:
        """Clauses 1, 2, 4, 7 and 8 on one streamed reply."""
        for channel, msg in reply.frames:
            env = msg.envelope
            if env.protocol_id != AGUI_PROTOCOL_ID or env.content_type != ContentType.JSON:
                self.fail(1, "a reply frame with another protocol_id or content_type",
                          show(channel, msg))
            if channel != BRIDGE_CHANNEL:
                self.fail(7, "a reply on another channel than the request's", show(channel, msg))
            if msg.frame_type in (BridgeFrameType.BRIDGE_STREAM_DATA,
                                  BridgeFrameType.BRIDGE_STREAM_END) and env.method:
                self.fail(2, "a stream frame carries a method (method_len must be 0)",
                          show(channel, msg))
        for frame_type, payload in reply.discovery:
            if BridgeFrameType.BRIDGE_REQUEST <= frame_type <= BridgeFrameType.BRIDGE_STREAM_END:
                self.fail(7, "a Bridge frame on the Discovery channel 0x0010",
                          {"frameType": f"0x{frame_type:04X}", "payload": payload[:200].hex()})
        if reply.undecodable:
            self.fail(2, f"an undecodable reply frame: {reply.undecodable[0]}")
        if reply.cut:
            self.fail(2, reply.cut, show(*reply.frames[-1]) if reply.frames else None)
            return
        kinds = [m.frame_type for _, m in reply.frames]
        ends = [i for i, k in enumerate(kinds) if k is BridgeFrameType.BRIDGE_STREAM_END]
        if ends != [len(kinds) - 1]:
            at = ends[0] if ends else len(kinds) - 1
            self.fail(2, "the reply is not STREAM_DATA frames closed by exactly one STREAM_END",
                      show(*reply.frames[at]))
            return
        for channel, msg in reply.frames:
            expected = (MessageKind.STREAM_END if msg.frame_type is
                        BridgeFrameType.BRIDGE_STREAM_END else MessageKind.STREAM_DATA)
            if msg.envelope.message_kind != expected or (
                    expected is MessageKind.STREAM_END and not msg.envelope.final):
                self.fail(2, "message_kind/final do not match the stream frame",
                          show(channel, msg))
        ids = [m.stream_control.event_id if m.stream_control else -1 for _, m in reply.frames]
        for i in range(1, len(ids)):
            if ids[i] <= ids[i - 1]:
                self.fail(4, f"event_id {ids[i]} after {ids[i - 1]}: not strictly increasing",
                          show(*reply.frames[i]))
                break
        for channel, msg in reply.frames[:-1]:
            text = msg.body.lstrip()[:6]
            if text.startswith((b"data:", b"id:", b"event:", b"HTTP/")):
                self.fail(8, "an event body carries SSE/HTTP framing", show(channel, msg))
            try:
                decoded = json.loads(msg.body)
            except ValueError:
                decoded = None
            if not isinstance(decoded, dict) or "type" not in decoded:
                self.fail(1, "a STREAM_DATA body is not one AG-UI event object",
                          show(channel, msg))
        events = reply.events()
        found = lifecycle_violations(events)
        if found:
            first = min(found.values(), key=lambda v: v.index)
            broken = "; ".join(f"{v.rule}: {v.detail}" for v in found.values())
            self.fail(4, f"the run's events break {broken}", first.event)
        started = next((e for e in events if e.get("type") == "RUN_STARTED"), None)
        if run is not None and started is not None and (
                started.get("threadId"), started.get("runId")) != (run["threadId"], run["runId"]):
            self.fail(4, "RUN_STARTED does not carry the request's threadId/runId", started)

    async def check_refusals(self, peer: Peer) -> None:
        body, _ = self.body("Hello")
        other = await peer.run(body, protocol_id=UNCARRIED_PROTOCOL_ID)
        last = other.last
        if last is None or last.frame_type is not BridgeFrameType.BRIDGE_ERROR:
            self.fail(3, f"a run under protocol_id 0x{UNCARRIED_PROTOCOL_ID:02X} was not "
                      "answered BRIDGE_ERROR ProtocolUnsupported",
                      show(*other.frames[-1]) if other.frames else other.cut)
        else:
            error = pull_bridge_error_body(last.body)
            if error is None or error.code is not TransportErrorCode.PROTOCOL_UNSUPPORTED:
                self.fail(3, "the BRIDGE_ERROR for an uncarried protocol_id is not "
                          "ProtocolUnsupported", show(*other.frames[-1]))
        bad = await peer.run(b'{"threadId": "check-undeliverable"}')
        events = bad.events()
        if events and events[-1].get("type") == "RUN_FINISHED":
            self.fail(3, "a RunAgentInput without runId or messages was reported as a "
                      "successful run", events[-1])
        elif bad.last is None:
            self.fail(3, f"an undeliverable run got no answer ({bad.cut})")
        for index, event in enumerate(events):
            if event.get("type") == "RUN_ERROR" and index != len(events) - 1:
                self.fail(3, "RUN_ERROR is not the last in-stream event", event)

    async def check_safety(self, peer: Peer) -> None:
        body, _ = self.body("Hello")
        labelled = await peer.run(body, label=SafetyLabel(effect=Effect.DESTRUCTIVE))
        body, _ = self.body("Hello")
        bare = await peer.run(body, unlabelled=True)

        def accepted(reply: Reply) -> bool:
            return any(m.frame_type is BridgeFrameType.BRIDGE_STREAM_DATA for _, m in reply.frames)

        if accepted(labelled) != accepted(bare):
            self.fail(6, "a run without SafetyLabel was answered differently from the same run "
                      "labelled destructive (absence MUST be treated as destructive)",
                      show(*bare.frames[-1]) if bare.frames else bare.cut)
        else:
            self.note(6, "unlabelled and destructive runs both "
                      + ("accepted" if accepted(bare) else "refused"))

    async def check_cancel(self, peer: Peer) -> None:
        body, run = self.body(echo_prompt("cancel"), toolResultMode="in-run")
        run["tools"] = [echo_tool()]
        body = json.dumps(run).encode()
        reply = await peer.run(body, until_event="TOOL_CALL_END")
        if reply.last is None or reply.last.frame_type is not BridgeFrameType.BRIDGE_STREAM_DATA:
            self.note(5, "cancel: the run ended before a cancel could be sent (the agent did not "
                      "wait on the frontend tool)", skipped=True)
            return
        try:
            peer.session.cancel_run(reply.corr)
        except NpampError as exc:  # our session saw the stream end or fail meanwhile
            self.fail(5, f"the stream could not be cancelled: {exc}",
                      show(*reply.frames[-1]) if reply.frames else None)
            return
        await peer.flush()
        await peer.read(reply)
        last = reply.last
        acks = [m for _, m in reply.frames if m.frame_type is BridgeFrameType.BRIDGE_STREAM_END]
        if (last is None or last.frame_type is not BridgeFrameType.BRIDGE_STREAM_END
                or last.stream_control is None or not last.stream_control.cancel_ack
                or len(acks) != 1):
            self.fail(5, "a stream cancel was not acknowledged by a single cancel_ack "
                      "STREAM_END", show(*reply.frames[-1]) if reply.frames else reply.cut)
        elif any(e.get("type") == "RUN_ERROR" for e in reply.events()):
            self.fail(5, "a cancelled run was reported as an error (RUN_ERROR)",
                      next(e for e in reply.events() if e.get("type") == "RUN_ERROR"))
        else:
            self.note(5, "cancel acknowledged")

    async def check_resume(self, first: Reply) -> None:
        data = first.data
        if len(data) < 2 or not all(m.stream_control and m.stream_control.resumable
                                    for m in data):
            self.note(5, "resume: the stream was not advertised resumable", skipped=True)
            return
        cursor = data[0].stream_control.event_id if data[0].stream_control else 0
        async with _associate(self.target) as peer:
            peer.session.resume_run(first.corr, cursor=cursor,
                                    safety_label=SafetyLabel(effect=Effect.NON_IDEMPOTENT_WRITE))
            await peer.flush()
            again = await peer.read(Reply(first.corr))
        if again.last is None or again.last.frame_type is BridgeFrameType.BRIDGE_ERROR:
            self.fail(5, f"resuming after event_id {cursor} on a new association was refused",
                      show(*again.frames[-1]) if again.frames else again.cut)
            return
        expected = [m.body for m in data[1:]]
        if [m.body for m in again.data] != expected:
            self.fail(5, f"the resumed stream after event_id {cursor} is not the rest of the "
                      "run, octet for octet",
                      show(BRIDGE_CHANNEL, again.data[0]) if again.data else None)
        else:
            self.note(5, f"resumed after event_id {cursor} on a new association")

    async def run(self) -> Report:
        try:
            async with _associate(self.target) as peer:
                body, run = self.body("Hello over N-PAMP from iobridge check.")
                first = await peer.run(body)
                if first.last is not None and (
                        first.last.frame_type is BridgeFrameType.BRIDGE_ERROR):
                    error = pull_bridge_error_body(first.last.body)
                    why = error.code.name if error else "foreign error"
                    raise Failed(f"the peer refused a plain run ({why}: "
                                   f"{error.message if error else ''}); is this key agreed "
                                   "for AG-UI (agui_peers)?", show(*first.frames[-1]))
                self.grade_stream(first, run)
                events = first.events()
                if events and events[0].get("type") == "RUN_STARTED":
                    sent = json.loads(body)
                    if sent["threadId"] != events[0].get("threadId"):
                        self.fail(4, "the RunAgentInput was rewritten", events[0])
                await self.check_refusals(peer)
                await self.check_safety(peer)
                await self.check_cancel(peer)
            await self.check_resume(first)
        except (NpampError, OSError) as exc:
            for clause in TITLES:
                self.fail(clause, f"could not talk to the peer: {exc}")
        except Failed as exc:
            for clause in TITLES:
                self.fail(clause, exc.detail, exc.event)
        for clause, title in TITLES.items():
            rule = f"NPAMP.{clause}"
            if clause in self.problems:
                detail, event = self.problems[clause]
                outcome = Outcome.FAILED
            elif clause in self.skips:
                detail = "; ".join(self.skips[clause] + self.notes.get(clause, []))
                event, outcome = None, Outcome.SKIPPED
            else:
                detail = "; ".join(self.notes.get(clause, []))
                event, outcome = None, Outcome.PASSED
            self.report.add(Result(rule, "NPAMP", f"{SPEC} ({clause})", title, outcome,
                                   detail, event))
        return self.report


async def check_npamp(target: NpampTarget) -> Report:
    """Grade the N-PAMP peer at ``target`` against NPAMP-MAP-AGUI §10."""
    return await NpampCheck(target).run()


