"""The server side of the load benches, run in its own process by ``_harness.ServerProcess``.

    python bench/_server.py --port P --app bare|bridge [--agent deltas|tool|echo]
        [--deltas D] [--settings JSON]

``bridge`` serves ``create_app(Backend(Settings(...), agents=[one FunctionAgent
"bench"]))`` under the uvicorn options ``iobridge serve`` uses (``uvicorn_options``: its
limits and protocol); the ``--settings`` keys that this version's ``Settings`` lacks are
dropped (and named on stderr), so the benches run against older and newer cores alike.
``bare`` is the baseline: a plain Starlette ``StreamingResponse`` of pre-encoded AG-UI-like
events, one chunk per event.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

#: Name of the frontend tool the ``tool`` agent calls (the client declares it).
TOOL_NAME = "bench_pick"


def words(n: int) -> list[str]:
    return [f"w{i} " for i in range(n)]


def bare_app(n: int) -> Starlette:
    """The same kind of events a run of ``n`` deltas produces, pre-encoded."""
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
    ]
    events += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": d} for d in words(n)]
    events += [
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    frames = [b"id: %d\ndata: %b\n\n" % (i, orjson.dumps(e)) for i, e in enumerate(events, 1)]

    async def body() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    async def run(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/io-bridge/run", run, methods=["POST"])])


def bench_agent(kind: str, n: int) -> Any:
    """The one agent ``bench``: ``deltas`` yields n words, ``tool`` waits on a frontend
    tool, ``echo`` yields the last user message word by word; ``steps`` yields n words in
    one step, ``slow`` the same 20 ms apart, and ``steps-tool`` waits on a frontend tool, all
    durable (checkpointed where the core has durable runs)."""
    import asyncio
    import inspect

    from iobridge.agents.function import FunctionAgent
    from iobridge.agents.outputs import StepFinished, StepStarted

    reply = words(n)

    async def deltas(ctx: Any) -> AsyncIterator[str]:
        for word in reply:
            yield word

    async def tool(ctx: Any) -> AsyncIterator[str]:
        result = await ctx.call_tool(TOOL_NAME, {"choice": "a"})
        yield f"picked {result.content}"

    async def echo(ctx: Any) -> AsyncIterator[str]:
        content = ctx.messages[-1].get("content")
        text = content if isinstance(content, str) else ""
        for word in text.split(" "):
            yield word + " "

    async def steps(ctx: Any) -> AsyncIterator[Any]:
        yield StepStarted(name="reply")
        for word in reply:
            yield word
        yield StepFinished(name="reply")

    async def slow(ctx: Any) -> AsyncIterator[Any]:
        yield StepStarted(name="reply")
        for word in reply:
            await asyncio.sleep(0.02)
            yield word
        yield StepFinished(name="reply")

    async def steps_tool(ctx: Any) -> AsyncIterator[Any]:
        if not any(m.get("role") == "tool" for m in ctx.messages):
            yield StepStarted(name="ask")
            await ctx.call_tool(TOOL_NAME, {"choice": "a"})
            yield StepFinished(name="ask")
        yield "picked"

    funcs = {"deltas": deltas, "tool": tool, "echo": echo, "steps": steps,
             "steps-tool": steps_tool, "slow": slow}
    durable = kind in ("steps", "steps-tool", "slow") and (
        "durable" in inspect.signature(FunctionAgent).parameters)
    return FunctionAgent(funcs[kind], id="bench", **({"durable": True} if durable else {}))


def bridge_app(kind: str, n: int, values: dict[str, Any]) -> Any:
    from iobridge.app import Backend
    from iobridge.config import Settings
    from iobridge.http.app import create_app
    from iobridge.http.server_limits import uvicorn_options

    known = {k: v for k, v in values.items() if k in Settings.model_fields}
    dropped = sorted(set(values) - set(known))
    if dropped:
        print(f"[server] Settings has no {', '.join(dropped)}: not set", file=sys.stderr)
    settings = Settings(playground=False, log_level="warning", **known)
    return create_app(Backend(settings, agents=[bench_agent(kind, n)])), uvicorn_options(settings)


def serving_process(app: Any) -> Any:
    """``app`` doing to its process what ``iobridge serve`` does once its Backend is open
    (the collector's tuning: what the open Backend built is frozen out of the collector's
    view), when this core's CLI does it (older cores did it in the Backend itself)."""
    from iobridge import cli

    tune = getattr(cli, "tune_collector_for_serving", None)
    if tune is None:
        return app

    def tuned(scope: Any, receive: Any, send: Any) -> Any:
        # A plain function returning the app's awaitable: no coroutine of its own per request.
        if scope["type"] != "lifespan":
            return app(scope, receive, send)

        async def send_then_tune(message: Any) -> None:
            if message["type"] == "lifespan.startup.complete":
                tune()
            await send(message)

        return app(scope, receive, send_then_tune)

    return tuned


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--app", choices=["bare", "bridge"], required=True)
    parser.add_argument("--agent",
                        choices=["deltas", "tool", "echo", "steps", "steps-tool", "slow"],
                        default="deltas")
    parser.add_argument("--deltas", type=int, default=5)
    parser.add_argument("--settings", default="{}")
    args = parser.parse_args()
    raise_fd_limit()
    options: dict[str, Any] = {}
    if args.app == "bare":
        app: Any = bare_app(args.deltas)
    else:
        app, options = bridge_app(args.agent, args.deltas, json.loads(args.settings))
    if args.app == "bridge":
        app = serving_process(app)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False,
                backlog=4096, lifespan="auto", interface="asgi3", **options)


if __name__ == "__main__":
    main()
