"""The offline demo agent: no network, no keys, deterministic.

It exists so that a fresh ``make serve`` shows the whole protocol. It understands:

- the word **time** → calls the server tool ``current_time``;
- an arithmetic expression such as ``2 + 3 * 4`` → calls the server tool ``calculate``;
- the name of any frontend tool the client declared → calls it, with arguments taken from
  a JSON object in the message (``{"city": "Paris"}``) or ``name=value`` pairs matching
  the tool's parameters, else ``{}``; several matches run in parallel;
- anything else → a short echo that says what it can do.

Replies stream word by word. After tool results (in the same run, or in the next run in
next-run mode) it reports each result.
"""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext, ToolResult
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool

_BINARY: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_EXPRESSION = re.compile(r"[\d.(][\d.\s()+\-*/%]*[+\-*/%][\d.\s()+\-*/%]*[\d.)]")


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        if isinstance(node.value, bool):
            raise ValueError("unsupported expression")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _BINARY[type(node.op)](left, right)  # type: ignore[no-any-return]
    raise ValueError("unsupported expression")


@tool
def calculate(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
    try:
        value = _evaluate(ast.parse(expression, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return {"expression": expression, "error": str(exc) or type(exc).__name__}
    return {"expression": expression, "value": value}


@tool
def current_time() -> dict[str, str]:
    """The current date and time in UTC (ISO 8601)."""
    return {"utc": datetime.now(UTC).isoformat(timespec="seconds")}


def message_text(message: dict[str, Any]) -> str:
    """The text of a user message (string content or text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _coerce(raw: str, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
    except ValueError:
        return raw
    if kind == "boolean":
        return raw.lower() in ("true", "yes", "1")
    return raw


def extract_args(text: str, parameters: Any) -> dict[str, Any]:
    """Arguments for a tool from a user message: a JSON object, or ``name=value`` pairs."""
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            found = json.loads(text[start : end + 1])
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        match = re.search(
            rf"\b{re.escape(name)}\s*[:=]\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s,;]+))", text
        )
        if match:
            raw = next(g for g in match.groups() if g is not None)
            args[name] = _coerce(raw, schema if isinstance(schema, dict) else {})
    return args


def _describe(name: str, result: ToolResult) -> str:
    if result.is_error:
        return f"The tool {name} reported an error: {result.content}."
    value = result.value
    if name == "calculate" and isinstance(value, dict) and "value" in value:
        return f"{value['expression'].strip()} = {value['value']}."
    if name == "current_time" and isinstance(value, dict):
        return f"The current time is {value['utc']} (UTC)."
    return f"The tool {name} returned {result.content}."


class DemoAgent(Agent):
    """See the module docstring."""

    id = "demo"
    name = "Demo agent"
    model_id = "demo"
    description = (
        "Offline, deterministic demo: tells the time, calculates, and calls the frontend "
        "tools you name."
    )
    tools = (current_time, calculate)

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        messages = ctx.messages
        if messages and messages[-1].get("role") == "tool":
            async for word in self._words(self._report_history(messages)):
                yield word
            return
        user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        text = message_text(user) if user else ""
        calls = self._plan(text, ctx.frontend_tools)
        if not calls:
            reply = (
                f"You said: {text.strip() or '(nothing)'}. I am the offline demo agent: ask "
                "me for the time, to calculate 2 + 3 * 4, or name one of your frontend tools."
            )
            async for word in self._words(reply):
                yield word
            return
        yield f"Calling {', '.join(name for name, _ in calls)}."
        results = await asyncio.gather(*(ctx.call_tool(name, args) for name, args in calls))
        if any(r.deferred for r in results):
            return
        reply = " ".join(_describe(name, r) for (name, _), r in zip(calls, results, strict=True))
        async for word in self._words(reply):
            yield word

    @staticmethod
    def _plan(text: str, frontend_tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        calls: list[tuple[str, dict[str, Any]]] = []
        lowered = text.lower()
        for declared in frontend_tools:
            name = declared.get("name", "")
            if name and re.search(rf"\b{re.escape(name.lower())}\b", lowered):
                calls.append((name, extract_args(text, declared.get("parameters"))))
        if re.search(r"\btime\b", lowered):
            calls.append(("current_time", {}))
        expression = _EXPRESSION.search(text)
        if expression:
            calls.append(("calculate", {"expression": expression.group(0).strip()}))
        return calls

    @staticmethod
    def _report_history(messages: list[dict[str, Any]]) -> str:
        names = {
            call["id"]: call["function"]["name"]
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("toolCalls") or []
        }
        parts = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            name = names.get(message.get("toolCallId", ""), "tool")
            parts.append(f"The tool {name} returned {message_text(message) or '(empty)'}.")
        return " ".join(reversed(parts))

    @staticmethod
    async def _words(text: str) -> AsyncIterator[AgentOutput]:
        for word in re.findall(r"\S+\s*", text):
            yield word
