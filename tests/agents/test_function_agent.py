"""Agents written as plain functions (``FunctionAgent``, ``function_agent``), through a
Backend: what discovery says of them, and what a run of each form (async generator,
coroutine, plain function) streams and finishes with."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent, function_agent
from iobridge.agents.tools import tool
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings


@tool
def lookup(query: str) -> str:
    """Look a word up."""
    return query.upper()


async def _run(agent: Agent, thread: str = "t") -> list[dict[str, Any]]:
    async with Backend(Settings(database_url="memory://"), agents=[agent]) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": thread, "runId": "r", "agentId": agent.id, "forwardedProps": {},
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
        })
        await run.task
        return [json.loads(data) for _, data in run.log.entries(0)]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def _described(agent: Agent) -> dict[str, Any]:
    async with Backend(Settings(database_url="memory://"), agents=[agent]) as backend:
        return backend.describe_agent(agent.id)


async def test_discovery_takes_the_first_docstring_paragraph_and_the_id_as_name() -> None:
    async def helper(ctx: RunContext) -> str:
        """Answers questions.

        Details for the code's readers.
        """
        return "ok"

    described = await _described(FunctionAgent(helper, id="helper"))
    assert described["name"] == "helper"
    assert described["description"] == "Answers questions."


async def test_an_agent_without_a_docstring_has_an_empty_description() -> None:
    async def quiet(ctx: RunContext) -> None:
        return None

    assert (await _described(FunctionAgent(quiet, id="quiet")))["description"] == ""


async def test_the_decorator_passes_every_option_on() -> None:
    @function_agent(id="deco", name="Decorated", description="Given here.", tools=[lookup],
                    aliases=["dec"], capabilities={"custom": {"team": "a"}}, durable=True)
    async def deco(ctx: RunContext) -> str:
        """Not this."""
        return "ok"

    assert deco.durable is True
    described = await _described(deco)
    assert (described["name"], described["description"]) == ("Decorated", "Given here.")
    assert described["aliases"] == ["dec"]
    assert described["tools"] == [{"name": "lookup", "description": "Look a word up."}]
    assert described["capabilities"]["custom"]["team"] == "a"


async def test_the_model_id_given_is_discovered() -> None:
    async def helper(ctx: RunContext) -> str:
        return "ok"

    described = await _described(FunctionAgent(helper, id="helper", model_id="m-1"))
    assert described["modelId"] == "m-1"


async def test_a_coroutine_s_text_is_the_reply_and_its_json_value_the_run_result() -> None:
    async def says(ctx: RunContext) -> str:
        return "hello there"

    async def computes(ctx: RunContext) -> dict[str, int]:
        return {"answer": 42}

    said = await _run(FunctionAgent(says, id="says"))
    assert _text(said) == "hello there"
    assert "result" not in said[-1]
    computed = await _run(FunctionAgent(computes, id="computes"))
    assert _text(computed) == ""
    assert computed[-1]["type"] == "RUN_FINISHED" and computed[-1]["result"] == {"answer": 42}


async def test_a_coroutine_returning_none_finishes_with_nothing_said() -> None:
    async def silent(ctx: RunContext) -> None:
        return None

    events = await _run(FunctionAgent(silent, id="silent"))
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_FINISHED"]
    assert "result" not in events[-1]


async def test_a_plain_function_s_return_value_is_the_reply() -> None:
    def plain(ctx: RunContext) -> str:
        return "no await needed"

    assert _text(await _run(FunctionAgent(plain, id="plain"))) == "no await needed"


async def test_a_generator_streams_its_outputs_and_calls_tools_through_the_context() -> None:
    async def streams(ctx: RunContext) -> AsyncIterator[str]:
        yield "looking "
        found = await ctx.call_tool("lookup", {"query": "oslo"})
        yield f"found {found.value}"

    events = await _run(FunctionAgent(streams, id="streams", tools=[lookup]))
    assert _text(events) == "looking found OSLO"
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == '"OSLO"'


async def test_the_decorator_s_defaults_are_those_of_a_function_agent() -> None:
    @function_agent(id="plain")
    async def plain(ctx: RunContext) -> str:
        """Says ok."""
        return "ok"

    assert plain.durable is False
    described = await _described(plain)
    assert (described["name"], described["description"]) == ("plain", "Says ok.")
    assert "aliases" not in described and described["tools"] == []
    assert _text(await _run(plain)) == "ok"
