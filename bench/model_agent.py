"""Per-event overhead of the model-agent path against a plain scripted agent.

Both agents produce the same 10,000-delta reply into a session that only counts outputs:

- ``scripted``: an ``Agent`` whose ``run`` yields the deltas itself (the floor).
- ``model``: ``ModelAgent`` over pydantic-ai's ``FunctionModel`` streaming the same deltas,
  so the figure is pydantic-ai's event stream plus our translation into agent outputs.
- ``pydantic-ai``: the same ``FunctionModel`` run with ``agent.iter`` and its events dropped,
  i.e. what pydantic-ai costs on its own; ``model`` minus this is what the bridge adds.

Prints the median of a few rounds per path and the ratio (same process, same run).
Run: ``.venv/bin/python bench/model_agent.py [--deltas N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.model import ModelAgent
from iobridge.agents.outputs import AgentOutput, TextDelta


class CountingSession:
    """A run session that counts what it is given (no tools are called here)."""

    def __init__(self) -> None:
        self.outputs = 0

    def emit(self, output: AgentOutput) -> None:
        self.outputs += 1

    def start_tool_call(self, name: str, *, tool_call_id: str | None = None) -> Any:
        raise NotImplementedError

    def is_frontend_tool(self, name: str) -> bool:
        return False


class ScriptedAgent(Agent):
    """Yields ``n`` deltas directly."""

    id = "scripted"
    name = "scripted"

    def __init__(self, n: int) -> None:
        self.n = n

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for i in range(self.n):
            yield TextDelta(delta=f"w{i} ")


def model_agent(n: int) -> ModelAgent:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for i in range(n):
            yield f"w{i} "

    return ModelAgent(id="model", model=FunctionModel(stream_function=stream))


class BarePydanticAI(Agent):
    """pydantic-ai's own streaming loop; each raw event is only counted by the session."""

    id = "pydantic-ai"
    name = "pydantic-ai"

    def __init__(self, n: int) -> None:
        self.inner = model_agent(n)

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        agent = PydanticAgent(self.inner.model)
        session = ctx.session
        assert isinstance(session, CountingSession)
        async with agent.iter("go") as agent_run:
            async for node in agent_run:
                if PydanticAgent.is_model_request_node(node):
                    async with node.stream(agent_run.ctx) as events:
                        async for _ in events:
                            session.outputs += 1
        return
        yield  # an async generator like every agent


async def time_run(agent: Agent) -> tuple[float, int]:
    session = CountingSession()
    ctx = RunContext(thread_id="t", run_id="r", session=session,
                     messages=[{"id": "u", "role": "user", "content": "go"}])
    start = time.perf_counter()
    async for output in agent.run(ctx):
        session.emit(output)
    return time.perf_counter() - start, session.outputs


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.deltas
    results: dict[str, list[float]] = {"scripted": [], "pydantic-ai": [], "model": []}
    counts: dict[str, int] = {}
    await time_run(model_agent(10))  # warm imports and caches
    for _ in range(args.rounds):
        agents: list[tuple[str, Agent]] = [
            ("scripted", ScriptedAgent(n)), ("pydantic-ai", BarePydanticAI(n)),
            ("model", model_agent(n)),
        ]
        for label, agent in agents:
            seconds, count = await time_run(agent)
            results[label].append(seconds)
            counts[label] = count
    print(f"{n} deltas, median of {args.rounds} rounds")
    print(f"{'path':<13}{'outputs':>9}{'seconds':>10}{'µs/delta':>10}")
    medians = {label: statistics.median(times) for label, times in results.items()}
    for label, seconds in medians.items():
        print(f"{label:<13}{counts[label]:>9}{seconds:>10.3f}{seconds / n * 1e6:>10.1f}")
    print(f"ratio model/scripted: {medians['model'] / medians['scripted']:.1f}x")
    overhead = (medians["model"] - medians["pydantic-ai"]) / n * 1e6
    print(f"bridge overhead on top of pydantic-ai per delta: {overhead:.1f} µs")


if __name__ == "__main__":
    asyncio.run(main())
