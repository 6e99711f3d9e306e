"""Agent aliases and an unusable default agent over N-PAMP: the same catalog as HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.helpers import run_body

from iobridge.agents.function import FunctionAgent
from iobridge.npamp_server.client import RunRefused

from .conftest import WAIT, StartHarness


async def _reply(ctx: Any) -> str:
    return "aliased"


async def collect(stream: Any) -> list[Any]:
    async with asyncio.timeout(WAIT):
        return [event async for event in stream]


async def test_alias_runs_the_canonical_agent_and_a_missing_default_is_refused(
    harness: StartHarness, client_key: Any
) -> None:
    agent = FunctionAgent(_reply, id="io-agent", aliases=["ioAgent"])
    async with harness(agents=[agent], default_agent="ghost") as h, h.client(client_key) as c:
        events = await collect(c.run(run_body("x", thread_id="ta", agentId="ioAgent")))
        text = "".join(e.data["delta"] for e in events if e.type == "TEXT_MESSAGE_CONTENT")
        assert (events[-1].type, text) == ("RUN_FINISHED", "aliased")
        assert h.http is not None
        thread = (await h.http.get("/io-bridge/threads/ta")).json()
        assert thread["agentId"] == "io-agent"
        with pytest.raises(RunRefused) as info:
            await collect(c.run(run_body("x", thread_id="tb", run_id="r2")))
        assert "AGENT_UNAVAILABLE" in info.value.reason
        assert "the default agent 'ghost' is not configured" in info.value.reason
        assert (await h.http.get("/io-bridge/threads/tb")).status_code == 404
