"""Run routes: ``POST /run`` (SSE), the in-run tool result route, resume and cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from iobridge.agents.tool_result import parse_tool_result
from iobridge.app import Backend
from iobridge.auth import Principal
from iobridge.http.body import read_body, read_json_object
from iobridge.http.event_stream import RunEventStream
from iobridge.http.openapi import errors
from iobridge.http.security import CurrentBackend, CurrentPrincipal
from iobridge.protocol.resources import (
    FORWARDED_PROPS_SCHEMA,
    SSE_EVENT_SCHEMA,
    TOOL_RESULT_BODY_SCHEMA,
    CancelStatus,
    ResultAccepted,
)
from iobridge.protocol.run_input import RUN_AGENT_INPUT_SCHEMA

router = APIRouter()

#: A run request that works on a fresh server (the demo agent calls its calculate tool).
RUN_EXAMPLE: dict[str, Any] = {
    "threadId": "thread-1",
    "runId": "run-1",
    "messages": [{"id": "m-1", "role": "user", "content": "What is 2 + 3 * 4?"}],
    "tools": [],
    "context": [],
    "forwardedProps": {"memoryOptions": {"lastMessages": 40}},
}
_RUN_BODY_SCHEMA = {
    **RUN_AGENT_INPUT_SCHEMA,
    "properties": {
        **RUN_AGENT_INPUT_SCHEMA["properties"],
        "forwardedProps": FORWARDED_PROPS_SCHEMA,
    },
}
#: An SSE stream: ``id: <seq>`` and ``data: <one AG-UI event as JSON>`` per event, LF framed,
#: ``: ping`` comments while idle; it ends after RUN_FINISHED or RUN_ERROR.
_SSE = {
    "description": "AG-UI events as Server-Sent Events (id = the event's sequence number, "
    "the Last-Event-ID to resume after)",
    "content": {
        "text/event-stream": {
            "itemSchema": SSE_EVENT_SCHEMA,
            "example": 'id: 1\ndata: {"type":"RUN_STARTED","threadId":"thread-1",'
            '"runId":"run-1"}\n\n',
        }
    },
}


@router.post(
    "/run",
    summary="Start a run and stream its AG-UI events (SSE)",
    response_class=StreamingResponse,
    responses={
        200: _SSE,
        **errors(
            400, 401, 404, 409, 413, 429, 503,
            s404="Unknown agent (AGENT_NOT_FOUND), another resource's thread (THREAD_NOT_FOUND) "
            "or resourceId (RESOURCE_NOT_FOUND)",
            s409="The runId is running (RUN_ALREADY_RUNNING) or the thread has a live run "
            "(THREAD_BUSY)",
            s429="Too many live runs (TOO_MANY_RUNS; Retry-After)",
        ),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _RUN_BODY_SCHEMA, "example": RUN_EXAMPLE}
            },
        },
    },
)
async def start_run(
    request: Request, backend: CurrentBackend, principal: CurrentPrincipal
) -> RunEventStream:
    """Parse a RunAgentInput, start the run, and stream its events.

    Errors before the stream starts are JSON envelopes: 400 bad body, 401 credentials,
    404 unknown agent or foreign thread, 409 runId running or thread busy, 413 body too
    large or too many messages.
    """
    return await open_run_stream(backend, principal, request)


async def open_run_stream(
    backend: Backend, principal: Principal, request: Request
) -> RunEventStream:
    """Read the run request's body, start the run, and answer with its event stream (the
    route above and :class:`~iobridge.http.run_route.RunRoute` both serve ``POST /run``
    with it)."""
    body = await read_body(request, backend.settings.max_body_bytes)
    return RunEventStream(backend, await backend.start_run(principal, body))


@router.post(
    "/runs/{run_id}/tool-calls/{tool_call_id}/result",
    summary="Submit a frontend tool's result to its live run",
    responses={
        200: {"model": ResultAccepted, "description": "The run has the result"},
        **errors(
            400, 401, 404, 409, 413, 503,
            s404="Unknown run or tool call, or a server tool's call (RUN_NOT_FOUND, "
            "TOOL_CALL_NOT_FOUND)",
            s409="The call already has a result",
        ),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": TOOL_RESULT_BODY_SCHEMA}},
        }
    },
)
async def submit_tool_result(
    request: Request,
    run_id: str,
    tool_call_id: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
) -> JSONResponse:
    """200 accepted; 404 unknown run/call (or a server tool's call); 409 already answered."""
    data = await read_json_object(
        request, backend.settings.max_body_bytes, backend.settings.max_json_depth
    )
    await backend.submit_tool_result(principal, run_id, tool_call_id, parse_tool_result(data))
    return JSONResponse({"status": "accepted"})


@router.get(
    "/runs/{run_id}/events",
    summary="Resume a run's SSE stream (Last-Event-ID)",
    response_class=StreamingResponse,
    responses={
        200: _SSE,
        **errors(
            400, 401, 404, 410, 429, 503,
            s400="The cursor is not an event id of this run (INVALID_CURSOR)",
            s404="Unknown, expired or another caller's run (RUN_NOT_FOUND)",
            s429="The run has as many followers as it may (TOO_MANY_FOLLOWERS)",
        ),
    },
)
async def resume_run(
    run_id: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="the last event id received")
    ] = None,
    after: Annotated[str | None, Query(description="the same, when no header can be set")] = None,
) -> RunEventStream:
    """Replay the retained events after ``Last-Event-ID`` (or ``?after=``), then follow live.

    An extension over the io protocol: a client that lost its stream reconnects here.
    """
    cursor = last_event_id or after
    run, seq = await backend.resume(principal, run_id, cursor)
    return RunEventStream(backend, run, seq)


@router.post(
    "/runs/{run_id}/cancel",
    summary="Cancel a live run",
    responses={
        200: {"model": CancelStatus, "description": "The run had already ended"},
        202: {"model": CancelStatus, "description": "The run was stopped"},
        **errors(
            401, 404, 503, s404="Unknown, expired or another caller's run (RUN_NOT_FOUND)"
        ),
    },
)
async def cancel_run(
    run_id: str, backend: CurrentBackend, principal: CurrentPrincipal
) -> Response:
    """Stop the run (agent and pending tools); it ends with RUN_FINISHED outcome cancelled.

    202 when the run was stopped, 200 when it had already ended.
    """
    stopped = await backend.cancel_run(principal, run_id)
    return JSONResponse(
        {"status": "cancelling" if stopped else "ended"}, status_code=202 if stopped else 200
    )
