"""Thread and message routes (conformance Level 3).

Every route authenticates first (401), then validates its input (400), then asks the Backend,
which looks the thread up *within the caller's resources*: a thread of another resource is a
404, exactly like a missing one. Bodies and query values are parsed here rather than by
FastAPI so that every bad input comes out in the error envelope with a stable code.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from iobridge.app import MAX_MESSAGES_PAGE
from iobridge.errors import InputError
from iobridge.http.body import read_body
from iobridge.http.openapi import errors
from iobridge.http.security import CurrentBackend, CurrentPrincipal
from iobridge.protocol.resources import BranchList, MessagePage, Thread, ThreadPage
from iobridge.protocol.text import validate_id
from iobridge.protocol.thread_bodies import ThreadCreate, ThreadUpdate

__all__ = ["MAX_BODY_BYTES", "router"]

MAX_BODY_BYTES = 256 * 1024
DEFAULT_PAGE = 20
MAX_PAGE = 100

router = APIRouter()  # tagged where it is included (http/app.py)

_NO_THREAD = "No such thread, or another resource's (THREAD_NOT_FOUND)"

ResourceQuery = Annotated[
    str | None, Query(alias="resourceId", description="Owner; default: the caller's")
]


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"application/json": {"schema": model.model_json_schema(mode="validation")}}
    return {"requestBody": {"content": schema, "required": False}}


def _int_query(value: str | None, name: str, high: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{name} must be an integer") from None
    if not 1 <= number <= high:
        raise InputError(f"{name} must be between 1 and {high}")
    return number


@router.post(
    "/threads",
    status_code=201,
    summary="Create a thread",
    responses={
        201: {"model": Thread, "description": "The new thread"},
        **errors(
            400, 401, 404, 409, 413,
            s404="Another resource (RESOURCE_NOT_FOUND) or an unknown agent (AGENT_NOT_FOUND)",
            s409="The id is taken (THREAD_EXISTS)",
        ),
    },
    openapi_extra=_body_schema(ThreadCreate),
)
async def create_thread(
    request: Request,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
) -> JSONResponse:
    """Create an empty thread; 409 ``THREAD_EXISTS`` if the id is taken."""
    body = await read_body(request, MAX_BODY_BYTES)
    thread = await backend.create_thread(principal, body, resource=resource)
    return JSONResponse(thread.to_json(), status_code=201)


@router.get(
    "/threads",
    summary="List threads, most recently updated first",
    responses={
        200: {"model": ThreadPage, "description": "A page of threads"},
        **errors(400, 401, 404, s404="Another resource (RESOURCE_NOT_FOUND)"),
    },
)
async def list_threads(
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
    agentId: str | None = None,
    limit: Annotated[str | None, Query(description="1..100, default 20")] = None,
    cursor: Annotated[str | None, Query(description="nextCursor of the previous page")] = None,
) -> dict[str, Any]:
    """``{"threads": [...], "nextCursor"?}``; ``nextCursor`` is absent on the last page."""
    page_size = _int_query(limit, "limit", MAX_PAGE) or DEFAULT_PAGE
    if agentId is not None:
        validate_id(agentId, "agentId")
    if cursor is not None and (not cursor or len(cursor) > 2048):
        raise InputError("cursor is not valid", code="INVALID_CURSOR")
    threads, next_cursor = await backend.list_threads(
        principal, resource=resource, agent_id=agentId, limit=page_size, cursor=cursor
    )
    body: dict[str, Any] = {"threads": [t.to_json() for t in threads]}
    if next_cursor is not None:
        body["nextCursor"] = next_cursor
    return body


@router.get(
    "/threads/{threadId}",
    summary="Read one thread",
    responses={
        200: {"model": Thread, "description": "The thread"},
        **errors(400, 401, 404, s404=_NO_THREAD),
    },
)
async def get_thread(
    threadId: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
) -> dict[str, Any]:
    """The thread, or 404 ``THREAD_NOT_FOUND`` (also for another resource's thread).

    A thread whose last run ended asking (outcome ``interrupt``) also carries those open
    ``interrupts``, so a client that reloads can ask again instead of losing the question.
    """
    thread = await backend.get_thread(principal, threadId, resource)
    data = thread.to_json()
    pending = (thread.interrupts or {}).get("open")
    if pending:
        data["interrupts"] = list(pending)
    return data


@router.patch(
    "/threads/{threadId}",
    summary="Update a thread's title and/or metadata, or switch its current branch",
    responses={
        200: {"model": Thread, "description": "The updated thread"},
        **errors(
            400, 401, 404, 409, 413,
            s404=_NO_THREAD + "; an unknown currentBranch (BRANCH_NOT_FOUND)",
            s409="currentBranch while a run holds the thread (THREAD_BUSY)",
        ),
    },
    openapi_extra=_body_schema(ThreadUpdate),
)
async def update_thread(
    threadId: str,
    request: Request,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
) -> dict[str, Any]:
    """Replace ``title`` and/or ``metadata`` (metadata is replaced, not merged);
    ``currentBranch`` switches the branch the thread's messages and runs are."""
    body = await read_body(request, MAX_BODY_BYTES)
    return (await backend.update_thread(principal, threadId, body, resource=resource)).to_json()


@router.delete(
    "/threads/{threadId}",
    status_code=204,
    summary="Delete a thread",
    responses={204: {"description": "Deleted"}, **errors(400, 401, 404, s404=_NO_THREAD)},
)
async def delete_thread(
    threadId: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
) -> Response:
    """Delete the thread and its messages."""
    await backend.delete_thread(principal, threadId, resource)
    return Response(status_code=204)


@router.get(
    "/threads/{threadId}/branches",
    summary="List a thread's branches (regenerate, edit), oldest first",
    responses={
        200: {"model": BranchList, "description": "The branches; one (main) if it never branched"},
        **errors(400, 401, 404, s404=_NO_THREAD),
    },
)
async def list_branches(
    threadId: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
) -> dict[str, Any]:
    """``{"branches": [{id, fromMessageId, createdAt, current}, ...]}``."""
    listed = await backend.list_branches(principal, threadId, resource)
    return {"branches": [b.to_json() for b in listed]}


@router.get(
    "/threads/{threadId}/messages",
    summary="Read a thread's messages, oldest first",
    responses={
        200: {"model": MessagePage, "description": "A page of messages, in the chosen format"},
        **errors(400, 401, 404, s404=_NO_THREAD + "; an unknown branch (BRANCH_NOT_FOUND)"),
    },
)
async def list_messages(
    threadId: str,
    backend: CurrentBackend,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
    limit: Annotated[str | None, Query(description="the latest N messages, 1..1000")] = None,
    cursor: Annotated[str | None, Query(description="nextCursor of the previous page")] = None,
    before: Annotated[str | None, Query(description="only messages before this id")] = None,
    format: Annotated[
        str | None, Query(description="mastra (format v2) or agui; default: messages_format")
    ] = None,
    branch: Annotated[
        str | None, Query(description="a branch id (GET .../branches); default: the current")
    ] = None,
) -> dict[str, Any]:
    """``{"messages": [...], "nextCursor"?}``: the latest ``limit`` messages, oldest first.

    ``nextCursor`` (present when older messages exist) is passed back as ``cursor`` for the
    page before. ``format=agui`` gives the AG-UI messages as stored; ``format=mastra`` the
    Mastra v2 messages io.Assist renders (``iobridge.protocol.message_formats``).
    """
    count = _int_query(limit, "limit", MAX_MESSAGES_PAGE)
    if cursor is not None and before is not None and cursor != before:
        raise InputError("give cursor or before, not both", code="INVALID_CURSOR")
    start = cursor if cursor is not None else before
    if start is not None:
        try:
            validate_id(start, "cursor")
        except InputError as exc:
            raise InputError(exc.message, code="INVALID_CURSOR") from None
    page = await backend.list_messages(
        principal, threadId, resource=resource, limit=count, before=start, format=format,
        branch=branch,
    )
    body: dict[str, Any] = {"messages": page.messages}
    if page.next_cursor is not None:
        body["nextCursor"] = page.next_cursor
    return body
