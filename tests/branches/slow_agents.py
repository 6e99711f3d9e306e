"""An agent that streams slowly, for runs that are still streaming when another run comes
(served by path: ``pydantic_ai = "tests.branches.slow_agents:agent"``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

#: Words the reply streams, and the seconds between them (about 3 s in all).
WORDS, PAUSE = 60, 0.05


async def _ticks(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    for _ in range(WORDS):
        yield "tick "
        await asyncio.sleep(PAUSE)


agent: Agent[None, str] = Agent(FunctionModel(stream_function=_ticks, model_name="slow"))
