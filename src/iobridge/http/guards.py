"""Cross-site guards, as plain ASGI middleware in front of every route.

* ``HostGuard``: the ``Host`` header must name one of ``allowed_hosts`` (400
  ``HOST_NOT_ALLOWED``). A web page that rebinds its own DNS name to 127.0.0.1 reaches a
  local server under *its* name, so checking the name defeats DNS rebinding.
* ``JsonBodyGuard``: ``POST``/``PUT``/``PATCH`` must declare ``Content-Type:
  application/json`` (415 ``UNSUPPORTED_MEDIA_TYPE``), even with an empty body. A browser
  sends such a request cross-site only after a CORS preflight, which this server refuses
  unless ``cors_origins`` allows the origin; ``text/plain`` or form posts never get in.

* ``EncodedSlashGuard``: a path with ``%2F`` is 404 ``NOT_FOUND``. The router sees the decoded
  path, so an id holding a ``/`` would split into two segments and reach another route (a
  405 or a redirect that no route documents); no route takes such an id.

They answer before the application sees the request, so nothing runs and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from iobridge.http.errors import error_response
from iobridge.http.server_limits import HeaderGuard

if TYPE_CHECKING:
    from iobridge.config import Settings

__all__ = ["EncodedSlashGuard", "HostGuard", "JsonBodyGuard", "host_allowed", "install_guards"]

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


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class HostGuard:
    """Refuse requests whose ``Host`` is not allowed (400 ``HOST_NOT_ALLOWED``)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not host_allowed(_header(scope, b"host"), self.allowed):
            response = error_response(400, "HOST_NOT_ALLOWED", "the Host header is not allowed")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class JsonBodyGuard:
    """Refuse body-carrying methods without ``Content-Type: application/json`` (415)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _BODY_METHODS:
            media = (_header(scope, b"content-type") or "").partition(";")[0].strip().lower()
            if media != "application/json":
                response = error_response(
                    415, "UNSUPPORTED_MEDIA_TYPE", "the request body must be application/json"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class EncodedSlashGuard:
    """Refuse paths holding an encoded ``/`` (404 ``NOT_FOUND``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"%2f" in (scope.get("raw_path") or b"").lower():
            response = error_response(
                404, "NOT_FOUND", "no route takes an id holding '/' (%2F in the path)"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install_guards(app: Starlette, settings: Settings) -> None:
    """Put the guards in front of ``app``'s routes (and of CORS), outermost first: header
    count and size (``HeaderGuard``), host, JSON body, encoded slashes.

    Call it after any other ``add_middleware`` so the guards stay outermost.
    """
    app.add_middleware(EncodedSlashGuard)
    app.add_middleware(JsonBodyGuard)
    app.add_middleware(HostGuard, allowed_hosts=tuple(settings.trusted_hosts))
    app.add_middleware(
        HeaderGuard, max_headers=settings.max_headers, max_header_bytes=settings.max_header_bytes
    )
