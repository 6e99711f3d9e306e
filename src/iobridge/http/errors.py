"""Every HTTP error leaves as the JSON envelope ``{"error": {"code", "message", "details"?}}``.

No handler ever puts an exception's text or a traceback in a response: unexpected errors are
logged and answered with a generic 500.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from iobridge.errors import (
    AuthenticationError,
    IobridgeError,
    ServiceUnavailable,
    TooManyRequests,
)

logger = logging.getLogger("iobridge.http")

_STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "TOO_MANY_REQUESTS",
    422: "INVALID_REQUEST",
    503: "SERVICE_UNAVAILABLE",
}


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A response carrying the error envelope."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def iobridge_error_response(exc: IobridgeError) -> JSONResponse:
    """The envelope of one of our errors, with ``WWW-Authenticate`` on 401 and
    ``Retry-After`` where the error names a delay."""
    headers: dict[str, str] = {}
    if isinstance(exc, AuthenticationError):
        logger.info("authentication refused: %s", exc.reason)
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, TooManyRequests | ServiceUnavailable) and exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return error_response(exc.status, exc.code, exc.message, exc.details, headers or None)


async def _iobridge_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, IobridgeError)
    return iobridge_error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [
        {"loc": list(err.get("loc", ())), "message": err.get("msg", "invalid")}
        for err in exc.errors()
    ]
    return error_response(400, "INVALID_REQUEST", "invalid request", details)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, "HTTP_ERROR")
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    return error_response(exc.status_code, code, message, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "INTERNAL_ERROR", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through the envelope."""
    app.add_exception_handler(IobridgeError, _iobridge_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
