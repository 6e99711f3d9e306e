"""The request guards, one plain ASGI middleware in front of every route.

Checked in this order, in one pass over the headers:

* header count and size: at most ``max_headers`` header lines and ``max_header_bytes`` of
  target and headers in all (431 ``TOO_MANY_HEADERS`` / ``HEADERS_TOO_LARGE``). h11 enforces
  the size only on a head that arrives in pieces; a head read in one chunk is measured here,
  as is any head under another server.
* ``Host``: the header must name one of ``allowed_hosts`` (400 ``HOST_NOT_ALLOWED``). A web
  page that rebinds its own DNS name to 127.0.0.1 reaches a local server under *its* name, so
  checking the name defeats DNS rebinding.
* ``POST``/``PUT``/``PATCH`` must declare ``Content-Type: application/json`` (415
  ``UNSUPPORTED_MEDIA_TYPE``), even with an empty body. A browser sends such a request
  cross-site only after a CORS preflight, which this server refuses unless ``cors_origins``
  allows the origin; ``text/plain`` or form posts never get in.
* a path with ``%2F`` is 404 ``NOT_FOUND``. The router sees the decoded path, so an id holding
  a ``/`` would split into two segments and reach another route (a 405 or a redirect that no
  route documents); no route takes such an id.

They answer before the application sees the request, so nothing runs and nothing is stored.
One middleware rather than four: each layer stays on the stack for the whole life of a run's
stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from iobridge.http.errors import error_response

if TYPE_CHECKING:
    from iobridge.config import Settings

__all__ = ["RequestGuard", "host_allowed", "install_guards"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _host_name(header: str) -> str:
    """``Host`` without its port, lowercased; IPv6 literals without brackets."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def host_allowed(header: str | None, patterns: Iterable[str]) -> bool:
    """Whether a ``Host`` header matches a pattern: a name, ``*.domain`` or ``*``."""
    if not header:
        return False
    name = _host_name(header)
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern == "*" or pattern == name:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


class RequestGuard:
    """Refuse requests that break a guard (see the module docstring) before any route runs."""

    def __init__(
        self, app: ASGIApp, *, allowed_hosts: Iterable[str], max_headers: int,
        max_header_bytes: int,
    ) -> None:
        self.app = app
        self.allowed = tuple(allowed_hosts)
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = scope["headers"]
        raw_path = scope.get("raw_path") or b""
        size = len(raw_path) + len(scope.get("query_string") or b"")
        host = content_type = None
        for name, value in headers:
            size += len(name) + len(value) + 4
            if name == b"host":
                host = host or value
            elif name == b"content-type":
                content_type = content_type or value
        if len(headers) > self.max_headers:
            return error_response(
                431, "TOO_MANY_HEADERS", f"a request carries at most {self.max_headers} headers"
            )
        if size > self.max_header_bytes:
            return error_response(431, "HEADERS_TOO_LARGE", "the request headers are too large")
        if not host_allowed(None if host is None else host.decode("latin-1"), self.allowed):
            return error_response(400, "HOST_NOT_ALLOWED", "the Host header is not allowed")
        if scope["method"] in _BODY_METHODS:
            media = (content_type or b"").decode("latin-1").partition(";")[0].strip().lower()
            if media != "application/json":
                return error_response(
                    415, "UNSUPPORTED_MEDIA_TYPE", "the request body must be application/json"
                )
        if raw_path.lower().find(b"%2f") != -1:  # not ``in``: see has_nul_escape
            return error_response(
                404, "NOT_FOUND", "no route takes an id holding '/' (%2F in the path)"
            )
        return None


def install_guards(app: Starlette, settings: Settings) -> None:
    """Put :class:`RequestGuard` in front of ``app``'s routes (and of CORS).

    Call it after any other ``add_middleware`` so the guard stays outermost.
    """
    app.add_middleware(
        RequestGuard,
        allowed_hosts=tuple(settings.trusted_hosts),
        max_headers=settings.max_headers,
        max_header_bytes=settings.max_header_bytes,
    )
