"""Ownership by resource as well as principal over N-PAMP (issue 29): two peer keys
configured as one principal (``acme``) with different resourceIds (``alice``, ``bob``) — what
``[[npamp.peers]]`` expresses, as API keys sharing a principal name do over HTTP.

Alice's run is parked on a frontend tool. Every way Bob can name it answers exactly like a run
that does not exist, octet for octet: resuming her STREAM by its correlation_id, and the
opaque carriage's cancel and tool-result routes by her runId. Her run is untouched: her own
result finishes it, her stream still resumes, and the thread holds the exchange once. Both on
one server and across two replicas sharing Redis (the run on one, every later call on the
other: through the shared run record, the forwarded commands and the shared stream aliases).

A STREAM cancel names a stream of the sender's own association (CC-STREAM), so Bob's
session has nothing to cancel before any run is looked up; that path is not a run lookup and
has no test here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.replicas import redis_server
from tests.helpers import run_body
from tests.npamp_server import conftest as npamp
from tests.npamp_server.conftest import WAIT

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import Principal
from iobridge.config import Settings
from iobridge.npamp.aio import server_ssl_context
from iobridge.npamp.handshake import IdentityKey
from iobridge.npamp_server import client as agui_client
from iobridge.npamp_server.client import AgUiEvent, RunRefused
from iobridge.npamp_server.server import AgUiServer

pytestmark = pytest.mark.timeout(30)
# The N-PAMP server tests' certificate and keys, as fixtures here.
certs = npamp.certs
server_key, client_key, other_key = npamp.server_key, npamp.client_key, npamp.other_key
OPAQUE_ID = 0x50
PICK = {"name": "pick", "description": "Pick one", "parameters": {"type": "object"}}
#: api-key mode: a peer outside ``npamp.peers`` has no principal (not the anonymous one).
AUTH = {"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]}
ALICE = Principal(id="acme", resource_ids=frozenset({"alice"}), default_resource="alice")


async def _asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    result = await ctx.call_tool("pick", {})
    yield f"picked {result.content}"


def _npamp(alice: IdentityKey, bob: IdentityKey) -> dict[str, Any]:
    return {
        "agui_peers": "*",
        "peers": [
            {"fingerprint": alice.fingerprint, "principal": "acme", "resource_ids": ["alice"]},
            {"fingerprint": bob.fingerprint, "principal": "acme", "resource_ids": ["bob"]},
        ],
        "opaque_peers": [
            {"fingerprint": alice.fingerprint, "protocol_id": OPAQUE_ID},
            {"fingerprint": bob.fingerprint, "protocol_id": OPAQUE_ID},
        ],
        # The STREAM run waits for its result in the run, like the opaque carriage's.
        "tool_result_mode": "in-run",
    }


def _stream(port: int, server: IdentityKey, key: IdentityKey) -> Any:
    return agui_client.connect("127.0.0.1", port, identity=key, pinned=[server.fingerprint])


def _opaque(port: int, server: IdentityKey, key: IdentityKey) -> Any:
    return agui_client.connect_opaque(
        "127.0.0.1", port, identity=key, pinned=[server.fingerprint], protocol_id=OPAQUE_ID
    )


async def _refusal(attempt: Awaitable[Any]) -> tuple[Any, str, bytes]:
    """What the server answered instead of a stream or a response."""
    with pytest.raises(RunRefused) as refused:
        async with asyncio.timeout(WAIT):
            await attempt
    return refused.value.transport_code, refused.value.reason, refused.value.body


async def _drain(stream: Any) -> list[AgUiEvent]:
    return [event async for event in stream]


@contextlib.asynccontextmanager
async def _servers(
    certs: tuple[Path, Path], server_key: IdentityKey, settings: Settings, replicas: int
) -> AsyncIterator[tuple[Backend, list[int]]]:
    """``replicas`` Backends on ``settings``, each served over N-PAMP with one server key
    (replicas behind one name); the first Backend and every N-PAMP port."""
    agents = [FunctionAgent(_asks, id="asks")]
    async with contextlib.AsyncExitStack() as stack:
        backends = [
            await stack.enter_async_context(Backend(settings, agents=agents))
            for _ in range(replicas)
        ]
        ports = []
        for backend in backends:
            server = AgUiServer(backend, identity=server_key)
            listener = await server.listen("127.0.0.1", 0, server_ssl_context(*certs))
            stack.push_async_callback(listener.wait_closed)
            ports.append(listener.port)
        yield backends[0], ports


@pytest.mark.parametrize("replicas", [1, 2], ids=["one-server", "across-replicas"])
async def test_a_peer_of_a_shared_principal_sees_another_resource_s_run_as_missing(
    certs: tuple[Path, Path], server_key: IdentityKey, client_key: IdentityKey,
    other_key: IdentityKey, tmp_path: Path, replicas: int,
) -> None:
    """Alice's run on the first server; every later call (Bob's, and Alice's own result and
    resume) on the last one: with two replicas, through the shared record and aliases."""
    settings = Settings(
        database_url="memory://", auth=AUTH, npamp=_npamp(client_key, other_key),
    )
    with contextlib.ExitStack() as redis:
        if replicas > 1:
            url = redis.enter_context(redis_server(tmp_path))
            settings = settings.model_copy(update={"redis_url": url, "redis_prefix": "npamp-own"})
        async with _servers(certs, server_key, settings, replicas) as (backend, ports):
            await _exchange(backend, ports[0], ports[-1], server_key, client_key, other_key)


async def _exchange(
    backend: Backend, first: int, last: int, server: IdentityKey, alice_key: IdentityKey,
    bob_key: IdentityKey,
) -> None:
    async with contextlib.AsyncExitStack() as peers:
        alice = await peers.enter_async_context(_stream(first, server, alice_key))
        alice_late = await peers.enter_async_context(_stream(last, server, alice_key))
        alice_opaque = await peers.enter_async_context(_opaque(last, server, alice_key))
        bob = await peers.enter_async_context(_stream(last, server, bob_key))
        bob_opaque = await peers.enter_async_context(_opaque(last, server, bob_key))

        stream = alice.run(run_body("go", tools=[PICK], agentId="asks"), correlation_id=b"s1")
        events = aiter(stream)
        seen: list[AgUiEvent] = []
        async with asyncio.timeout(WAIT):
            while not seen or seen[-1].type != "TOOL_CALL_END":
                seen.append(await anext(events))
        call = seen[-1].data["toolCallId"]
        assert backend.runtime.get_run("acme", "r1").resource_id == "alice"

        # Bob's answers for Alice's run are his answers for a run that does not exist.
        async def answers(corr: bytes, run_id: str) -> list[tuple[Any, str, bytes]]:
            return [
                await _refusal(_drain(bob.resume(corr, 0))),
                await _refusal(bob_opaque.cancel(run_id)),
                await _refusal(
                    bob_opaque.submit_tool_result(run_id, call, {"result": "bob's pick"})
                ),
            ]

        foreign = await answers(b"s1", "r1")
        assert foreign == await answers(b"never-started", "no-such-run")
        assert all(b"alice" not in body for _, _, body in foreign)
        _, _, cancel_body = foreign[1]
        assert json.loads(cancel_body)["error"]["code"] == "RUN_NOT_FOUND"

        # Nothing of Alice's run changed: her result goes through, her run finishes.
        answer = await alice_opaque.submit_tool_result("r1", call, {"result": "alice's pick"})
        assert answer == {"status": "accepted"}
        async with asyncio.timeout(WAIT):
            seen += [event async for event in events]
        assert seen[-1].type == "RUN_FINISHED" and not stream.cancelled
        text = json.dumps([event.data for event in seen])
        assert "alice's pick" in text and "bob's pick" not in text
        # Her stream is still hers to resume (Bob's attempt did not release it).
        async with asyncio.timeout(WAIT):
            again = await _drain(alice_late.resume(b"s1", 0))
        assert [e.raw for e in again] == [e.raw for e in seen]

    page = await backend.list_messages(ALICE, "t1", format="agui")
    results = [m for m in page.messages if m["role"] == "tool"]
    calls = [c for m in page.messages for c in m.get("toolCalls") or []]
    assert [c["id"] for c in calls] == [call]
    assert [(m["toolCallId"], m["content"]) for m in results] == [(call, "alice's pick")]
