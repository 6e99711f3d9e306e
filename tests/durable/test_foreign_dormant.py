"""A dormant durable run (checkpointed, held by no process) is its owner's alone: a member of
the same shared principal acting for another resource sees it exactly as a missing run — its
tool result, cancel and events, over HTTP and over N-PAMP — and what he sends is neither
stored nor wakes the run. The owner's own result then continues it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.durable.streams import parked
from tests.durable.test_durable_backend import body, model_agent, stored, until
from tests.helpers import CollectingSink, app_client
from tests.npamp_server import conftest as npamp

from iobridge.app import Backend
from iobridge.auth import AuthSettings, JwtSettings, Principal
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.npamp.aio import server_ssl_context
from iobridge.npamp.handshake import IdentityKey
from iobridge.npamp_server import client as agui_client
from iobridge.npamp_server.client import RunRefused
from iobridge.npamp_server.server import AgUiServer
from iobridge.runtime.run import Run

SECRET = "test-secret-that-is-long-enough-for-hs256!"
ALICE = Principal(id="acme", resource_ids=frozenset({"alice"}), default_resource="alice")
OPAQUE_ID = 0x50
certs, server_key = npamp.certs, npamp.server_key
client_key, other_key = npamp.client_key, npamp.other_key


def _member(sub: str) -> dict[str, str]:
    claims = {"sub": sub, "org": "acme", "exp": int(time.time()) + 600}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


async def _dormant(backend: Backend, fake: FakeOpenAI) -> str:
    """Alice's run, parked on a frontend call, then let go by this process (as at a
    shutdown): only its checkpoint holds it. Its call's id."""
    fake.push(calls(("c1", "get_weather", '{"city":"Oslo"}')), text("Sunny."))
    run = await backend.start_run(ALICE, body())
    call = (await until(run, "TOOL_CALL_END"))[-1][1]["toolCallId"]
    await parked(backend, "acme", "r1")
    backend.runtime.suspend_durable()
    async with asyncio.timeout(10):
        while not run.done:
            await asyncio.sleep(0.02)
    return str(call)


async def _untouched(backend: Backend) -> None:
    """Nothing of what Bob sent reached Alice's run: no result stored, not continued."""
    checkpoint = await backend.store.load_checkpoint("acme", "r1")
    assert checkpoint is not None and checkpoint.results == {}
    assert not backend.runtime.is_live(("acme", "r1"))


async def _finishes_with(backend: Backend, content: str) -> None:
    again = backend.get_run(ALICE, "r1")
    assert (await until(again, "RUN_FINISHED"))[-1][1]["type"] == "RUN_FINISHED"
    tool = [m for m in await stored(backend) if m["role"] == "tool"]
    assert [m["content"] for m in tool] == [content]


async def test_over_http_another_resource_s_dormant_run_answers_like_a_missing_one(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    settings = Settings(database_url=database_url, auth=AuthSettings(mode="jwt", jwt=JwtSettings(
        key=SECRET, principal_claim="org", resource_claim="sub")))
    backend = Backend(settings, agents=[model_agent(fake_openai.base_url)])
    async with app_client(create_app(backend)) as client:
        call = await _dormant(backend, fake_openai)
        bob = _member("bob")

        async def answers(run_id: str) -> list[tuple[int, Any]]:
            got = []
            for method, path, json_body in (
                ("POST", f"/io-bridge/runs/{run_id}/tool-calls/{call}/result",
                 {"content": "bob's pick"}),
                ("POST", f"/io-bridge/runs/{run_id}/cancel", {}),
                ("GET", f"/io-bridge/runs/{run_id}/events", None),
            ):
                response = await client.request(method, path, json=json_body, headers=bob)
                got.append((response.status_code, response.json()))
            return got

        foreign = await answers("r1")
        assert foreign == await answers("no-such-run")
        assert [status for status, _ in foreign] == [404, 404, 404]
        assert foreign[0][1]["error"]["code"] == "RUN_NOT_FOUND"
        await _untouched(backend)
        posted = await client.post(f"/io-bridge/runs/r1/tool-calls/{call}/result",
                                   json={"content": "alice's pick"}, headers=_member("alice"))
        assert posted.status_code == 200, posted.text
        await _finishes_with(backend, "alice's pick")


def _npamp(alice: IdentityKey, bob: IdentityKey) -> dict[str, Any]:
    """Two peer keys configured as one principal with different resources."""
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
    }


