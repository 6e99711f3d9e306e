"""``FunctionAgent``: an agent written as a plain async function or async generator.

The generator form yields outputs (strings are text) and calls tools through ``ctx``; the
coroutine form returns the reply text (or any JSON value, which becomes
``RUN_FINISHED.result``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, cast

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput, FinalResult
from iobridge.agents.tools import ServerTool

AgentFunc = Callable[[RunContext], Any]


class FunctionAgent(Agent):
    """Wraps ``func(ctx)`` (async generator of outputs, or coroutine returning the reply).

    What the function does is unknown to the bridge, so it declares only its server tools;
    ``capabilities`` (an AG-UI ``AgentCapabilities`` object) says the rest.
    """

    agent_type = "function"

    def __init__(
        self,
        func: AgentFunc,
        *,
        id: str,
        name: str | None = None,
        description: str | None = None,
        tools: Sequence[ServerTool] = (),
        model_id: str | None = None,
        aliases: Sequence[str] = (),
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        self.func = func
        self.id = id
        self.aliases = tuple(aliases)
        self.name = name or id
        self.description = description or (inspect.getdoc(func) or "").split("\n\n")[0]
        self.tools = tuple(tools)
        self.model_id = model_id
        if capabilities is not None:
            self.set_capabilities(capabilities)

    def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        produced = self.func(ctx)
        if inspect.isasyncgen(produced):
            # The function's own generator, not a wrapper: one less hop per output.
            return cast(AsyncIterator[AgentOutput], produced)
        return self._single(produced)

    @staticmethod
    async def _single(produced: Any) -> AsyncIterator[AgentOutput]:
        value = await produced if inspect.isawaitable(produced) else produced
        if isinstance(value, str):
            yield value
        elif value is not None:
            yield FinalResult(value=value)


def function_agent(
    *, id: str, name: str | None = None, description: str | None = None,
    tools: Sequence[ServerTool] = (), aliases: Sequence[str] = (),
    capabilities: Mapping[str, Any] | None = None,
) -> Callable[[AgentFunc], FunctionAgent]:
    """Decorator form of ``FunctionAgent``."""

    def wrap(func: AgentFunc) -> FunctionAgent:
        return FunctionAgent(
            func, id=id, name=name, description=description, tools=tools, aliases=aliases,
            capabilities=capabilities,
        )

    return wrap
