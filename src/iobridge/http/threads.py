"""Thread and message routes (conformance Level 3).

Every route authenticates first (401), then validates its input (400), then looks the thread
up *within the caller's resources*: a thread of another resource is a 404, exactly like a
missing one. Bodies and query values are parsed here rather than by FastAPI so that every
bad input comes out in the error envelope with a stable code.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from iobridge.auth import Authenticator, Principal
from iobridge.errors import InputError, NotFoundError
from iobridge.http.body import parse_json_object, read_body
from iobridge.http.security import CurrentPrincipal
from iobridge.store.base import (
    Thread,
    ThreadStore,
    validate_id,
    validate_metadata,
    validate_title,
)

__all__ = ["MAX_BODY_BYTES", "ThreadCreate", "ThreadUpdate", "router"]

MAX_BODY_BYTES = 256 * 1024
DEFAULT_PAGE = 20
MAX_PAGE = 100
MAX_MESSAGES_PAGE = 1000

router = APIRouter(tags=["threads"])


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
    schema = {"application/json": {"schema": model.model_json_schema()}}
    return {"requestBody": {"content": schema, "required": False}}


async def _read_body(request: Request, model: type[_Body]) -> _Body:
    raw = await read_body(request, MAX_BODY_BYTES)
    if not raw.strip():
        return model()
    data = parse_json_object(raw)
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


def _store(request: Request) -> ThreadStore:
    store: ThreadStore = request.app.state.store
    return store


def _auth(request: Request) -> Authenticator:
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator


async def _owned_thread(
    request: Request, principal: Principal, thread_id: str, resource: str | None
) -> Thread:
    """The thread if the caller may see it (and it belongs to ``resource`` when given)."""
    validate_id(thread_id, "threadId")
    if resource is not None:
        validate_id(resource, "resourceId")
    thread = await _store(request).get_thread(thread_id)
    if (
        thread is None
        or not _auth(request).can_access(principal, thread.resource_id)
        or (resource is not None and thread.resource_id != resource)
    ):
        raise NotFoundError(f"thread {thread_id!r} not found", code="THREAD_NOT_FOUND")
    return thread


@router.post(
    "/threads",
    status_code=201,
    summary="Create a thread",
    openapi_extra=_body_schema(ThreadCreate),
)
async def create_thread(
    request: Request, principal: CurrentPrincipal, resource: ResourceQuery = None
) -> JSONResponse:
    """Create an empty thread; 409 ``THREAD_EXISTS`` if the id is taken."""
    body = await _read_body(request, ThreadCreate)
    thread_id = validate_id(body.id, "id") if body.id is not None else str(uuid.uuid4())
    resource_id = _auth(request).resolve_resource(principal, body.resourceId or resource)
    title = validate_title(body.title) if body.title is not None else ""
    metadata = validate_metadata(body.metadata) if body.metadata is not None else {}
    agent_id = None
    if body.agentId is not None:
        agent_id = validate_id(body.agentId, "agentId")
        catalog = getattr(request.app.state, "catalog", None)
        if catalog is not None:
            catalog.get(agent_id)
    thread = await _store(request).create_thread(
        thread_id, resource_id=resource_id, agent_id=agent_id, title=title, metadata=metadata
    )
    return JSONResponse(thread.to_json(), status_code=201)


@router.get("/threads", summary="List threads, most recently updated first")
async def list_threads(
    request: Request,
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
    scope = _auth(request).list_scope(principal, resource)
    threads, next_cursor = await _store(request).list_threads(
        scope, agent_id=agentId, limit=page_size, cursor=cursor
    )
    body: dict[str, Any] = {"threads": [t.to_json() for t in threads]}
    if next_cursor is not None:
        body["nextCursor"] = next_cursor
    return body


@router.get("/threads/{threadId}", summary="Read one thread")
async def get_thread(
    threadId: str, request: Request, principal: CurrentPrincipal, resource: ResourceQuery = None
) -> dict[str, Any]:
    """The thread, or 404 ``THREAD_NOT_FOUND`` (also for another resource's thread)."""
    return (await _owned_thread(request, principal, threadId, resource)).to_json()


@router.patch(
    "/threads/{threadId}",
    summary="Update a thread's title and/or metadata",
    openapi_extra=_body_schema(ThreadUpdate),
)
async def update_thread(
    threadId: str, request: Request, principal: CurrentPrincipal, resource: ResourceQuery = None
) -> dict[str, Any]:
    """Replace ``title`` and/or ``metadata`` (metadata is replaced, not merged)."""
    await _owned_thread(request, principal, threadId, resource)
    body = await _read_body(request, ThreadUpdate)
    title = validate_title(body.title) if body.title is not None else None
    metadata = validate_metadata(body.metadata) if body.metadata is not None else None
    thread = await _store(request).update_thread(threadId, title=title, metadata=metadata)
    return thread.to_json()


@router.delete("/threads/{threadId}", status_code=204, summary="Delete a thread")
async def delete_thread(
    threadId: str, request: Request, principal: CurrentPrincipal, resource: ResourceQuery = None
) -> Response:
    """Delete the thread and its messages."""
    await _owned_thread(request, principal, threadId, resource)
    if not await _store(request).delete_thread(threadId):
        raise NotFoundError(f"thread {threadId!r} not found", code="THREAD_NOT_FOUND")
    return Response(status_code=204)


@router.get("/threads/{threadId}/messages", summary="Read a thread's messages, oldest first")
async def list_messages(
    threadId: str,
    request: Request,
    principal: CurrentPrincipal,
    resource: ResourceQuery = None,
    limit: Annotated[str | None, Query(description="the last N messages, 1..1000")] = None,
    before: Annotated[str | None, Query(description="only messages before this id")] = None,
) -> dict[str, Any]:
    """``{"messages": [...]}``: AG-UI messages as stored, activity and reasoning included."""
    await _owned_thread(request, principal, threadId, resource)
    count = _int_query(limit, "limit", MAX_MESSAGES_PAGE)
    if before is not None:
        validate_id(before, "before")
    messages = await _store(request).list_messages(threadId, limit=count, before=before)
    return {"messages": messages}
