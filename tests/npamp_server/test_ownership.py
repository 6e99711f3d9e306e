"""The ownership matrix over N-PAMP: another peer's busy thread and runIds are as if absent.

Alice and Bob are two peer keys mapped to two principals (resources ``ra`` and ``rb``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.helpers import run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.npamp.bridge import TransportErrorCode
from iobridge.npamp_server.client import AgUiEvent, RunRefused

from .conftest import WAIT, StartHarness

pytestmark = pytest.mark.timeout(30)
AUTH = {"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]}


async def collect(stream: Any) -> list[AgUiEvent]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


def agents(gate: asyncio.Event) -> list[FunctionAgent]:
    async def paced(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "waiting "
        await gate.wait()
        yield "done"

    async def quick(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "hi"

    return [FunctionAgent(paced, id="paced"), FunctionAgent(quick, id="quick")]


def peers(alice: Any, bob: Any) -> list[dict[str, Any]]:
    return [
        {"fingerprint": alice.fingerprint, "principal": "alice", "resource_ids": ["ra"]},
        {"fingerprint": bob.fingerprint, "principal": "bob", "resource_ids": ["rb"]},
    ]


async def refusal(client: Any, body: dict[str, Any]) -> tuple[Any, str]:
    with pytest.raises(RunRefused) as refused:
        await collect(client.run(body))
    return refused.value.transport_code, refused.value.reason


async def test_busy_foreign_thread_is_refused_like_an_idle_foreign_one(
    harness: StartHarness, client_key: Any, other_key: Any
) -> None:
    gate = asyncio.Event()
    settings = {"auth": AUTH, "npamp": {"peers": peers(client_key, other_key)}}
    async with harness(agents=agents(gate), **settings) as h:
        async with h.client(client_key) as alice, h.client(other_key) as bob:
            await collect(alice.run(run_body("x", thread_id="idle", run_id="a1", agentId="quick")))
            live = aiter(alice.run(run_body("x", thread_id="busy", run_id="a2", agentId="paced")))
            assert (await anext(live)).type == "RUN_STARTED"
            busy = await refusal(bob, run_body("y", thread_id="busy", run_id="b1", agentId="quick"))
            idle = await refusal(bob, run_body("y", thread_id="idle", run_id="b2", agentId="quick"))
            assert busy == idle
            assert busy[0] is TransportErrorCode.NOT_DELIVERED
            assert "THREAD_NOT_FOUND" in busy[1] and "BUSY" not in busy[1]
            gate.set()
            rest = [event async for event in live]
        assert rest[-1].type == "RUN_FINISHED"


@pytest.mark.parametrize("reused", ["a-live", "a-done"], ids=["live", "finished"])
async def test_a_foreign_run_id_is_free_and_the_owners_stream_still_resumes(
    harness: StartHarness, client_key: Any, other_key: Any, reused: str
) -> None:
    gate = asyncio.Event()
    settings = {"auth": AUTH, "npamp": {"peers": peers(client_key, other_key)}}
    async with harness(agents=agents(gate), **settings) as h:
        async with h.client(client_key) as alice:
            done = alice.run(run_body("x", thread_id="t1", run_id="a-done", agentId="quick"))
            finished = await collect(done)
            live = alice.run(run_body("x", thread_id="t2", run_id="a-live", agentId="paced"))
            iterator = aiter(live)
            assert (await anext(iterator)).type == "RUN_STARTED"
            async with h.client(other_key) as bob:
                mine = await collect(
                    bob.run(run_body("y", thread_id="tb", run_id=reused, agentId="quick"))
                )
                fresh = await collect(
                    bob.run(run_body("y", thread_id="tc", run_id="unused", agentId="quick"))
                )
            assert [e.type for e in mine] == [e.type for e in fresh]
            assert mine[-1].type == "RUN_FINISHED"
            gate.set()
            rest = [event async for event in iterator]
            assert rest[-1].type == "RUN_FINISHED"
        # Alice's finished stream is still retained for her, unchanged.
        async with h.client(client_key) as alice:
            again = await collect(alice.resume(done.correlation_id, 0))
        assert [(e.event_id, e.raw) for e in again] == [(e.event_id, e.raw) for e in finished]
        assert h.run("a-done", "alice").resource_id == "ra"
        assert h.run(reused, "bob").resource_id == "rb"
