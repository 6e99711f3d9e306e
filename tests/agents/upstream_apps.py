"""Upstream AG-UI servers for the ``AgUiUpstreamAgent`` tests, served on loopback.

``pydantic_upstream``: a real pydantic-ai ``Agent`` behind ``AGUIAdapter`` (FunctionModel, no
keys): it answers text, calls its server tool ``now`` for "time", and the client's frontend
tool ``get_weather`` for "weather"; once it has tool results it replies with them.
``approval_upstream``: a pydantic-ai agent whose tool needs approval (an interrupt outcome,
resumed by the next run). ``scripted_upstream``: a hand-written Starlette app that sends
exactly the bytes a test gives it (to break the lifecycle, the framing or the HTTP exchange).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from tests.helpers import LiveServer

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city (runs in the browser).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


@dataclass
class Upstream:
    """A running upstream: its URL and the request bodies and headers it received."""

    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    #: Scripted streams that ended early (the client went away before the last chunk).
    abandoned: int = 0
    #: What the approval upstream's tool deleted.
    deleted: list[str] = field(default_factory=list)


def _last_user_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


async def _model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        yield "Results: " + "; ".join(f"{r.tool_name}={r.model_response_str()}" for r in returns)
        return
    text = _last_user_text(messages)
    # Earlier answered calls in the history, so each call of a thread has its own id.
    answered = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    if "weather" in text:
        yield "Let me look. "
        yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Paris"}',
                                tool_call_id=f"call-weather-{answered}")}
    elif "time" in text:
        yield {0: DeltaToolCall(name="now", json_args="{}", tool_call_id="call-now")}
    else:
        yield "Hello "
        yield "from upstream."


def _pydantic_app(upstream: Upstream) -> Starlette:
    agent = Agent(FunctionModel(stream_function=_model))

    @agent.tool_plain
    def now() -> str:
        """The current time on the upstream."""
        return "12:00 UTC"

    async def run(request: Request) -> Response:
        upstream.bodies.append(json.loads(await request.body()))
        upstream.headers.append(dict(request.headers))
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


@contextmanager
def pydantic_upstream() -> Iterator[Upstream]:
    """The pydantic-ai upstream on a free loopback port."""
    upstream = Upstream(url="")
    with LiveServer(_pydantic_app(upstream)) as server:  # type: ignore[arg-type]
        upstream.url = f"{server.url}/agui"
        yield upstream


def _approval_app(upstream: Upstream) -> Starlette:
    """A pydantic-ai agent whose ``delete_file`` tool needs approval: its AG-UI adapter ends
    the run with an interrupt outcome and runs the tool in the run that resumes it."""

    async def model(messages: list[ModelMessage], info: AgentInfo
                    ) -> AsyncIterator[str | DeltaToolCalls]:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            yield f"Result: {returns[-1].model_response_str()}"
            return
        yield {0: DeltaToolCall(name="delete_file", json_args='{"name": "v1.txt"}',
                                tool_call_id="call-delete")}

    agent = Agent(FunctionModel(stream_function=model, model_name="approver"),
                  output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(name: str) -> str:
        """Delete a file (needs the user's approval)."""
        upstream.deleted.append(name)
        return f"deleted {name}"

    async def run(request: Request) -> Response:
        upstream.bodies.append(json.loads(await request.body()))
        upstream.headers.append(dict(request.headers))
        return await AGUIAdapter.dispatch_request(request, agent=agent, include_usage=True)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


@contextmanager
def approval_upstream() -> Iterator[Upstream]:
    """The pydantic-ai upstream with an approval-gated tool, on a free loopback port."""
    upstream = Upstream(url="")
    with LiveServer(_approval_app(upstream)) as server:  # type: ignore[arg-type]
        upstream.url = f"{server.url}/agui"
        yield upstream


@dataclass
class Script:
    """What the scripted upstream answers: status, content type, and body chunks.

    ``chunks`` may be a function of the request body (to answer follow-up runs differently);
    ``delay`` seconds pass before each chunk.
    """

    chunks: Sequence[bytes] | Callable[[dict[str, Any]], Sequence[bytes]] = ()
    status: int = 200
    content_type: str = "text/event-stream"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def frames(*events: dict[str, Any] | str) -> list[bytes]:
    """SSE frames of ``events`` (a ``str`` is sent verbatim as the data line)."""
    return [b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n"
            for e in events]


@contextmanager
def scripted_upstream(script: Script) -> Iterator[Upstream]:
    """A hand-written upstream that sends ``script``'s bytes."""
    upstream = Upstream(url="")

    async def run(request: Request) -> Response:
        body = json.loads(await request.body())
        upstream.bodies.append(body)
        upstream.headers.append(dict(request.headers))
        chunks = script.chunks(body) if callable(script.chunks) else script.chunks

        async def stream() -> AsyncIterator[bytes]:
            sent = 0
            try:
                for chunk in chunks:
                    if script.delay:
                        await asyncio.sleep(script.delay)
                    yield chunk
                    sent += 1
            finally:
                if sent < len(chunks):
                    upstream.abandoned += 1

        return StreamingResponse(stream(), status_code=script.status,
                                 media_type=script.content_type, headers=script.headers)

    app = Starlette(routes=[Route("/agui", run, methods=["POST"])])
    with LiveServer(app) as server:  # type: ignore[arg-type]
        upstream.url = f"{server.url}/agui"
        yield upstream
