"""Test doubles for the model agent: a local OpenAI-compatible server and a run session.

The server is a real HTTP server on 127.0.0.1 (Starlette + uvicorn in a thread), so the tests
exercise the genuine OpenAI SDK and pydantic-ai HTTP path. Each test scripts the replies the
server gives to successive ``POST /v1/chat/completions`` requests, and reads back the requests
it received.
``FakeSession`` stands in for the runtime: it logs outputs and tool events in order, runs server
tools and answers frontend tools.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext, ToolResult
from iobridge.agents.tools import ServerTool, result_content
from iobridge.errors import InputError
from iobridge.protocol.options import parse_run_options


@dataclass(frozen=True, kw_only=True)
class ToolCallScript:
    """One tool call of a scripted reply, with its arguments in fragments."""

    id: str
    name: str
    args: tuple[str, ...] = ("{}",)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What the server answers to one request."""

    text: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[ToolCallScript, ...] = ()
    #: Non-200 status: answer with an OpenAI-style error body instead of a stream.
    status: int = 200
    error_message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (for client timeouts).
    delay: float = 0.0
    #: Seconds between streamed text pieces (a reply that takes a while).
    piece_delay: float = 0.0


def text(*deltas: str) -> Reply:
    """A streamed text reply."""
    return Reply(text=deltas)


def calls(*tool_calls: tuple[str, str, str | tuple[str, ...]], say: str = "") -> Reply:
    """A reply with tool calls ``(id, name, args or arg fragments)``, optionally after text."""
    scripts = tuple(
        ToolCallScript(id=i, name=n, args=(a,) if isinstance(a, str) else a)
        for i, n, a in tool_calls
    )
    return Reply(text=(say,) if say else (), tool_calls=scripts)


def error(status: int, *, delay: float = 0.0, retry_after_ms: int | None = None) -> Reply:
    """An HTTP error reply (``retry_after_ms`` keeps SDK retry backoff short in tests)."""
    headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
    return Reply(status=status, delay=delay, headers=headers)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _stream(reply: Reply) -> AsyncIterator[bytes]:
    yield _chunk({"role": "assistant", "content": ""})
    for piece in reply.reasoning:
        yield _chunk({"reasoning_content": piece})
    for piece in reply.text:
        if reply.piece_delay:
            await asyncio.sleep(reply.piece_delay)
        yield _chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        for n, fragment in enumerate(call.args):
            entry: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
            if n == 0:
                entry.update(id=call.id, type="function")
                entry["function"]["name"] = call.name
            yield _chunk({"tool_calls": [entry]})
    yield _chunk({}, "tool_calls" if reply.tool_calls else "stop")
    usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    yield b"data: " + json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                  "created": 0, "model": "fake-model", "choices": [],
                                  "usage": usage}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


class FakeOpenAI:
    """The server: script replies with ``push``, read requests from ``requests``."""

    def __init__(self) -> None:
        self._replies: list[Reply] = []
        self._lock = threading.Lock()
        #: JSON bodies of the requests received, in order.
        self.requests: list[dict[str, Any]] = []
        #: Header maps of the requests received (lower-case keys).
        self.headers: list[dict[str, str]] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        #: Answers a request when no reply is queued (from its JSON body): replies that
        #: depend on what is asked, not on the order requests arrive in.
        self.responder: Callable[[dict[str, Any]], Reply] | None = None

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give an OpenAI-compatible client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests."""
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        """Forget queued replies and recorded requests."""
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.headers.clear()
            self.responder = None

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            reply = self._replies.pop(0) if self._replies else None
        if reply is None and self.responder is not None:
            reply = self.responder(body)
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply"}}, status_code=500)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            err = {"message": reply.error_message, "type": "fake_error", "code": None}
            return JSONResponse({"error": err}, status_code=reply.status, headers=reply.headers)
        return StreamingResponse(_stream(reply), media_type="text/event-stream")

    def start(self) -> None:
        """Start serving on a free loopback port (returns once the server accepts)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])])
        config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the server and wait for its thread."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)


