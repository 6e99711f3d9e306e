"""An N-PAMP stream started on replica A is resumed, and cancelled, on replica B."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.replicas import WEATHER, Replica, start_replica
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.npamp.handshake import IdentityKey, SignatureScheme, load_identity
from iobridge.npamp_server.client import connect

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def npamp_pair(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, database_url: str, prefix: str
) -> Iterator[tuple[Replica, Replica, str]]:
    """Two replicas serving N-PAMP with one server identity (as replicas behind one name)."""
    keys = tmp_path_factory.mktemp("keys")
    assert CliRunner().invoke(app, ["npamp", "keygen", str(keys / "server")]).exit_code == 0
    fingerprint = load_identity(keys / "server").fingerprint
    replicas = [
        start_replica(name, tmp_path_factory.mktemp(name), redis_url=redis_url,
                      database_url=database_url, prefix=prefix, npamp=True,
                      args=("--npamp-key", str(keys / "server")),
                      api_keys=False)
        for name in ("A", "B")
    ]
    yield replicas[0], replicas[1], fingerprint
    for replica in replicas:
        output = replica.stop()
        assert "Traceback" not in output, output


async def _resume_on_b(a: Replica, b: Replica, fingerprint: str) -> tuple[list[int], list[str]]:
    key = IdentityKey.generate(SignatureScheme.ED25519)
    body = {
        "threadId": f"t-{uuid.uuid4().hex[:8]}", "runId": f"r-{uuid.uuid4().hex[:8]}",
        "tools": [WEATHER], "context": [], "forwardedProps": {"toolResultMode": "in-run"},
        "messages": [{"id": "u1", "role": "user", "content": "get_weather for Oslo"}],
    }
    assert a.npamp_port is not None and b.npamp_port is not None
    first: list[int] = []
    async with connect("127.0.0.1", a.npamp_port, identity=key, pinned=[fingerprint]) as client:
        stream = client.run(body)
        async for event in stream:
            first.append(event.event_id)
            if event.type == "TOOL_CALL_END":
                break  # the association to A drops while the run waits for the tool
    cursor, corr = stream.last_event_id - 2, stream.correlation_id
    ids: list[int] = []
    seen: list[str] = []
    async with connect("127.0.0.1", b.npamp_port, identity=key, pinned=[fingerprint]) as client:
        resumed = client.resume(corr, cursor)
        async with asyncio.timeout(20):
            async for event in resumed:
                ids.append(event.event_id)
                seen.append(event.type)
                if event.type == "TOOL_CALL_END":
                    await client.cancel(resumed)  # B forwards the cancel to A
        assert resumed.cancelled
    assert first[-1] == cursor + 2
    return ids, seen


def test_an_npamp_stream_started_on_a_resumes_on_b(
    npamp_pair: tuple[Replica, Replica, str], tmp_path: Path
) -> None:
    a, b, fingerprint = npamp_pair
    ids, seen = asyncio.run(_resume_on_b(a, b, fingerprint))
    # The replay starts right after the cursor, every event once, in order.
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert seen[1] == "TOOL_CALL_END"
    assert seen[-1] != "RUN_ERROR"
