"""The demo agent: which tools a message asks for, with whose arguments, and bounded maths."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from iobridge.agents import demo
from iobridge.agents.demo import MAX_CALLS, DemoAgent, calculate, find_expression
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import InputError


def declared(name: str, *params: str, kind: str = "string") -> dict[str, Any]:
    properties = {p: {"type": kind} for p in params}
    return {"name": name, "description": name,
            "parameters": {"type": "object", "properties": properties}}


NOTICE = declared("show_notice", "text")
WEATHER = declared("get_weather", "city")
STOCK = declared("get_stock", "ticker")


def plan(text: str, tools: list[dict[str, Any]] | None = None) -> list[tuple[str, Any]]:
    return DemoAgent().plan(text, tools or [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is the current_time?", [("current_time", {})]),
        ("what time is it", [("current_time", {})]),
        ("look at the CLOCK", [("current_time", {})]),
        ("timeline and sometimes", []),
        ("What is 2 + 3 * 4?", [("calculate", {"expression": "2 + 3 * 4"})]),
        ('calculate {"expression": "7 * 6"} please', [("calculate", {"expression": "7 * 6"})]),
        ("calculate expression=9-1", [("calculate", {"expression": "9-1"})]),
        ("calculate something", []),
        ("current_time and 1 + 1", [("current_time", {}), ("calculate", {"expression": "1 + 1"})]),
        ("no tools here: a=1", []),
    ],
)
def test_server_tools_by_name_and_by_natural_words(text: str, expected: list[Any]) -> None:
    assert plan(text) == expected


def test_each_tool_gets_its_own_arguments() -> None:
    assert plan('show_notice text="Build finished" and get_weather {"city": "Oslo"}',
                [NOTICE, WEATHER]) == [
        ("show_notice", {"text": "Build finished"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert plan('get_weather {"city": "Oslo"} then show_notice', [NOTICE, WEATHER]) == [
        ("show_notice", {}), ("get_weather", {"city": "Oslo"}),
    ]
    assert plan("get_weather city=Oslo and get_stock ticker: ACME, city=Rome",
                [WEATHER, STOCK]) == [
        ("get_weather", {"city": "Oslo"}), ("get_stock", {"ticker": "ACME"}),
    ]
    # Only the tool's own parameters; a quoted value may hold signs and spaces.
    assert plan("show_notice ticker=X text='a = b: c'", [NOTICE, STOCK]) == [
        ("show_notice", {"text": "a = b: c"}),
    ]


def test_typed_values_repeats_and_a_frontend_tool_shadowing_a_server_tool() -> None:
    counter = declared("bump", "by", kind="integer")
    assert plan("bump by = 3 and bump by=4", [counter]) == [("bump", {"by": 3})]
    assert plan("current_time", [declared("current_time")]) == [("current_time", {})]
    assert plan("get_weather {not json} city=Paris", [WEATHER]) == [
        ("get_weather", {"city": "Paris"})
    ]


def test_many_tools_named_call_at_most_max_calls_in_declaration_order() -> None:
    tools = [declared(f"tool_{i}") for i in range(100)]
    text = " ".join(f"tool_{i}" for i in reversed(range(100)))
    assert [name for name, _ in plan(text, tools)] == [f"tool_{i}" for i in range(MAX_CALLS)]


def test_find_expression() -> None:
    assert find_expression("what is (1 + 2) * 3?") == "(1 + 2) * 3"
    assert find_expression("1" * 20_000) is None
    assert find_expression("- 5 and 3 +") is None
    assert find_expression("calculate (((9**99)**99)**99)**3") == "(((9**99)**99)**99)**3"


@pytest.mark.parametrize(
    ("expression", "value"),
    [("2 + 3 * 4", 14), ("7 // 2", 3), ("2 ** 10", 1024), ("-(4 % 3)", -1), ("1 / 4", 0.25),
     ("9 ** 99", 9**99), ("2 ** -2", 0.25)],
)
async def test_calculate(expression: str, value: Any) -> None:
    assert await calculate.invoke({"expression": expression}) == {
        "expression": expression, "value": value
    }


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("(((9**99)**99)**99)**3", "too large"),
        ("9 ** 101", "exponent larger than 100"),
        ("(10 ** 90) ** 30", "too large"),
        ("*".join(["10**99"] * 11), "too large"),
        ("1" * 1001, "longer than 1000 characters"),
        ("+".join(["1"] * 60), "more than 100 parts"),
        ("1 / 0", "division by zero"),
        ("1e308 * 10", "not a finite number"),
        ("1e300 ** 2", "too large"),
        ("__import__('os')", "unsupported expression"),
        ("True + 1", "unsupported expression"),
        ("2 +", "not an arithmetic expression"),
    ],
)
async def test_calculate_refuses_beyond_its_bounds(expression: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        await calculate.invoke({"expression": expression})


async def _reply(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """The demo agent's answer to ``text`` through a Backend, and how many plans ran in a
    worker thread."""
    threaded = 0
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        nonlocal threaded
        threaded += 1
        return await real_to_thread(func, *args, **kwargs)

    monkeypatch.setattr(demo.asyncio, "to_thread", counting_to_thread)
    async with Backend(Settings(database_url="memory://")) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": "t", "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": text}]})
        await run.task
        events = [json.loads(data) for _, data in run.log.entries(0)]
    words = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    return words, threaded


async def test_short_messages_are_planned_on_the_loop_long_ones_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = "hello there"  # asks for no tool: the only worker thread can be the plan's
    words, threaded = await _reply(short, monkeypatch)
    assert words.startswith("You said: hello there. I am the offline demo agent")
    assert threaded == 0
    at_limit = short + " " * (demo.INLINE_PLAN_CHARS - len(short))
    quoted = words.replace("there.", "there….")  # beyond ECHO_LENGTH: the echo is cut
    assert await _reply(at_limit, monkeypatch) == (quoted, 0)
    assert await _reply(at_limit + " ", monkeypatch) == (quoted, 1)  # same plan, off the loop
