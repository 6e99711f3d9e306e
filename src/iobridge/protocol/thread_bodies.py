"""The bodies of ``POST /threads`` and ``PATCH /threads/{threadId}``, parsed and checked.

Unknown keys are ignored; a key of the wrong type, a title or metadata the store would refuse,
or a bad id is one ``InputError`` before anything is stored. An empty body means "all
defaults" (a thread with a generated id, or a patch that changes nothing).
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from iobridge.errors import InputError
from iobridge.protocol.bodies import Body, parse_json_object
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH
from iobridge.protocol.text import reject_nul, validate_id

__all__ = [
    "MAX_METADATA_BYTES",
    "MAX_TITLE_LENGTH",
    "ThreadCreate",
    "ThreadUpdate",
    "parse_thread_create",
    "parse_thread_update",
    "validate_metadata",
    "validate_title",
]

MAX_TITLE_LENGTH = 1024
MAX_METADATA_BYTES = 64 * 1024


class ThreadCreate(BaseModel):
    """Body of ``POST /threads``; unknown keys are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    resourceId: str | None = None
    agentId: str | None = None


class ThreadUpdate(BaseModel):
    """Body of ``PATCH /threads/{threadId}``; absent fields stay as they are."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    title: str | None = None
    metadata: dict[str, Any] | None = None
    #: Switch the thread to this branch (``GET /threads/{id}/branches``).
    currentBranch: str | None = None


def validate_title(value: object) -> str:
    """Return ``value`` if it is a string of ≤ 1024 characters without U+0000.

    Raises:
        InputError: otherwise (``INVALID_REQUEST``; ``INVALID_TEXT`` for U+0000).
    """
    if not isinstance(value, str):
        raise InputError("title must be a string", code="INVALID_REQUEST")
    if len(value) > MAX_TITLE_LENGTH:
        raise InputError(
            f"title is longer than {MAX_TITLE_LENGTH} characters", code="INVALID_REQUEST"
        )
    reject_nul(value)
    return value


def validate_metadata(value: object) -> dict[str, Any]:
    """Return ``value`` if it is a JSON object of ≤ 64 KiB without U+0000 in its text.

    Raises:
        InputError: otherwise (``INVALID_REQUEST``; ``INVALID_TEXT`` for U+0000).
    """
    if not isinstance(value, dict):
        raise InputError("metadata must be a JSON object", code="INVALID_REQUEST")
    try:
        encoded = orjson.dumps(value)
    except TypeError as exc:
        raise InputError("metadata is not JSON", code="INVALID_REQUEST") from exc
    reject_nul(value, encoded)
    if len(encoded) > MAX_METADATA_BYTES:
        raise InputError(
            f"metadata is larger than {MAX_METADATA_BYTES} bytes", code="INVALID_REQUEST"
        )
    return value


def parse_thread_create(body: Body, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ThreadCreate:
    """``POST /threads``'s body, every field checked (``id`` stays ``None`` when absent).

    Raises:
        InputError: not a JSON object, a field of the wrong type, a bad id (``INVALID_ID``),
            title or metadata.
    """
    parsed = _validated(body, ThreadCreate, max_depth)
    if parsed.id is not None:
        validate_id(parsed.id, "id")
    if parsed.agentId is not None:
        validate_id(parsed.agentId, "agentId")
    _check_text(parsed.title, parsed.metadata)
    return parsed


def parse_thread_update(body: Body, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ThreadUpdate:
    """``PATCH /threads/{threadId}``'s body, title and metadata checked.

    Raises:
        InputError: not a JSON object, a field of the wrong type, a bad title or metadata.
    """
    parsed = _validated(body, ThreadUpdate, max_depth)
    _check_text(parsed.title, parsed.metadata)
    if parsed.currentBranch is not None:
        validate_id(parsed.currentBranch, "currentBranch")
    return parsed


_Model = TypeVar("_Model", bound=BaseModel)


def _validated(body: Body, model: type[_Model], max_depth: int) -> _Model:
    if not isinstance(body, dict) and not body.strip():
        return model()
    try:
        return model.model_validate(parse_json_object(body, max_depth))
    except ValidationError as exc:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        raise InputError("body is not valid", details=details) from None


def _check_text(title: str | None, metadata: dict[str, Any] | None) -> None:
    if title is not None:
        validate_title(title)
    if metadata is not None:
        validate_metadata(metadata)
