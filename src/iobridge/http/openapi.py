"""What the OpenAPI document says beyond what FastAPI infers: the error envelope on every
status a route really answers, and no 422.

Routes declare their own statuses with ``errors(...)``. ``document_api`` adds what every
route shares, because the guards answer it before any route runs (``http/guards.py``,
``http/server_limits.py``): 400 ``HOST_NOT_ALLOWED`` and 431 everywhere; 415 and 408 on
body-carrying methods. It drops FastAPI's 422 ``HTTPValidationError``, which this server never
sends (validation errors are 400 envelopes, ``http/errors.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from iobridge.protocol.resources import CAPABILITY_SCHEMAS, MESSAGE_SCHEMAS, ErrorEnvelope

__all__ = ["STATUS_TEXT", "document_api", "errors"]

#: What each error status means on this server (a route may refine it).
STATUS_TEXT: dict[int, str] = {
    400: "Bad request: the body, an id, a query value or forwardedProps is invalid "
    "(INVALID_REQUEST, INVALID_JSON, INVALID_ID, INVALID_TEXT, INVALID_CURSOR, ...), or the "
    "Host header is not allowed (HOST_NOT_ALLOWED)",
    401: "Missing or bad credentials (auth modes api-key and jwt; WWW-Authenticate: Bearer)",
    404: "Not found, or not yours (another resource's answers exactly like a missing one)",
    408: "The request body stalled (REQUEST_TIMEOUT; iobridge serve's body_timeout)",
    409: "Conflict with the current state",
    410: "The events after the cursor are no longer retained (EVENTS_NOT_RETAINED)",
    413: "The body exceeds max_body_bytes (PAYLOAD_TOO_LARGE) or carries too many messages "
    "(TOO_MANY_MESSAGES)",
    415: "The body is not declared as application/json (UNSUPPORTED_MEDIA_TYPE)",
    429: "Over an admission limit; retry after the Retry-After seconds",
    431: "Too many request headers (TOO_MANY_HEADERS) or headers too large (HEADERS_TOO_LARGE)",
    503: "The server is shutting down (SERVER_SHUTTING_DOWN, Retry-After), the agent cannot "
    "run (AGENT_UNAVAILABLE), or with redis_url: Redis does not answer (CLUSTER_UNAVAILABLE) "
    "or the replica owning the run does not (RUN_OWNER_UNAVAILABLE, Retry-After)",
}

_BODY_METHODS = ("post", "put", "patch")


def _envelope(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}
        },
    }


def errors(*statuses: int, **refined: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with the envelope; ``refined`` maps
    ``s404="..."`` to a route-specific description."""
    return {
        status: {
            "model": ErrorEnvelope,
            "description": refined.get(f"s{status}", STATUS_TEXT[status]),
        }
        for status in statuses
    }


def _finish(schema: dict[str, Any]) -> None:
    """FastAPI's document as served: every route declares ``errors(...)``, so the schemas
    (``ErrorEnvelope`` among them), the paths and each operation's responses are there."""
    components = schema["components"]["schemas"]
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components.update(MESSAGE_SCHEMAS)
    components.update(CAPABILITY_SCHEMAS)
    for operations in schema["paths"].values():
        for method, operation in operations.items():
            responses = operation["responses"]
            responses.pop("422", None)
            shared = [400, 431] + ([415, 408] if method in _BODY_METHODS else [])
            for status in shared:
                responses.setdefault(str(status), _envelope(STATUS_TEXT[status]))


def document_api(app: FastAPI) -> None:
    """Finish ``app``'s OpenAPI document once, on first request (after every route is in)."""
    build = app.openapi
    finished: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if not finished:
            schema = build()
            _finish(schema)
            finished.append(schema)
        return finished[0]

    app.openapi = openapi  # type: ignore[method-assign]
