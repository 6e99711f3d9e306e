"""``iobridge chat URL``: a terminal chat with any io-bridge backend, on ``IoBridgeClient``.

Text streams as it arrives; server tool calls are shown with their results; a frontend tool
call (the declared tools: ``get_weather`` and ``show_notice`` as in the playground, plus each
``--tool``) stops at a ``result>`` prompt: what the user types is sent as the result (JSON
when it parses, else text) and the same run goes on. Commands: ``/threads``, ``/thread ID``,
``/agent [ID]``, ``/new``, ``/help``, ``/quit``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer
from ag_ui.core import (
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from iobridge.client.api import IoBridgeClient, IoBridgeError
from iobridge.client.base_url import BadBackend, check_base_url, fail, probe_backend
from iobridge.client.header_option import parse_headers

__all__ = ["BUILTIN_TOOLS", "Chat", "chat"]

#: Frontend tools every chat declares (the playground's built-in ones).
BUILTIN_TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city (answered at the chat prompt).",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "show_notice",
        "description": "Show a notice to the user (answered at the chat prompt).",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
]
HISTORY_SHOWN = 20
#: Seconds the backend has to answer before the chat starts.
PROBE_TIMEOUT = 10.0
HELP = (
    "/threads  list threads · /thread ID  switch (shows its history) · /new  a new thread · "
    "/agent [ID]  list agents or switch · /quit"
)

Ask = Callable[[str], Awaitable[str]]


def _result_value(text: str) -> Any:
    """What the user typed at ``result>``: JSON when it parses, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class Chat:
    """One terminal session: the current thread and agent, and the declared tools."""

    def __init__(
        self,
        client: IoBridgeClient,
        console: Console,
        ask: Ask,
        *,
        thread_id: str | None = None,
        agent_id: str | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        self.client = client
        self.console = console
        self.ask = ask
        self.thread_id = thread_id or str(uuid.uuid4())
        self.agent_id = agent_id
        self.tools = BUILTIN_TOOLS + list(tools or [])

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(escape(text), style=style, highlight=False)

    async def loop(self) -> None:
        """Read lines until ``/quit`` or end of input."""
        self.say(f"thread {self.thread_id} · agent {self.agent_id or '(default)'} · /help")
        while True:
            try:
                line = (await self.ask("you> ")).strip()
            except EOFError:
                return
            if not line:
                continue
            try:
                if not await self.handle(line):
                    return
            except IoBridgeError as exc:
                self.say(f"error: {exc}", "red")

    async def handle(self, line: str) -> bool:
        """Run a command or send a message; ``False`` ends the session."""
        command, _, argument = line.partition(" ")
        argument = argument.strip()
        if command in ("/quit", "/exit"):
            return False
        if command == "/help":
            self.say(HELP)
        elif command == "/new":
            self.thread_id = str(uuid.uuid4())
            self.say(f"thread {self.thread_id} (new)")
        elif command == "/threads":
            await self.show_threads()
        elif command == "/thread" and argument:
            await self.switch_thread(argument)
        elif command == "/agent":
            await self.switch_agent(argument)
        elif command.startswith("/"):
            self.say(f"unknown command {command}: {HELP}", "yellow")
        else:
            await self.send(line)
        return True

    async def show_threads(self) -> None:
        page = await self.client.list_threads(limit=50)
        if not page.threads:
            self.say("no threads yet")
            return
        table = Table("id", "title", "updated", box=None, highlight=False)
        for thread in page.threads:
            mark = " *" if thread.id == self.thread_id else ""
            table.add_row(escape(thread.id + mark), escape(thread.title), thread.updatedAt)
        self.console.print(table)

    async def switch_thread(self, thread_id: str) -> None:
        await self.client.get_thread(thread_id)
        page = await self.client.messages(thread_id, format="agui", limit=HISTORY_SHOWN)
        self.thread_id = thread_id
        self.say(f"thread {thread_id} ({len(page.messages)} recent messages)")
        for message in page.messages:
            role = message.get("role")
            if role == "user":
                self.say(f"you: {_content_text(message.get('content'))}", "cyan")
            elif role == "assistant" and message.get("content"):
                self.say(f"agent: {_content_text(message.get('content'))}")
            elif role == "tool":
                self.say(f"  tool result: {_content_text(message.get('content'))}", "dim")

    async def switch_agent(self, agent_id: str) -> None:
        if not agent_id:
            for agent in await self.client.list_agents():
                status = "" if agent.status == "available" else f" ({agent.reason})"
                self.say(f"{agent.id}: {agent.name}{status}")
            return
        agent = await self.client.get_agent(agent_id)
        self.agent_id = agent.id
        self.say(f"agent {agent.id} ({agent.name})")

    async def send(self, text: str) -> None:
        """One run: stream its text, show tool calls, answer frontend tools at the prompt."""
        frontend = {t["name"] for t in self.tools}
        calls: dict[str, list[str]] = {}
        stream = self.client.run(
            text,
            thread_id=self.thread_id,
            agent_id=self.agent_id,
            tools=self.tools,
            forwarded_props={"toolResultMode": "in-run"},
        )
        async with stream:
            async for event in stream:
                if isinstance(event, TextMessageStartEvent):
                    self.console.print("agent: ", end="", highlight=False)
                elif isinstance(event, TextMessageContentEvent):
                    self.console.print(escape(event.delta), end="", highlight=False)
                elif isinstance(event, TextMessageEndEvent):
                    self.console.print()
                elif isinstance(event, ToolCallStartEvent):
                    calls[event.tool_call_id] = [event.tool_call_name, ""]
                elif isinstance(event, ToolCallArgsEvent) and event.tool_call_id in calls:
                    calls[event.tool_call_id][1] += event.delta
                elif isinstance(event, ToolCallEndEvent) and event.tool_call_id in calls:
                    name, args = calls[event.tool_call_id]
                    if name in frontend:
                        await self.answer(stream.run_id, event.tool_call_id, name, args)
                    else:
                        self.say(f"  server tool {name} {args}", "dim")
                elif isinstance(event, ToolCallResultEvent):
                    self.say(f"  → {event.content}", "dim")
                elif isinstance(event, RunErrorEvent):
                    self.say(f"run error: {event.code or 'ERROR'}: {event.message}", "red")
                elif isinstance(event, RunFinishedEvent) and event.outcome is not None:
                    outcome = getattr(event.outcome, "type", event.outcome)
                    if outcome == "cancelled":
                        self.say("(run cancelled)", "yellow")

    async def answer(self, run_id: str, call_id: str, name: str, args: str) -> None:
        self.say(f"tool {name} {args or '{}'}", "magenta")
        self.say("  type the result (JSON or text); an empty line sends an error")
        try:
            typed = (await self.ask("result> ")).strip()
        except EOFError:
            typed = ""
        if typed:
            await self.client.tool_result(run_id, call_id, _result_value(typed))
        else:
            await self.client.tool_result(run_id, call_id, error="no result was given")


def _tools(values: list[str]) -> list[dict[str, Any]]:
    tools = []
    for value in values:
        name, _, description = value.partition(":")
        if not name.strip():
            raise typer.BadParameter(f"{value!r} has no tool name", param_hint="--tool")
        tools.append({
            "name": name.strip(),
            "description": description.strip() or "answered at the chat prompt",
            "parameters": {"type": "object", "properties": {}},
        })
    return tools


def chat(
    url: Annotated[str, typer.Argument(help="The backend's base URL, e.g. http://127.0.0.1:8000")],
    prefix: Annotated[str, typer.Option(help="Route prefix of the backend")] = "/io-bridge",
    header: Annotated[
        list[str] | None, typer.Option(help="Extra request header 'Name: value' (repeatable)")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="API key, sent as X-API-Key", envvar="IOBRIDGE_API_KEY")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Agent id (default: the server's)")] = None,
    thread: Annotated[str | None, typer.Option(help="Thread id (default: a new one)")] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option(help="Declare a frontend tool 'name[:description]' (repeatable)"),
    ] = None,
) -> None:
    """Chat with an io-bridge backend in the terminal (frontend tools answered at the prompt)."""
    headers, tools = parse_headers(header or []), _tools(tool or [])
    try:
        url = check_base_url(url)
    except BadBackend as exc:
        raise fail(exc) from None
    console = Console(highlight=False)

    async def ask(prompt: str) -> str:
        return await asyncio.to_thread(console.input, prompt)

    async def session() -> None:
        await probe_backend(url, prefix, headers, PROBE_TIMEOUT)
        async with IoBridgeClient(url, prefix=prefix, headers=headers, api_key=api_key) as client:
            await Chat(
                client, console, ask, thread_id=thread, agent_id=agent, tools=tools
            ).loop()

    try:
        asyncio.run(session())
    except BadBackend as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
