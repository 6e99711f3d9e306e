"""Run routes: ``POST /run`` (SSE), the in-run tool result route, resume and cancel."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from iobridge.agents.tool_result import parse_tool_result
from iobridge.http.body import read_body, read_json_object
from iobridge.http.event_stream import RunEventStream
from iobridge.http.security import CurrentBackend, CurrentPrincipal
from iobridge.protocol.run_input import RUN_AGENT_INPUT_SCHEMA

router = APIRouter()


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
async def start_run(
    request: Request, backend: CurrentBackend, principal: CurrentPrincipal
) -> RunEventStream:
    """Parse a RunAgentInput, start the run, and stream its events.

    Errors before the stream starts are JSON envelopes: 400 bad body, 401 credentials,
    404 unknown agent or foreign thread, 409 runId running or thread busy, 413 body too
    large or too many messages.
    """
    body = await read_body(request, backend.settings.max_body_bytes)
    return RunEventStream(backend, await backend.start_run(principal, body))


@router.post(
    "/runs/{run_id}/tool-calls/{tool_call_id}/result",
    summary="Submit a frontend tool's result to its live run",
)
async def submit_tool_result(
    request: Request,
    run_id: str,
    tool_call_id: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
) -> JSONResponse:
    """200 accepted; 404 unknown run/call (or a server tool's call); 409 already answered."""
    data = await read_json_object(request, backend.settings.max_body_bytes)
    await backend.submit_tool_result(principal, run_id, tool_call_id, parse_tool_result(data))
    return JSONResponse({"status": "accepted"})


@router.get("/runs/{run_id}/events", summary="Resume a run's SSE stream (Last-Event-ID)")
async def resume_run(
    request: Request, run_id: str, backend: CurrentBackend, principal: CurrentPrincipal
) -> RunEventStream:
    """Replay the retained events after ``Last-Event-ID`` (or ``?after=``), then follow live.

    An extension over the io protocol: a client that lost its stream reconnects here.
    """
    cursor = request.headers.get("last-event-id") or request.query_params.get("after")
    run, after = await backend.resume(principal, run_id, cursor)
    return RunEventStream(backend, run, after)


@router.post("/runs/{run_id}/cancel", summary="Cancel a live run")
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
