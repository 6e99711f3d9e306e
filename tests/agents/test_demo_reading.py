"""The demo agent at its edges: ``calculate`` exactly at its bounds and the exact reasons it
gives (the demo says them to the user), and how it reads arguments, expressions and text
parts out of a message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iobridge.agents.demo import (
    MAX_EXPONENT,
    MAX_EXPRESSION_LENGTH,
    MAX_INT_BITS,
    DemoAgent,
    calculate,
    find_expression,
)
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import InputError


def _tool(name: str, properties: Any) -> dict[str, Any]:
    return {"name": name, "description": name,
            "parameters": {"type": "object", "properties": properties}}


ALARM = _tool("set_alarm", {
    "at": {"type": "string"}, "label": {"type": "string"}, "note": {"type": "string"},
    "zip": {"type": "string"}, "max_snooze": {"type": "integer"},
    "volume": {"type": "number"}, "loud": {"type": "boolean"},
})


def plan(text: str, tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return DemoAgent().plan(text, tools)


async def _value(expression: str) -> Any:
    result = await calculate.invoke({"expression": expression})
    assert result["expression"] == expression
    return result["value"]


async def test_calculate_takes_each_bound_exactly() -> None:
    """A 1000-character expression, 100 parts, an exponent of ±100 and a result of
    ``MAX_INT_BITS`` bits are all computed."""
    assert await _value("1 + 1".ljust(MAX_EXPRESSION_LENGTH)) == 2
    assert await _value("-1" + "+1" * 32) == 31  # 100 parts: 33 numbers, 32 +, one -
    assert await _value(f"2 ** {MAX_EXPONENT}") == 2**MAX_EXPONENT
    assert await _value(f"2 ** -{MAX_EXPONENT}") == 2.0**-MAX_EXPONENT
    at_most = await _value("(2**83)**20*2*(2**83)**20")  # 1662 bits times 1661 bits
    assert at_most == 2 ** (MAX_INT_BITS - 1) and at_most.bit_length() == MAX_INT_BITS
    assert await _value("4294967296 ** 100") == 2**3200  # 33 bits to the 100th


@pytest.mark.parametrize(("expression", "reason"), [
    ("1 + 1".ljust(MAX_EXPRESSION_LENGTH + 1), "expression longer than 1000 characters"),
    ("-1" + "+1" * 33, "expression with more than 100 parts"),
    (f"2 ** {MAX_EXPONENT + 1}", "exponent larger than 100"),
    (f"2 ** -{MAX_EXPONENT + 1}", "exponent larger than 100"),
    ("(2**83)**20*2*(2**83)**20*2", "the numbers are too large (about 1,000 digits at most)"),
    ("(10 ** 90) ** 30", "the numbers are too large (about 1,000 digits at most)"),
    ("(2**83)**20*2*(2**83)**20 + (2**83)**20*2*(2**83)**20",
     "the numbers are too large (about 1,000 digits at most)"),  # a sum one bit too long
    ("1e308 * 10", "the result is not a finite number"),
    ("1e300 ** 2", "the result is too large"),
    ("1 % 0", "division by zero"),
    ("2 +", "not an arithmetic expression"),
    ("abs(1)", "unsupported expression: only numbers, + - * / // % ** and parentheses"),
    ("not 1", "unsupported expression: only numbers, + - * / // % ** and parentheses"),
])
async def test_calculate_refuses_past_each_bound_with_its_reason(
    expression: str, reason: str
) -> None:
    with pytest.raises(InputError) as raised:
        await calculate.invoke({"expression": expression})
    assert raised.value.message == reason


async def test_a_unary_plus_keeps_the_sign() -> None:
    assert await _value("+3 * 2") == 6
    assert await _value("-(+3)") == -3


@pytest.mark.parametrize(("text", "expression"), [
    ("1+1", "1+1"),
    ("-2 + 3", "2 + 3"),
    ("(x) 2 * 5 (", "2 * 5"),
    ("2 * 5 *", "2 * 5"),
    ("version 1.2 and 3", None),
])
def test_an_expression_is_cut_to_where_its_operators_make_sense(
    text: str, expression: str | None
) -> None:
    assert find_expression(text) == expression


@pytest.mark.parametrize(("text", "args"), [
    ("set_alarm at=07:30 label=wake", {"at": "07:30", "label": "wake"}),
    ('set_alarm label="wake up" note="soon"', {"label": "wake up", "note": "soon"}),
    ('set_alarm label="" note="soon"', {"note": "soon"}),
    ('set_alarm label="a=" note="b"', {"label": "a=", "note": "b"}),
    ("set_alarm label=XRAY,note=x", {"label": "XRAY", "note": "x"}),
    ("set_alarm zip=0150 max_snooze=3", {"zip": "0150", "max_snooze": 3}),
    ("set_alarm volume=0.5 max_snooze=many", {"volume": 0.5, "max_snooze": "many"}),
    ("set_alarm volume=loud", {"volume": "loud"}),
    ("set_alarm loud=YES", {"loud": True}),
    ("set_alarm loud=1", {"loud": True}),
    ("set_alarm loud=True", {"loud": True}),
    ("set_alarm loud=off", {"loud": False}),
    ("SET_ALARM label=caps", {"label": "caps"}),
    ('set_alarm [1, 2] label=x', {"label": "x"}),
    ('set_alarm: {"label": "json"} note=ignored', {"label": "json"}),
    ("set_alarm noteX=1 label=", {}),
], ids=["sign-inside-a-value", "two-quoted", "empty-quoted", "quoted-ending-in-a-sign",
        "comma-separated", "odd-and-underscored-names", "number-and-bad-integer", "bad-number",
        "boolean-yes", "boolean-1", "boolean-true", "boolean-other", "name-in-capitals",
        "json-array-is-not-arguments", "json-after-a-colon",
        "unknown-name-and-a-sign-at-the-end"])
def test_a_frontend_tool_s_arguments_are_read_by_its_parameters_types(
    text: str, args: dict[str, Any]
) -> None:
    assert plan(text, [ALARM]) == [("set_alarm", args)]


@pytest.mark.parametrize(("tool", "args"), [
    ({"name": "ping", "description": "ping"}, {}),
    (_tool("ping", ["x"]), {}),
    (_tool("ping", {"x": True}), {"x": "1"}),
], ids=["no-parameters", "properties-not-an-object", "schema-not-an-object"])
def test_a_tool_with_odd_parameters_still_gets_called(
    tool: dict[str, Any], args: dict[str, Any]
) -> None:
    """A property schema of ``true`` takes the value as written."""
    assert plan("ping x=1", [tool]) == [("ping", args)]


async def test_a_message_of_text_parts_is_read_as_their_words() -> None:
    async with Backend(Settings(database_url="memory://")) as backend:
        run = await backend.start_run(ANONYMOUS, {
            "threadId": "t", "runId": "r", "forwardedProps": {},
            "messages": [{"id": "m", "role": "user", "content": [
                {"type": "text", "text": "hello"},
                {"type": "text", "text": "there"},
            ]}]})
        assert run.task is not None
        await run.task
        events = [json.loads(data) for _, data in run.log.entries(0)]
    said = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said.startswith("You said: hello there. I am the offline demo agent")


async def test_discovery_says_what_the_demo_can_and_cannot_do() -> None:
    """Its two server tools and any frontend tool, several at once; approvals through
    interrupts; text only, no structured output, no reasoning."""
    async with Backend(Settings(database_url="memory://")) as backend:
        capabilities = backend.describe_agent("demo")["capabilities"]
    tools = capabilities["tools"]
    assert [t["name"] for t in tools.pop("items")] == ["current_time", "calculate"]
    assert tools == {"supported": True, "parallelCalls": True, "clientProvided": True}
    assert capabilities["output"] == {"structuredOutput": False}
    assert capabilities["reasoning"] == {"supported": False}
    assert capabilities["multimodal"] == {
        "input": {"image": False, "audio": False, "video": False, "pdf": False, "file": False},
        "output": {"image": False, "audio": False},
    }
    assert capabilities["humanInTheLoop"] == {"supported": True, "interrupts": True,
                                              "approvals": True}


def test_the_next_tool_s_name_ends_a_tool_s_arguments() -> None:
    notice = _tool("show_notice", {"text": {"type": "string"}, "note": {"type": "string"}})
    weather = _tool("get_weather", {"city": {"type": "string"}})
    text = "show_notice text=hi set_alarm label=a get_weather city=Oslo note=x"
    assert plan(text, [notice, ALARM, weather]) == [
        ("show_notice", {"text": "hi"}),
        ("set_alarm", {"label": "a"}),
        ("get_weather", {"city": "Oslo"}),
    ]


def test_an_expression_given_to_calculate_wins_over_one_found_in_the_text() -> None:
    assert plan("what is 1 + 1? calculate expression=2*3", []) == [
        ("calculate", {"expression": "2*3"})]
