"""Ownership by resource as well as principal on every run route (issue 29): with
``principal_claim = "org"`` (or API keys sharing a principal name) two members of one
principal act for different resources, and one sees the other's run exactly as a missing one
— its events, its cancel, its tool results — in one process and across replicas."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from tests.cluster.replicas import redis_server
from tests.helpers import LiveServer, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import AuthSettings, JwtSettings, Principal
from iobridge.config import Settings
from iobridge.errors import NotFoundError
from iobridge.http.app import create_app

SECRET = "test-secret-that-is-long-enough-for-hs256!"
PICK = {"name": "pick", "description": "Pick one", "parameters": {"type": "object"}}
ALICE = Principal(id="acme", resource_ids=frozenset({"alice"}), default_resource="alice")
BOB = Principal(id="acme", resource_ids=frozenset({"bob"}), default_resource="bob")


def _member(sub: str) -> dict[str, str]:
    claims = {"sub": sub, "org": "acme", "exp": int(time.time()) + 600}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


async def _asks(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    result = await ctx.call_tool("pick", {})
    yield f"picked {result.content}"


def _settings(**extra: Any) -> Settings:
    return Settings(database_url="memory://", auth=AuthSettings(mode="jwt", jwt=JwtSettings(
        key=SECRET, principal_claim="org", resource_claim="sub")), **extra)


async def test_a_member_of_a_shared_principal_sees_another_resource_s_run_as_missing() -> None:
    app = create_app(Backend(_settings(), agents=[FunctionAgent(_asks, id="asks")]))
    alice, bob = _member("alice"), _member("bob")
    body = run_body("go", tools=[PICK], agentId="asks")
    with LiveServer(app) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
            client.stream("POST", "/io-bridge/run", json=body, headers=alice) as stream,
        ):
            call = None
            lines = stream.aiter_lines()  # one iterator, kept open: the run lives with it
            async for line in lines:
                if line.startswith("data: ") and '"TOOL_CALL_END"' in line:
                    call = json.loads(line[6:])["toolCallId"]
                    break
            assert call is not None

            async def answers(run_id: str, call_id: str) -> list[tuple[int, Any]]:
                got = []
                for method, path, json_body in (
                    ("GET", f"/io-bridge/runs/{run_id}/events", None),
                    ("POST", f"/io-bridge/runs/{run_id}/cancel", {}),
                    ("POST", f"/io-bridge/runs/{run_id}/tool-calls/{call_id}/result",
                     {"result": "bob's pick"}),
                ):
                    response = await client.request(method, path, json=json_body, headers=bob)
                    got.append((response.status_code, response.json()))
                return got

            # Bob's answers for Alice's run are his answers for a run that does not exist.
            foreign = await answers("r1", call)
            assert foreign == await answers("no-such-run", call)
            assert {status for status, _ in foreign} == {404}
            # Nothing of Alice's run changed: her own result goes through, her run finishes.
            posted = await client.post(f"/io-bridge/runs/r1/tool-calls/{call}/result",
                                       json={"result": "alice's pick"}, headers=alice)
            assert posted.status_code == 200, posted.text
            rest = [json.loads(line[6:]) async for line in lines if line.startswith("data: ")]
    assert rest[-1]["type"] == "RUN_FINISHED"
    assert "alice's pick" in json.dumps(rest) and "bob's pick" not in json.dumps(rest)


async def test_across_replicas_another_resource_s_run_is_missing(tmp_path: Path) -> None:
    """Bob on replica B: Alice's run on A is missing for resume, cancel and tool results
    (the shared record and the owner both check the resource)."""
    with redis_server(tmp_path) as url:
        settings = _settings(redis_url=url, redis_prefix="shared")
        agent = FunctionAgent(_asks, id="asks")
        async with Backend(settings, agents=[agent]) as a, Backend(settings,
                                                                   agents=[agent]) as b:
            body = {**run_body("go", tools=[PICK], agentId="asks")}
            run = await a.start_run(ALICE, body)
            while b"TOOL_CALL_END" not in b"".join(d for _, d in run.log.entries()):
                await asyncio.sleep(0.01)
            call = next(json.loads(d)["toolCallId"] for _, d in run.log.entries()
                        if b"TOOL_CALL_END" in d)
            for attempt in (
                b.resume(BOB, "r1", None),
                b.find_run(BOB, "r1"),
                b.cancel_run(BOB, "r1"),
                b.submit_tool_result(BOB, "r1", call, {"result": "bob's pick"}),
                b.find_run(BOB, "no-such-run"),  # what a missing run answers: the same
            ):
                with pytest.raises(NotFoundError) as missing:
                    await attempt
                assert (missing.value.code, missing.value.message) == (
                    "RUN_NOT_FOUND", "unknown run")
            # Alice, through B, still reaches her run on A.
            remote, _ = await b.resume(ALICE, "r1", None)
            assert remote.resource_id == "alice"
            await b.submit_tool_result(ALICE, "r1", call, {"result": "alice's pick"})
            await asyncio.wait_for(asyncio.shield(run.task), 5)
            assert b"alice's pick" in b"".join(d for _, d in run.log.entries())
            assert not run.stop_reason  # Bob's cancel reached nothing
