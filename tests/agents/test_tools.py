"""Server tools made with ``tool``: the declaration a model and a client see (name,
description, JSON Schema of the parameters), how the arguments a model sends are checked and
passed, and how a result is encoded as TOOL_CALL_RESULT content."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Annotated, Any

import pydantic
import pytest

from iobridge.agents.tools import result_content, tool
from iobridge.errors import InputError


class Point(pydantic.BaseModel):
    """A type of this module: a string annotation naming it resolves only here."""

    x: int
    y: int


def test_a_bare_tool_is_named_after_its_function_and_described_by_its_first_paragraph() -> None:
    @tool
    def lookup(query: str, limit: int = 5) -> list[str]:
        """  Find entries matching the query.

        The second paragraph is for humans reading the code.
        """
        return [query] * limit

    assert lookup.as_declaration() == {
        "name": "lookup",
        "description": "Find entries matching the query.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"},
                           "limit": {"type": "integer", "default": 5}},
            "required": ["query"],
        },
    }
    assert lookup.describe() == {"name": "lookup",
                                 "description": "Find entries matching the query."}


def test_a_named_tool_takes_the_given_name_and_description() -> None:
    @tool(name="search", description="Search the catalog.")
    def lookup(query: str) -> str:
        """Not this."""
        return query

    assert lookup.describe() == {"name": "search", "description": "Search the catalog."}


def test_a_tool_without_a_docstring_is_described_by_its_name() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.describe() == {"name": "ping", "description": "ping"}
    assert ping.parameters == {"type": "object", "properties": {}}


async def test_a_parameter_without_a_hint_takes_any_json_value() -> None:
    @tool
    def echo(value, times: int = 1):  # type: ignore[no-untyped-def]
        return [value] * times

    assert echo.parameters["properties"]["value"] == {}
    assert await echo.invoke({"value": {"a": [1, "b"]}}) == [{"a": [1, "b"]}]
    assert await echo.invoke({"value": "x", "times": 2}) == ["x", "x"]


async def test_keyword_only_parameters_after_star_args_are_declared_and_passed() -> None:
    """``*args`` and ``**kwargs`` are left out of the schema; what follows them is not."""

    @tool
    def join(*parts: str, sep: str, **extra: Any) -> str:
        return sep.join(["a", "b"])

    assert join.parameters["properties"] == {"sep": {"type": "string"}}
    assert join.parameters["required"] == ["sep"]
    assert await join.invoke({"sep": "+"}) == "a+b"


async def test_string_annotations_resolve_in_the_tool_s_own_module() -> None:
    @tool
    def distance(a: Point, b: Point) -> int:
        return abs(a.x - b.x) + abs(a.y - b.y)

    assert distance.parameters["required"] == ["a", "b"]
    assert await distance.invoke({"a": {"x": 1, "y": 2}, "b": {"x": 4, "y": 6}}) == 7


async def test_arguments_are_validated_and_passed_as_their_declared_types() -> None:
    @tool
    def scale(value: int, factor: float = 2.0) -> str:
        return f"{type(value).__name__}:{value * factor}"

    assert await scale.invoke({"value": "3"}) == "int:6.0"


async def test_invalid_arguments_fail_with_invalid_tool_args_and_the_reasons() -> None:
    """The details say which field failed and why, without pydantic's documentation URLs
    or the constraint's internal context."""

    @tool
    def repeat(text: str, times: Annotated[int, pydantic.Field(gt=0)]) -> str:
        return text * times

    with pytest.raises(InputError) as raised:
        await repeat.invoke({"text": "a", "times": 0})
    error = raised.value
    assert error.code == "INVALID_TOOL_ARGS"
    assert error.message == "invalid arguments for tool 'repeat'"
    [detail] = error.details
    assert detail["loc"] == ("times",) and detail["type"] == "greater_than"
    assert "url" not in detail and "ctx" not in detail


async def test_a_sync_tool_runs_in_a_worker_thread_and_an_async_tool_on_the_loop() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where_sync() -> bool:
        return threading.get_ident() == loop_thread

    @tool
    async def where_async() -> bool:
        return threading.get_ident() == loop_thread

    assert await where_sync.invoke({}) is False
    assert await where_async.invoke({}) is True


def test_a_result_is_compact_json_keeping_non_ascii_text_and_stringifying_the_rest() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert result_content({"city": "Zürich", "temps": [1, 2], "at": when}) == (
        '{"city":"Zürich","temps":[1,2],"at":"2026-01-02 03:04:05+00:00"}'
    )
