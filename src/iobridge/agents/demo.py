"""The offline demo agent: no network, no keys, deterministic.

It exists so that a fresh ``make serve`` shows the whole protocol. It understands:

- a tool's **name**, server or frontend (``What is the current_time?``, ``get_weather``),
  with that tool's own arguments: a JSON object right after the name
  (``get_weather {"city": "Oslo"}``), else ``name=value`` / ``name: value`` pairs of that
  tool's parameters between its name and the next tool's name, else ``{}``;
- the words **time** or **clock** → the server tool ``current_time``;
- an arithmetic expression such as ``2 + 3 * 4`` → the server tool ``calculate``;
- ``approve <action>`` → the run ends with an ``approval`` interrupt; the run that answers
  it (``resume`` payload ``{"approved": true}``, or ``cancelled``) says what was decided;
- anything else → a short echo that says what it can do.

Several matches run in parallel (frontend tools in declaration order, then the server
tools; at most ``MAX_CALLS``). Replies stream word by word; after tool results (in the same
run, or in the next run in next-run mode) it reports each result.

It is what a fresh server exposes, so hostile text must not hurt: it reads the first
``MAX_TEXT`` characters of a message, in linear passes, off the event loop beyond
``INLINE_PLAN_CHARS`` characters (no backtracking regex over user text; the cost does not
grow with the number of declared tools), and
``calculate`` refuses, with a tool error,
expressions beyond ``MAX_EXPRESSION_LENGTH`` characters or ``MAX_NODES`` parts, exponents
beyond ``MAX_EXPONENT`` and integers beyond ``MAX_INT_BITS`` bits, *before* computing them.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import operator
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from iobridge.agents.base import Agent
from iobridge.agents.capabilities import MEDIA_INPUTS
from iobridge.agents.context import RunContext, ToolResult
from iobridge.agents.outputs import AgentOutput
from iobridge.agents.tools import tool
from iobridge.errors import InputError

#: Bounds of ``calculate``: beyond them it refuses with a tool error, so a crafted expression
#: can never hold the interpreter (big-integer ``**`` runs while holding the GIL).
MAX_EXPRESSION_LENGTH = 1000
MAX_NODES = 100
MAX_EXPONENT = 100
#: Largest integer operand or result (about 1,000 decimal digits).
MAX_INT_BITS = 3322
#: Most tool calls one message can trigger.
MAX_CALLS = 16
#: Characters of the user's text the echo reply quotes.
ECHO_LENGTH = 200
#: Characters of a message the agent reads (tool names, arguments, expressions).
MAX_TEXT = 100_000
#: Messages up to this many characters are planned on the event loop: a worker thread's
#: hand-off (submit, wake-up, GIL hand-over, the loop's wake-up) costs more than reading them.
INLINE_PLAN_CHARS = 4096
#: The command that asks for an approval (an interrupt), and the answer it expects.
APPROVE = "approve"
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}

_BINARY: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
#: Words that ask for a server tool without naming it.
_NATURAL = {"time": "current_time", "clock": "current_time"}
#: Runs of characters an arithmetic expression is made of, starting with a non-blank one:
#: a first character then one greedy class, so a match never fails part-way and never
#: backtracks (linear), and blanks between words start no run.
_ARITHMETIC_RUN = re.compile(r"[\d.()+\-*/%][\d.\s()+\-*/%]*")
_OPERATORS = frozenset("+-*/%")
#: Words (tool names and parameter names): one character class, linear.
_WORD = re.compile(r"[\w-]+")
_SIGN = re.compile(r"[=:]")


def _bits(value: float | int) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def _check_int(value: float | int) -> float | int:
    if _bits(value) > MAX_INT_BITS:
        raise InputError("the numbers are too large (about 1,000 digits at most)")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError("the result is not a finite number")
    return value


def _apply(op: ast.operator, left: float | int, right: float | int) -> float | int:
    """One binary operation, refused *before* computing when its result would be too big."""
    if isinstance(op, ast.Pow):
        if abs(right) > MAX_EXPONENT:
            raise InputError(f"exponent larger than {MAX_EXPONENT}")
        whole = isinstance(left, int) and isinstance(right, int) and right > 0
        if whole and _bits(left) * right > MAX_INT_BITS + right:
            raise InputError("the numbers are too large (about 1,000 digits at most)")
    elif isinstance(op, ast.Mult) and _bits(left) + _bits(right) > MAX_INT_BITS + 1:
        raise InputError("the numbers are too large (about 1,000 digits at most)")
    return _check_int(_BINARY[type(op)](left, right))


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _check_int(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _apply(node.op, _evaluate(node.left), _evaluate(node.right))
    raise InputError("unsupported expression: only numbers, + - * / // % ** and parentheses")


@tool
def calculate(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InputError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise InputError("not an arithmetic expression") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise InputError(f"expression with more than {MAX_NODES} parts")
    try:
        value = _evaluate(tree)
    except ZeroDivisionError:
        raise InputError("division by zero") from None
    except OverflowError:
        raise InputError("the result is too large") from None
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


def _json_object_at(text: str, index: int) -> dict[str, Any] | None:
    """The JSON object starting at ``index`` (after blanks and one ``:``), if there is one."""
    while index < len(text) and text[index] in " \t\n:":
        index += 1
    if index >= len(text) or text[index] != "{":
        return None
    try:
        found, _ = json.JSONDecoder().raw_decode(text, index)
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def _name_before(segment: str, end: int, floor: int) -> str:
    """The word ending at ``end`` (blanks before ``end`` skipped), not reaching below ``floor``."""
    while end > floor and segment[end - 1] in " \t":
        end -= 1
    start = end
    while start > floor and (segment[start - 1].isalnum() or segment[start - 1] in "_-"):
        start -= 1
    return segment[start:end]


def _pairs(segment: str, properties: dict[str, Any]) -> dict[str, Any]:
    """``name=value`` (or ``name: value``) pairs of known parameters, in one linear pass.

    Each character is looked at a bounded number of times: the scan moves forward from one
    ``=``/``:`` to the next, looking back only as far as the end of the previous value.
    """
    args: dict[str, Any] = {}
    floor = 0
    for sign in _SIGN.finditer(segment):
        eq = sign.start()
        if eq < floor:
            continue  # inside the previous value
        name = _name_before(segment, eq, floor)
        start = eq + 1
        while start < len(segment) and segment[start] in " \t":
            start += 1
        quote = segment[start : start + 1]
        close = segment.find(quote, start + 1) if quote in ('"', "'") else -1
        if close >= 0:
            raw, floor = segment[start + 1 : close], close + 1
        else:
            stop = start
            while stop < len(segment) and not segment[stop].isspace() and segment[stop] not in ",;":
                stop += 1
            raw, floor = segment[start:stop], max(stop, eq + 1)
        schema = properties.get(name)
        if name in properties and name not in args and raw:
            args[name] = _coerce(raw, schema if isinstance(schema, dict) else {})
    return args


def extract_args(text: str, start: int, end: int, parameters: Any) -> dict[str, Any]:
    """Arguments for the tool named at ``text[start:end]`` from what follows the name.

    A JSON object directly after the name wins; else ``name=value`` pairs of the tool's own
    parameters, read up to the next tool's name (``end`` of the segment is the caller's).
    """
    found = _json_object_at(text, start)
    if found is not None:
        return found
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    if not isinstance(properties, dict) or not properties:
        return {}
    return _pairs(text[start:end], properties)


def _mention(name: str) -> re.Pattern[str]:
    """The name as a whole word; a literal search, linear in the text."""
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.IGNORECASE)


def find_expression(text: str) -> str | None:
    """The first arithmetic expression in ``text`` (linear: runs of one character class)."""
    for match in _ARITHMETIC_RUN.finditer(text):
        run = match.group(0).strip().lstrip("+-*/%)").rstrip("+-*/%(").strip()
        if any(c in _OPERATORS for c in run[1:]) and any(c.isdigit() for c in run):
            return run
    return None


def _describe(name: str, result: ToolResult) -> str:
    if result.is_error:
        try:
            reason = json.loads(result.content)["error"]
        except (ValueError, TypeError, KeyError):
            reason = result.content
        return f"The tool {name} reported an error: {reason}."
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
    agent_type = "demo"

    def own_capabilities(self) -> dict[str, Any]:
        """Text in and out; its two server tools and any frontend tool it is asked to call,
        several in one step; interrupts for ``approve``; no model, so no media and no
        reasoning."""
        return {
            "tools": {
                "supported": True,
                "items": [t.as_declaration() for t in self.tools],
                "parallelCalls": True,
                "clientProvided": True,
            },
            "output": {"structuredOutput": False},
            "reasoning": {"supported": False},
            "multimodal": {
                "input": dict.fromkeys(MEDIA_INPUTS, False),
                "output": {"image": False, "audio": False},
            },
            "humanInTheLoop": {"supported": True, "interrupts": True, "approvals": True},
        }

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        messages = ctx.messages
        if messages and messages[-1].get("role") == "tool":
            async for word in self._words(self._report_history(messages)):
                yield word
            return
        user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        text = message_text(user) if user else ""
        words = text[:ECHO_LENGTH].split()
        if words and words[0].lower() == APPROVE:
            async for word in self._words(await self._approval(ctx, " ".join(words[1:]))):
                yield word
            return
        # Reading a long message is linear but not free: keep it off the event loop.
        if len(text) <= INLINE_PLAN_CHARS:
            calls = self.plan(text, ctx.frontend_tools)
        else:
            calls = await asyncio.to_thread(self.plan, text[:MAX_TEXT], ctx.frontend_tools)
        if not calls:
            quoted = " ".join(text[:ECHO_LENGTH].split()) or "(nothing)"
            if len(text) > ECHO_LENGTH:
                quoted += "…"
            reply = (
                f"You said: {quoted}. I am the offline demo agent: ask me for the "
                "current_time, to calculate 2 + 3 * 4, or name one of your frontend tools."
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
    async def _approval(ctx: RunContext, action: str) -> str:
        """Interrupt for an approval of ``action``; the resumed run gets the answer."""
        action = action or "the action"
        answer = await ctx.interrupt(
            "approval",
            message=f"Approve: {action}?",
            response_schema=APPROVAL_SCHEMA,
            metadata={"action": action},
        )
        if answer.cancelled:
            return f"Cancelled: {action}."
        payload = answer.payload
        approved = isinstance(payload, dict) and payload.get("approved") is True
        return f"{'Approved' if approved else 'Not approved'}: {action}."

    def plan(
        self, text: str, frontend_tools: list[dict[str, Any]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls a message asks for, each with its own arguments.

        The set of the text's words meets the table of tool names (so the cost does not grow
        with the number of declared tools); only the chosen tools (frontend tools in
        declaration order, then ``current_time``, then ``calculate``; at most ``MAX_CALLS``)
        are then located, each with one literal search.
        """
        declared: dict[str, tuple[str, Any]] = {}
        for entry in frontend_tools:
            name = entry.get("name")
            if isinstance(name, str) and name and self.server_tool(name) is None:
                declared.setdefault(name.lower(), (name, entry.get("parameters")))
        for server in self.tools:
            declared[server.name.lower()] = (server.name, server.parameters)
        words = set(_WORD.findall(text.lower()))
        names = [e.get("name") for e in frontend_tools]
        rank = {name: i for i, name in enumerate(names) if isinstance(name, str)}
        for server in self.tools:
            rank[server.name] = len(rank)
        wanted = {declared[w][0] for w in words & declared.keys()}
        wanted |= {_NATURAL[w] for w in words & _NATURAL.keys()}
        if "calculate" not in wanted and find_expression(text) is not None:
            wanted.add("calculate")
        chosen = sorted(wanted, key=rank.__getitem__)[:MAX_CALLS]
        # Locate only the chosen names: at most MAX_CALLS literal searches.
        mentions = sorted(
            (match.start(), match.end(), name)
            for name in chosen
            if (match := _mention(name).search(text)) is not None
        )
        args: dict[str, dict[str, Any]] = {name: {} for name in chosen}
        for index, (_, start, name) in enumerate(mentions):
            end = mentions[index + 1][0] if index + 1 < len(mentions) else len(text)
            args[name] = extract_args(text, start, end, declared[name.lower()][1])
        if "calculate" in args and "expression" not in args["calculate"]:
            expression = find_expression(text)
            if expression is None:
                del args["calculate"]
            else:
                args["calculate"] = {"expression": expression}
        return list(args.items())

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
