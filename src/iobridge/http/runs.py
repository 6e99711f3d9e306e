"""Run routes: ``POST /run`` (SSE), the in-run tool result route, resume and cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from iobridge.agents.context import ToolResult
from iobridge.errors import InputError
from iobridge.http.body import read_body, read_json_object
from iobridge.http.security import CurrentPrincipal
from iobridge.protocol.run_input import RUN_AGENT_INPUT_SCHEMA, parse_run_input
from iobridge.protocol.sse import PING, sse_frames
from iobridge.runtime.engine import Runtime
from iobridge.runtime.run import Run

router = APIRouter()

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _follow(runtime: Runtime, run: Run, after: int, ping: float) -> AsyncIterator[bytes]:
    """Frame the run log as SSE: every ready event in one chunk, pings while idle."""
    runtime.attach(run)
    try:
        async for batch in run.log.follow(after, idle=ping):
            yield sse_frames(batch) if batch else PING
    finally:
        runtime.detach(run)


def _sse(request: Request, run: Run, after: int = 0) -> StreamingResponse:
    state = request.app.state
    return StreamingResponse(
        _follow(state.runtime, run, after, state.settings.ping_interval),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.post(
    "/run",
    summary="Start a run and stream its AG-UI events (SSE)",
    response_class=StreamingResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": RUN_AGENT_INPUT_SCHEMA}},
        },
        "responses": {"200": {"content": {"text/event-stream": {}}}},
    },
)
async def start_run(request: Request, principal: CurrentPrincipal) -> StreamingResponse:
    """Parse a RunAgentInput, start the run, and stream its events.

    Errors before the stream starts are JSON envelopes: 400 bad body, 401 credentials,
    404 unknown agent or foreign thread, 409 runId running or thread busy, 413 too large.
    """
    state = request.app.state
    body = await read_body(request, state.settings.max_body_bytes)
    run_input = parse_run_input(body)
    resource_id = state.authenticator.resolve_resource(
        principal, run_input.forwarded_props.get("resourceId")
    )
    run = await state.runtime.start(run_input, resource_id=resource_id)
    return _sse(request, run)


def parse_tool_result(data: dict[str, Any]) -> ToolResult:
    """Read ``{"result"|"content"|"output": ..., "isError"?, "error"?}``.

    Raises:
        InputError: none of the result keys, or keys of the wrong type.
    """
    is_error = data.get("isError", False)
    if not isinstance(is_error, bool):
        raise InputError("isError must be a boolean")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise InputError("error must be a string")
    if "content" in data:
        if not isinstance(data["content"], str):
            raise InputError("content must be a string")
        value: Any = data["content"]
    elif "result" in data:
        value = data["result"]
    elif "output" in data:
        value = data["output"]
    elif error is not None:
        value = {"error": error}
    else:
        raise InputError("body must carry one of: result, content, output, error")
    content = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return ToolResult(content=content, value=value, is_error=is_error or error is not None)


@router.post(
    "/runs/{run_id}/tool-calls/{tool_call_id}/result",
    summary="Submit a frontend tool's result to its live run",
)
async def submit_tool_result(
    request: Request, run_id: str, tool_call_id: str, principal: CurrentPrincipal
) -> JSONResponse:
    """200 accepted; 404 unknown run/call (or a server tool's call); 409 already answered."""
    state = request.app.state
    data = await read_json_object(request, state.settings.max_body_bytes)
    result = parse_tool_result(data)
    state.runtime.submit_tool_result(
        run_id, tool_call_id, result, resource_ids=principal.resource_ids
    )
    return JSONResponse({"status": "accepted"})


@router.get("/runs/{run_id}/events", summary="Resume a run's SSE stream (Last-Event-ID)")
async def resume_run(
    request: Request, run_id: str, principal: CurrentPrincipal
) -> StreamingResponse:
    """Replay the retained events after ``Last-Event-ID`` (or ``?after=``), then follow live.

    An extension over the io protocol: a client that lost its stream reconnects here.
    """
    run = request.app.state.runtime.get_run(run_id, resource_ids=principal.resource_ids)
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not raw.isdigit() or int(raw) > run.log.last_seq:
        raise InputError("Last-Event-ID must be an event id of this run", code="INVALID_CURSOR")
    return _sse(request, run, int(raw))


@router.post("/runs/{run_id}/cancel", summary="Cancel a live run")
async def cancel_run(request: Request, run_id: str, principal: CurrentPrincipal) -> Response:
    """Stop the run (agent and pending tools); it ends with RUN_FINISHED outcome cancelled.

    202 when the run was stopped, 200 when it had already ended.
    """
    runtime: Runtime = request.app.state.runtime
    run = runtime.get_run(run_id, resource_ids=principal.resource_ids)
    stopped = runtime.cancel(run)
    return JSONResponse(
        {"status": "cancelling" if stopped else "ended"}, status_code=202 if stopped else 200
    )