async def _refusal(attempt: Any) -> tuple[Any, str, bytes]:
    with pytest.raises(RunRefused) as refused:
        async with asyncio.timeout(npamp.WAIT):
            await attempt
    return refused.value.transport_code, refused.value.reason, refused.value.body


async def test_over_npamp_another_resource_s_dormant_run_answers_like_a_missing_one(
    database_url: str, fake_openai: FakeOpenAI, certs: tuple[Path, Path],
    server_key: IdentityKey, client_key: IdentityKey, other_key: IdentityKey,
) -> None:
    settings = Settings(
        database_url=database_url, npamp=_npamp(client_key, other_key),
        auth={"mode": "api-key", "api_keys": [{"sha256": "0" * 64, "principal": "x"}]},
    )
    async with contextlib.AsyncExitStack() as stack:
        backend = await stack.enter_async_context(
            Backend(settings, agents=[model_agent(fake_openai.base_url)])
        )
        listener = await AgUiServer(backend, identity=server_key).listen(
            "127.0.0.1", 0, server_ssl_context(*certs)
        )
        stack.push_async_callback(listener.wait_closed)

        def opaque(key: IdentityKey) -> contextlib.AbstractAsyncContextManager[Any]:
            return agui_client.connect_opaque(  # type: ignore[no-any-return]
                "127.0.0.1", listener.port, identity=key, pinned=[server_key.fingerprint],
                protocol_id=OPAQUE_ID,
            )

        call = await _dormant(backend, fake_openai)
        bob = await stack.enter_async_context(opaque(other_key))

        async def answers(run_id: str) -> list[tuple[Any, str, bytes]]:
            return [
                await _refusal(bob.submit_tool_result(run_id, call, {"content": "bob's pick"})),
                await _refusal(bob.cancel(run_id)),
            ]

        foreign = await answers("r1")
        assert foreign == await answers("no-such-run")
        assert json.loads(foreign[0][2])["error"]["code"] == "RUN_NOT_FOUND"
        await _untouched(backend)
        alice = await stack.enter_async_context(opaque(client_key))
        answer = await alice.submit_tool_result("r1", call, {"content": "alice's pick"})
        assert answer == {"status": "accepted"}
        await _finishes_with(backend, "alice's pick")



def _jwt_settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, auth=AuthSettings(mode="jwt", jwt=JwtSettings(
        key=SECRET, principal_claim="org", resource_claim="sub")))


async def test_the_owner_resuming_her_dormant_run_continues_it_here_and_is_caught_up(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    async with Backend(_jwt_settings(database_url),
                       agents=[model_agent(fake_openai.base_url)]) as backend:
        call = await _dormant(backend, fake_openai)
        run, cursor = await backend.resume(ALICE, "r1", None)
        assert isinstance(run, Run) and run.ids is not None and run.ids.epoch == 1
        sink = CollectingSink(stop_after=1)
        await backend.follow(run, sink, after=cursor, detach_grace=3600)
        assert [json.loads(d)["type"] for _, d in sink.events] == [
            "RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
        await backend.submit_tool_result(ALICE, "r1", call, {"content": "alice's pick"})
        await _finishes_with(backend, "alice's pick")


async def test_the_owner_cancelling_her_dormant_run_ends_it(
    database_url: str, fake_openai: FakeOpenAI
) -> None:
    async with Backend(_jwt_settings(database_url),
                       agents=[model_agent(fake_openai.base_url)]) as backend:
        await _dormant(backend, fake_openai)
        assert await backend.cancel_run(ALICE, "r1") is True
        again = backend.get_run(ALICE, "r1")
        ended = await until(again, "RUN_FINISHED")
        assert ended[-1][1]["outcome"] == {"type": "cancelled"}
