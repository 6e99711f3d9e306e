"""A small io-bridge backend (Starlette, in memory) that can be broken one rule at a time.

Unbroken it passes every ``iobridge check`` level, so a test that breaks one thing can assert
that exactly the matching rule fails. It shares no code with iobridge: it is the "anyone's
backend" the checker must grade fairly.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

BREAKS = frozenset({
    "crlf",             # frames separated by CRLF
    "null",             # "name": null on TEXT_MESSAGE_START
    "after-terminal",   # an event after RUN_FINISHED
    "open-tool-call",   # RUN_FINISHED while a tool call is open
    "second-run",       # frontend tool: ends the run instead of waiting for the result
    "foreign-thread",   # GET /threads/{id} ignores the owner
    "empty-delta",      # TEXT_MESSAGE_CONTENT with delta ""
    "bad-args",         # a server tool's arguments that are not JSON
    "early-result",     # a frontend tool's TOOL_CALL_RESULT before the result is posted
    "duplicate-ok",     # a second result POST is accepted
    "error-as-stream",  # a bad run body answered with a 200 stream and RUN_ERROR
    "no-merge",         # messages appended again on every run (no merge by id)
    "no-version",       # RUN_STARTED without protocolVersion (a 0.x producer)
    "bad-capabilities",  # GET /agents declares a capability object with a typo
    "subagent-leak",    # work attributed to a subagent after its SUBAGENT_FINISHED
})
#: The AG-UI version the mini backend speaks (it refuses other major lines).
VERSION = "1.0"


def _error(status: int, code: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": code.lower()}}, status_code=status)


class MiniBackend:
    def __init__(self, broken: str | None = None) -> None:
        assert broken is None or broken in BREAKS
        self.broken = broken
        self.threads: dict[str, dict[str, Any]] = {}
        self.pending: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self.answered: set[tuple[str, str]] = set()

    def app(self) -> Starlette:
        p = "/io-bridge"
        return Starlette(routes=[
            Route(f"{p}/run", self.run, methods=["POST"]),
            Route(f"{p}/runs/{{run}}/tool-calls/{{call}}/result", self.result, methods=["POST"]),
            Route(f"{p}/agents", self.agents),
            Route(f"{p}/agents/{{agent}}", self.agent),
            Route(f"{p}/threads", self.threads_route, methods=["GET", "POST"]),
            Route(f"{p}/threads/{{thread}}", self.thread, methods=["GET", "PATCH", "DELETE"]),
            Route(f"{p}/threads/{{thread}}/messages", self.messages),
        ])

    # --- runs -----------------------------------------------------------------------------

    async def run(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict) or not all(k in body for k in ("threadId", "runId",
                                                                      "messages")):
            if self.broken == "error-as-stream":
                return StreamingResponse(iter([self.frame({"type": "RUN_STARTED", "threadId": "",
                                                           "runId": "",
                                                           "protocolVersion": VERSION}),
                                               self.frame({"type": "RUN_ERROR",
                                                           "message": "bad request"})]),
                                         media_type="text/event-stream")
            return _error(400, "INVALID_REQUEST")
        declared = body.get("protocolVersion")
        if isinstance(declared, str) and declared.split(".")[0] != VERSION.split(".")[0]:
            return _error(400, "UNSUPPORTED_PROTOCOL_VERSION")
        resource = (body.get("forwardedProps") or {}).get("resourceId", "default")
        thread = self.threads.get(body["threadId"])
        if thread is not None and thread["resourceId"] != resource:
            return _error(404, "THREAD_NOT_FOUND")
        if thread is None:
            thread = self.new_thread(body["threadId"], resource, "")
        known = {m["id"] for m in thread["messages"]}
        for message in body["messages"]:
            if message.get("id") not in known or self.broken == "no-merge":
                thread["messages"].append(message)
        return StreamingResponse(self.events(body, thread), media_type="text/event-stream")

    def frame(self, event: dict[str, Any]) -> bytes:
        sep = "\r\n" if self.broken == "crlf" else "\n"
        return f"data: {json.dumps(event)}{sep}{sep}".encode()

    async def events(self, body: dict[str, Any], thread: dict[str, Any]) -> AsyncIterator[bytes]:
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        version = {} if self.broken == "no-version" else {"protocolVersion": VERSION}
        yield self.frame({"type": "RUN_STARTED", **ids, **version})
        if self.broken == "subagent-leak":
            yield self.frame({"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "h"})
            yield self.frame({"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"})
            yield self.frame({"type": "STEP_STARTED", "stepName": "late", "subagentRunId": "s1"})
            yield self.frame({"type": "STEP_FINISHED", "stepName": "late", "subagentRunId": "s1"})
        user = next(m for m in reversed(body["messages"]) if m.get("role") == "user")
        text = str(user.get("content", ""))
        tools = [t["name"] for t in body.get("tools") or [] if t.get("name") in text]
        if tools:
            async for chunk in self.frontend_call(body["runId"], tools[0], text, thread):
                yield chunk
            if self.broken == "second-run":
                yield self.frame({"type": "RUN_FINISHED", **ids})
                return
        elif "time" in text:
            call = f"call-{uuid.uuid4().hex[:8]}"
            args = '{"tz": ' if self.broken == "bad-args" else "{}"
            for event in self.call_events(call, "current_time", args, thread):
                yield self.frame(event)
            thread["messages"].append({"id": f"tool-{call}", "role": "tool", "toolCallId": call,
                                       "content": '{"utc": "2026-01-01T00:00:00Z"}'})
            yield self.frame({"type": "TOOL_CALL_RESULT", "messageId": f"tool-{call}",
                              "toolCallId": call, "content": '{"utc": "2026-01-01T00:00:00Z"}'})
        message_id = f"a-{uuid.uuid4().hex[:8]}"
        start: dict[str, Any] = {"type": "TEXT_MESSAGE_START", "messageId": message_id,
                                 "role": "assistant"}
        if self.broken == "null":
            start["name"] = None
        yield self.frame(start)
        if self.broken == "empty-delta":
            yield self.frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id,
                              "delta": ""})
        yield self.frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id,
                          "delta": "Done."})
        yield self.frame({"type": "TEXT_MESSAGE_END", "messageId": message_id})
        thread["messages"].append({"id": message_id, "role": "assistant", "content": "Done."})
        if self.broken == "open-tool-call":
            yield self.frame({"type": "TOOL_CALL_START", "toolCallId": "left-open",
                              "toolCallName": "current_time"})
        yield self.frame({"type": "RUN_FINISHED", **ids})
        if self.broken == "after-terminal":
            yield self.frame({"type": "STEP_STARTED", "stepName": "late"})

    def call_events(self, call: str, name: str, args: str,
                    thread: dict[str, Any]) -> list[dict[str, Any]]:
        thread["messages"].append({
            "id": f"as-{call}", "role": "assistant",
            "toolCalls": [{"id": call, "type": "function",
                           "function": {"name": name, "arguments": args}}],
        })
        return [
            {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": name},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": args},
            {"type": "TOOL_CALL_END", "toolCallId": call},
        ]

    async def frontend_call(self, run: str, name: str, text: str,
                            thread: dict[str, Any]) -> AsyncIterator[bytes]:
        call = f"call-{uuid.uuid4().hex[:8]}"
        args = text[text.index("{"): text.rindex("}") + 1] if "{" in text else "{}"
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.broken != "second-run":
            self.pending[(run, call)] = waiter
        for event in self.call_events(call, name, args, thread):
            yield self.frame(event)
        if self.broken == "second-run":
            return
        if self.broken == "early-result":
            yield self.frame({"type": "TOOL_CALL_RESULT", "messageId": f"early-{call}",
                              "toolCallId": call, "content": "guessed"})
        result = json.dumps(await asyncio.wait_for(waiter, 10))
        self.pending.pop((run, call), None)
        thread["messages"].append({"id": f"tool-{call}", "role": "tool", "toolCallId": call,
                                   "content": result})
        yield self.frame({"type": "TOOL_CALL_RESULT", "messageId": f"tool-{call}",
                          "toolCallId": call, "content": result})

    async def result(self, request: Request) -> Response:
        key = (request.path_params["run"], request.path_params["call"])
        if key in self.answered:
            if self.broken == "duplicate-ok":
                return JSONResponse({"status": "accepted"})
            return _error(409, "TOOL_RESULT_ALREADY_SUBMITTED")
        waiter = self.pending.get(key)
        if waiter is None:
            return _error(404, "TOOL_CALL_NOT_FOUND")
        self.answered.add(key)
        waiter.set_result((await request.json()).get("result"))
        return JSONResponse({"status": "accepted"})

    # --- agents ---------------------------------------------------------------------------

    async def agents(self, request: Request) -> Response:
        capabilities: dict[str, Any] = {"tools": {"supported": True, "clientProvided": True},
                                        "multimodal": {"input": {"image": False}}}
        if self.broken == "bad-capabilities":
            capabilities["tools"] = {"suported": True}
        return JSONResponse({"agents": [{"id": "mini", "name": "Mini",
                                         "capabilities": capabilities}],
                             "protocolVersions": [VERSION]})

    async def agent(self, request: Request) -> Response:
        if request.path_params["agent"] != "mini":
            return _error(404, "AGENT_NOT_FOUND")
        return JSONResponse({"id": "mini", "name": "Mini"})

    # --- threads --------------------------------------------------------------------------

    def new_thread(self, thread_id: str, resource: str, title: str) -> dict[str, Any]:
        thread = {"id": thread_id, "resourceId": resource, "title": title, "messages": []}
        self.threads[thread_id] = thread
        return thread

    @staticmethod
    def shown(thread: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in thread.items() if k != "messages"}

    async def threads_route(self, request: Request) -> Response:
        resource = request.query_params.get("resourceId", "default")
        if request.method == "POST":
            body = await request.json()
            thread = self.new_thread(f"th-{uuid.uuid4().hex[:8]}",
                                     body.get("resourceId", resource), body.get("title", ""))
            return JSONResponse(self.shown(thread), status_code=201)
        return JSONResponse({"threads": [self.shown(t) for t in self.threads.values()
                                         if t["resourceId"] == resource]})

    def owned(self, request: Request, *, read: bool = False) -> dict[str, Any] | None:
        thread = self.threads.get(request.path_params["thread"])
        resource = request.query_params.get("resourceId", "default")
        if thread is None:
            return None
        if read and self.broken == "foreign-thread":
            return thread
        return thread if thread["resourceId"] == resource else None

    async def thread(self, request: Request) -> Response:
        thread = self.owned(request, read=request.method == "GET")
        if thread is None:
            return _error(404, "THREAD_NOT_FOUND")
        if request.method == "PATCH":
            thread["title"] = (await request.json()).get("title", thread["title"])
        elif request.method == "DELETE":
            del self.threads[thread["id"]]
            return Response(status_code=204)
        return JSONResponse(self.shown(thread))

    async def messages(self, request: Request) -> Response:
        thread = self.owned(request)
        if thread is None:
            return _error(404, "THREAD_NOT_FOUND")
        return JSONResponse({"messages": thread["messages"]})
