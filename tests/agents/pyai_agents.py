"""pydantic-ai agents the tests import by path (``pydantic_ai = "pyai_agents:..."``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

Respond = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def streamed(respond: Respond) -> FunctionModel:
    """A FunctionModel that streams what ``respond`` answers (text, or tool calls)."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = respond(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                args = part.args if isinstance(part.args, str) else json.dumps(part.args)
                yield {index: DeltaToolCall(name=part.tool_name, json_args=args,
                                            tool_call_id=part.tool_call_id)}

    return FunctionModel(stream_function=stream, model_name=getattr(respond, "__name__", None))


@dataclass
class Deps:
    """What the weather agent's tool needs: where it reads the weather from."""

    station: str


#: Every message list the weather model was given, per request (for history checks).
SEEN: list[list[ModelMessage]] = []


def _weather_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls ``lookup``, then the frontend ``confirm`` tool, then answers with both results."""
    SEEN.append(list(messages))
    returns = [
        p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    done = {p.tool_name for p in returns}
    if "lookup" not in done:
        return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Oslo"}, tool_call_id="c1")])
    if "confirm" not in done and "confirm" in {t.name for t in info.function_tools}:
        return ModelResponse(
            parts=[ToolCallPart("confirm", {"question": "Go?"}, tool_call_id="c2")]
        )
    summary = "; ".join(f"{p.tool_name}={p.model_response_str()}" for p in returns)
    return ModelResponse(parts=[TextPart(f"Done: {summary}")])


weather_agent = Agent(
    streamed(_weather_model), deps_type=Deps, name="weather", instructions="Be brief."
)


@weather_agent.tool
def lookup(ctx: RunContext[Deps], city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 21C at {ctx.deps.station}"


#: Not an agent: the TOML loader must refuse it with one line.
not_an_agent = "just a string"
