"""Thread and message routes (conformance Level 3).

Every route authenticates first (401), then validates its input (400), then asks the Backend,
which looks the thread up *within the caller's resources*: a thread of another resource is a
404, exactly like a missing one. Bodies and query values are parsed here rather than by
FastAPI so that every bad input comes out in the error envelope with a stable code.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from iobridge.app import MAX_MESSAGES_PAGE
from iobridge.errors import InputError
from iobridge.http.body import parse_json_object, read_body
from iobridge.http.openapi import errors
from iobridge.http.security import CurrentBackend, CurrentPrincipal
from iobridge.protocol.message_formats import to_mastra
from iobridge.protocol.resources import MessagePage, Thread, ThreadPage
from iobridge.store.base import format_timestamp, validate_id, validate_metadata, validate_title

__all__ = ["MAX_BODY_BYTES", "ThreadCreate", "ThreadUpdate", "router"]

MAX_BODY_BYTES = 256 * 1024
DEFAULT_PAGE = 20
MAX_PAGE = 100

router = APIRouter(tags=["threads"])

_NO_THREAD = "No such thread, or another resource's (THREAD_NOT_FOUND)"


class ThreadCreate(BaseModel):
    """Body of ``POST /threads``; unknown keys are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")

    id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    resourceId: str | None = None
    agentId: str | None = None


class ThreadUpdate(BaseModel):
    """Body of ``PATCH /threads/{threadId}``; absent fields stay as they are."""

    model_config = ConfigDict(strict=True, extra="ignore")

    title: str | None = None
    metadata: dict[str, Any] | None = None


_Body = TypeVar("_Body", bound=BaseModel)

ResourceQuery = Annotated[
    str | None, Query(alias="resourceId", description="Owner; default: the caller's")
]


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"application/json": {"schema": model.model_json_schema(mode="validation")}}
    return {"requestBody": {"content": schema, "required": False}}


async def _read_body(request: Request, model: type[_Body], max_depth: int) -> _Body:
    raw = await read_body(request, MAX_BODY_BYTES)
    if not raw.strip():
        return model()
    data = parse_json_object(raw, max_depth)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        raise InputError("body is not valid", details=details) from None


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
    body = await _read_body(request, ThreadCreate, backend.settings.max_json_depth)
    thread = await backend.create_thread(
        principal,
        thread_id=validate_id(body.id, "id") if body.id is not None else str(uuid.uuid4()),
        resource=body.resourceId or resource,
        agent_id=validate_id(body.agentId, "agentId") if body.agentId is not None else None,
        title=validate_title(body.title) if body.title is not None else "",
        metadata=validate_metadata(body.metadata) if body.metadata is not None else {},
    )
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
    """The thread, or 404 ``THREAD_NOT_FOUND`` (also for another resource's thread)."""
    return (await backend.get_thread(principal, threadId, resource)).to_json()


@router.patch(
    "/threads/{threadId}",
    summary="Update a thread's title and/or metadata",
    responses={
        200: {"model": Thread, "description": "The updated thread"},
        **errors(400, 401, 404, 413, s404=_NO_THREAD),
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
    """Replace ``title`` and/or ``metadata`` (metadata is replaced, not merged)."""
    body = await _read_body(request, ThreadUpdate, backend.settings.max_json_depth)
    thread = await backend.update_thread(
        principal,
        threadId,
        resource=resource,
        title=validate_title(body.title) if body.title is not None else None,
        metadata=validate_metadata(body.metadata) if body.metadata is not None else None,
    )
    return thread.to_json()


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


MESSAGE_FORMATS = ("mastra", "agui")


@router.get(
    "/threads/{threadId}/messages",
    summary="Read a thread's messages, oldest first",
    responses={
        200: {"model": MessagePage, "description": "A page of messages, in the chosen format"},
        **errors(400, 401, 404, s404=_NO_THREAD),
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
) -> dict[str, Any]:
    """``{"messages": [...], "nextCursor"?}``: the latest ``limit`` messages, oldest first.

    ``nextCursor`` (present when older messages exist) is passed back as ``cursor`` for the
    page before. ``format=agui`` gives the AG-UI messages as stored; ``format=mastra`` the
    Mastra v2 messages io.Assist renders (``iobridge.protocol.message_formats``).
    """
    chosen = format or backend.settings.messages_format
    if chosen not in MESSAGE_FORMATS:
        raise InputError("format must be 'mastra' or 'agui'", code="INVALID_REQUEST")
    count = _int_query(limit, "limit", MAX_MESSAGES_PAGE)
    if cursor is not None and before is not None and cursor != before:
        raise InputError("give cursor or before, not both", code="INVALID_CURSOR")
    start = cursor if cursor is not None else before
    if start is not None:
        try:
            validate_id(start, "cursor")
        except InputError as exc:
            raise InputError(exc.message, code="INVALID_CURSOR") from None
    thread, rows, next_cursor = await backend.list_messages(
        principal, threadId, resource=resource, limit=count, before=start
    )
    body: dict[str, Any]
    if chosen == "agui":
        body = {"messages": [row.message for row in rows]}
    else:
        timed = [(row.message, format_timestamp(row.created_at)) for row in rows]
        body = {
            "messages": to_mastra(timed, thread_id=thread.id, resource_id=thread.resource_id)
        }
    if next_cursor is not None:
        body["nextCursor"] = next_cursor
    return body
