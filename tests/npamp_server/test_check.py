"""``iobridge check npamp://HOST:PORT``: our N-PAMP server passes the eight NPAMP-MAP-AGUI
clauses over real TLS on loopback; a small, deliberately broken peer fails the clause it breaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.conformance.check.npamp_checks import NpampTarget, check_npamp
from iobridge.conformance.check.report import Report
from iobridge.npamp.aio import Association, TransportConfig, serve, server_ssl_context
from iobridge.npamp.bridge import (
    AGUI_PROTOCOL_ID,
    BRIDGE_CHANNEL,
    BridgeSession,
    Effect,
    RunRequested,
    TransportErrorCode,
)
from iobridge.npamp.handshake import HandshakeConfig, IdentityKey, SignatureScheme

from .conftest import StartHarness

pytestmark = pytest.mark.timeout(60)


def target(port: int, server_key: IdentityKey, client_key: IdentityKey) -> NpampTarget:
    return NpampTarget(host="127.0.0.1", port=port, identity=client_key,
                       pinned=[server_key.fingerprint], timeout=5)


def outcomes(report: Report) -> dict[str, str]:
    return {r.rule: r.outcome.value for r in report.results}


async def test_our_server_passes_the_eight_clauses(
    harness: StartHarness, server_key: IdentityKey, client_key: IdentityKey
) -> None:
    async with harness() as h:
        report = await check_npamp(target(h.port, server_key, client_key))
    assert outcomes(report) == {f"NPAMP.{n}": "passed" for n in range(1, 9)}
    details = {r.rule: r.detail for r in report.results}
    assert "cancel acknowledged" in details["NPAMP.5"]
    assert "resumed after event_id" in details["NPAMP.5"]
    assert details["NPAMP.6"] == "unlabelled and destructive runs both refused"


async def test_the_cli_grades_npamp_with_json_and_junit(
    harness: StartHarness, server_key: IdentityKey, tmp_path: Path
) -> None:
    junit = tmp_path / "npamp.xml"
    async with harness() as h:
        args = ["check", f"npamp://127.0.0.1:{h.port}", "--pin", server_key.fingerprint,
                "--json", "--junit", str(junit), "--timeout", "5"]
        result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"] == {"passed": 8, "failed": 0, "skipped": 0}
    assert next(r["spec"] for r in report["results"]) == "NPAMP-MAP-AGUI §10 (1)"
    assert b'<testsuite name="NPAMP" tests="8" failures="0" skipped="0">' in junit.read_bytes()


async def test_a_peer_without_agreement_fails_every_clause_with_the_reason(
    harness: StartHarness, server_key: IdentityKey, client_key: IdentityKey
) -> None:
    async with harness(npamp={"agui_peers": []}) as h:
        report = await check_npamp(target(h.port, server_key, client_key))
    assert set(outcomes(report).values()) == {"failed"}
    assert "PROTOCOL_UNSUPPORTED" in report.results[0].detail
    assert "agui_peers" in report.results[0].detail


def test_npamp_needs_a_pin() -> None:
    result = CliRunner().invoke(app, ["check", "npamp://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--pin" in result.output


# --- a deliberately broken peer -------------------------------------------------------------

EVENTS = [
    {"type": "RUN_STARTED", "threadId": "", "runId": ""},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "RUN_FINISHED", "threadId": "", "runId": ""},
]


async def _broken_peer(assoc: Association, broken: str) -> None:
    """A producer built on the sans-IO session: refuses destructive runs, breaks one rule."""
    session = BridgeSession(protocol_id=AGUI_PROTOCOL_ID)
    with contextlib.suppress(Exception):
        while True:
            frame = await assoc.receive(BRIDGE_CHANNEL)
            for event in session.receive_frame(frame.frame_type, frame.payload):
                if isinstance(event, RunRequested):
                    answer(session, event, broken)
            for frame_type, payload in session.data_to_send():
                await assoc.send(BRIDGE_CHANNEL, frame_type, payload)


def answer(session: BridgeSession, run: RunRequested, broken: str) -> None:
    corr = run.correlation_id
    effect = run.effect
    if broken == "unlabelled-is-read-only" and run.safety_label is None:
        effect = Effect.READ_ONLY  # the fail-safe forgotten: absence taken as harmless
    if effect >= Effect.DESTRUCTIVE:
        session.fail(corr, TransportErrorCode.SAFETY_POLICY, "destructive")
        return
    try:
        body = json.loads(run.body)
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
    except (ValueError, KeyError):
        session.fail(corr, TransportErrorCode.NOT_DELIVERED, "bad RunAgentInput")
        return
    events = [{**e, **ids} if "runId" in e else e for e in EVENTS]
    if broken == "event-after-terminal":
        events.append({"type": "STEP_STARTED", "stepName": "late"})
    for event in events:
        session.send_event(corr, json.dumps(event).encode())
    session.end_stream(corr)


@contextlib.asynccontextmanager
async def broken_peer(broken: str, key: IdentityKey, certs: tuple[Path, Path]
                      ) -> AsyncIterator[int]:
    config = TransportConfig(handshake=HandshakeConfig(
        identities=[key], peer_verifier=lambda scheme, public_key: True))

    async def handler(assoc: Association) -> None:
        await _broken_peer(assoc, broken)

    server = await serve("127.0.0.1", 0, server_ssl_context(*certs), config, handler)
    try:
        yield server.port
    finally:
        await server.wait_closed()


@pytest.mark.parametrize(
    ("broken", "clause", "detail"),
    [
        ("unlabelled-is-read-only", "NPAMP.6", "absence MUST be treated as destructive"),
        ("event-after-terminal", "NPAMP.4", "L1.nothing-after-terminal"),
    ],
)
async def test_a_broken_peer_fails_the_clause_it_breaks(
    broken: str, clause: str, detail: str, server_key: IdentityKey, client_key: IdentityKey,
    certs: tuple[Path, Path],
) -> None:
    async with broken_peer(broken, server_key, certs) as port:
        report = await check_npamp(target(port, server_key, client_key))
    results: dict[str, Any] = {r.rule: r for r in report.results}
    assert {rule for rule, r in results.items() if r.outcome.value == "failed"} == {clause}
    assert detail in results[clause].detail
    assert results["NPAMP.5"].outcome.value == "skipped"  # not resumable, nothing to cancel
    assert "not advertised resumable" in results["NPAMP.5"].detail


def test_an_unreachable_peer_is_one_line_and_exit_2_not_a_report() -> None:
    from tests.helpers import free_port

    key = IdentityKey.generate(SignatureScheme.ED25519)
    port = free_port()
    args = ["check", f"npamp://127.0.0.1:{port}", "--pin", key.fingerprint, "--json",
            "--timeout", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"iobridge: cannot connect to 127.0.0.1:{port}: ")
