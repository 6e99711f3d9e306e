"""``POST {prefix}/run`` served below FastAPI's routing, as plain ASGI middleware.

Every run request is a stream that stays open for the whole run, often minutes while a
frontend tool waits, and a server holds thousands of them. Through FastAPI's route a run
request also passes the exception middleware, the router, the route's two exit stacks and the
dependency solver, and each of them stays suspended on the stack for the life of the stream:
about 10 KiB per run (tracemalloc), a quarter of what an idle run cost. This middleware sits
just inside the guards and CORS (so both still apply, as to any route) and answers exactly
``POST {prefix}/run`` itself, with the same function the route uses
(:func:`~iobridge.http.runs.open_run_stream`) and the same error envelope; every other request
goes on to the application. The FastAPI route stays for :func:`~iobridge.http.app.mount` and
for the OpenAPI document.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from iobridge.app import Backend
from iobridge.errors import IobridgeError
from iobridge.http.errors import iobridge_error_response
from iobridge.http.runs import open_run_stream

__all__ = ["RunRoute"]


class RunRoute:
    """Answer ``POST {prefix}/run`` without the router; pass everything else on."""

    def __init__(self, app: ASGIApp, backend: Backend) -> None:
        self.app = app
        self.backend = backend
        self.path = backend.settings.prefix + "/run"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != self.path
            or scope["method"] != "POST"
            or scope.get("root_path")
        ):
            await self.app(scope, receive, send)
            return
        backend = self.backend
        request = Request(scope, receive)
        try:
            principal = backend.authenticator.authenticate(request.headers)
            response = await open_run_stream(backend, principal, request)
        except IobridgeError as exc:
            await iobridge_error_response(exc)(scope, receive, send)
            return
        await response(scope, receive, send)