#: A frontend's answer to one call: a value, or a callable of the arguments.
FrontendAnswer = Any | Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass
class FakeHandle:
    """Records a tool call's events into the session log; answers like the runtime would."""

    session: FakeSession
    name: str
    tool_call_id: str
    args: list[str] = field(default_factory=list)
    ended: bool = False

    def add_args(self, delta: str) -> None:
        self.args.append(delta)
        self.session.log.append(("TOOL_CALL_ARGS", self.tool_call_id, delta))

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.session.log.append(("TOOL_CALL_END", self.tool_call_id))

    async def result(self, args: Mapping[str, Any] | None = None) -> ToolResult:
        self.end()
        call_args = dict(args) if args is not None else json.loads("".join(self.args) or "{}")
        result = await self.session.answer(self.name, call_args)
        if not result.deferred:
            self.session.log.append(("TOOL_CALL_RESULT", self.tool_call_id, result.content))
        return result

    def complete(self, result: ToolResult) -> None:
        self.end()
        self.session.log.append(("TOOL_CALL_RESULT", self.tool_call_id, result.content))


@dataclass
class FakeSession:
    """A ``RunSession`` that logs outputs and tool events in order.

    Server tools run here (as the runtime would); frontend tools are answered from
    ``frontend`` after ``frontend_delay`` seconds, or deferred when ``defer_frontend``.
    """

    server_tools: dict[str, ServerTool] = field(default_factory=dict)
    frontend: dict[str, FrontendAnswer] = field(default_factory=dict)
    defer_frontend: bool = False
    frontend_delay: float = 0.0
    log: list[Any] = field(default_factory=list)
    #: What ``annotate`` was given, in order.
    annotations: list[dict[str, Any] | None] = field(default_factory=list)
    _next_id: int = 0

    def emit(self, output: Any) -> None:
        self.log.append(output)

    def is_frontend_tool(self, name: str) -> bool:
        return name in self.frontend

    def answer_earlier_call(self, tool_call_id: str, result: ToolResult) -> None:
        self.log.append(("TOOL_CALL_RESULT", tool_call_id, result.content))

    def annotate(self, metadata: Mapping[str, Any] | None) -> None:
        self.annotations.append(dict(metadata) if metadata else None)

    def start_tool_call(
        self, name: str, *, tool_call_id: str | None = None, local: bool = False
    ) -> FakeHandle:
        if tool_call_id is None:
            self._next_id += 1
            tool_call_id = f"generated-{self._next_id}"
        self.log.append(("TOOL_CALL_START", tool_call_id, name))
        return FakeHandle(self, name, tool_call_id)

    async def answer(self, name: str, args: dict[str, Any]) -> ToolResult:
        if name in self.server_tools:
            try:
                value = await self.server_tools[name].invoke(args)
            except InputError as exc:
                return ToolResult(content=exc.message, is_error=True)
            return ToolResult(content=result_content(value), value=value)
        if name not in self.frontend:
            return ToolResult(content=f"unknown tool {name}", is_error=True)
        if self.defer_frontend:
            return ToolResult(content="", deferred=True)
        await asyncio.sleep(self.frontend_delay)
        answer = self.frontend[name]
        value = await answer(args) if callable(answer) else answer
        return ToolResult(content=result_content(value), value=value)

    def tool_events(self) -> list[tuple[Any, ...]]:
        return [e for e in self.log if isinstance(e, tuple)]

    def outputs(self, kind: type) -> list[Any]:
        return [e for e in self.log if isinstance(e, kind)]

    def text(self) -> str:
        return "".join(getattr(e, "delta", "") for e in self.log if type(e).__name__ == "TextDelta")


def make_context(
    agent: Agent,
    messages: list[dict[str, Any]] | None = None,
    *,
    session: FakeSession | None = None,
    frontend_tools: list[dict[str, Any]] | None = None,
    context: list[dict[str, Any]] | None = None,
    forwarded_props: dict[str, Any] | None = None,
) -> RunContext:
    """A ``RunContext`` for ``agent`` over a ``FakeSession`` that knows its server tools."""
    if session is None:
        session = FakeSession()
    session.server_tools.update({t.name: t for t in agent.tools})
    if messages is None:
        messages = [{"id": "u1", "role": "user", "content": "hello"}]
    return RunContext(
        thread_id="t1",
        run_id="r1",
        messages=messages,
        frontend_tools=frontend_tools or [],
        context=context or [],
        options=parse_run_options(forwarded_props),
        session=session,
    )


async def drive(agent: Agent, ctx: RunContext, *, timeout: float = 10.0) -> FakeSession:
    """Run ``agent`` to the end, logging what it yields next to what it emitted."""
    session = ctx.session
    assert isinstance(session, FakeSession)

    async def consume() -> None:
        async for output in agent.run(ctx):
            session.log.append(output)

    await asyncio.wait_for(consume(), timeout)
    return session
