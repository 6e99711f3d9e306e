"""The demo agent's replies through a Backend: several tool calls in one message, frontend
calls that end the run in next-run mode, and the echo of a message that asks for nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from iobridge.agents.demo import ECHO_LENGTH
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings

WEATHER = {"name": "get_weather", "description": "Weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


async def _run(text: str | None, tools: tuple[dict[str, Any], ...] = ()) -> list[dict[str, Any]]:
    """A run of the demo on one user message (``None``: no message at all)."""
    messages = [] if text is None else [{"id": "m", "role": "user", "content": text}]
    async with Backend(Settings(database_url="memory://")) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": "t", "runId": "r", "tools": list(tools),
            "forwardedProps": {"toolResultMode": "next-run"}, "messages": messages})
        assert run.task is not None
        await run.task
        return [json.loads(data) for _, data in run.log.entries(0)]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_several_server_tools_are_called_together_and_reported_in_order() -> None:
    text = _text(await _run("what time is it, and 6 * 7?"))
    assert text.startswith("Calling current_time, calculate.The current time is 20")
    assert text.endswith("(UTC). 6 * 7 = 42.")


async def test_a_frontend_call_in_next_run_mode_ends_the_run_before_any_report() -> None:
    """The server tool's result is in the run, but the demo says nothing of it until the
    client's next run brings the frontend result."""
    events = await _run("get_weather city=Oslo and the time", (WEATHER,))
    assert _text(events) == "Calling get_weather, current_time."
    starts = [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"]
    assert starts == ["get_weather", "current_time"]
    args = [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert args == ['{"city":"Oslo"}', "{}"]
    assert events[-1]["type"] == "RUN_FINISHED"


ECHO_TAIL = (" I am the offline demo agent: ask me for the current_time, to calculate "
             "2 + 3 * 4, or name one of your frontend tools.")


async def test_a_message_that_asks_for_nothing_is_echoed_with_what_the_demo_can_do() -> None:
    assert _text(await _run("   ")) == "You said: (nothing)." + ECHO_TAIL
    assert _text(await _run(None)) == "You said: (nothing)." + ECHO_TAIL


async def test_the_echo_quotes_a_message_of_exactly_echo_length_whole() -> None:
    word = "a" * ECHO_LENGTH
    assert _text(await _run(word)) == f"You said: {word}." + ECHO_TAIL
    assert _text(await _run(word + "b")) == f"You said: {word}…." + ECHO_TAIL


async def _answered_in_run(result: dict[str, Any]) -> str:
    """The demo's reply once the client posts ``result`` for its get_weather call in-run."""
    async with Backend(Settings(database_url="memory://")) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": "t", "runId": "r", "tools": [WEATHER],
            "forwardedProps": {"toolResultMode": "in-run"},
            "messages": [{"id": "m", "role": "user", "content": "get_weather city=Oslo"}]})
        assert run.task is not None
        events: list[dict[str, Any]] = []
        async with asyncio.timeout(10):
            async for batch in run.log.follow():
                events += [json.loads(data) for _, data in batch]
                ends = [e for e in events if e["type"] == "TOOL_CALL_END"]
                if ends and not any(e["type"] == "TOOL_CALL_RESULT" for e in events):
                    await backend.submit_tool_result(ANONYMOUS, "r", ends[0]["toolCallId"],
                                                     json.dumps(result).encode())
            await run.task
    return _text(events)


@pytest.mark.parametrize(("result", "said"), [
    ({"result": {"value": 21, "unit": "C"}},
     'The tool get_weather returned {"value":21,"unit":"C"}.'),
    ({"content": "sensor offline", "isError": True},
     "The tool get_weather reported an error: sensor offline."),
    ({"result": {"code": 3}, "isError": True},
     'The tool get_weather reported an error: {"code":3}.'),
    ({"error": "no such city"}, "The tool get_weather reported an error: no such city."),
], ids=["json-value", "error-text", "error-without-reason", "error"])
async def test_a_frontend_result_posted_in_run_is_reported_as_the_client_sent_it(
    result: dict[str, Any], said: str
) -> None:
    assert await _answered_in_run(result) == f"Calling get_weather.{said}"
