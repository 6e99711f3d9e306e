"""The playground: chat with the agents, watch the AG-UI events, answer frontend tools.

Plain HTML, CSS and JavaScript modules shipped in the package (no CDN, no build step).
The page learns the route prefix from its ``<html data-prefix>``, and the default agent and
the server's request limits (body, media part, message media) from
``/playground/config.json``, which authenticates like the API routes.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

__all__ = ["ASSETS", "playground_router"]

#: The files served under ``/playground/``, with their media types.
ASSETS = {
    "playground.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "inspector.js": "text/javascript; charset=utf-8",
    "attachments.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: The page loads nothing but its own files (and shows attached images from ``blob:`` URLs it
#: made itself) and talks only to its own origin: even a
#: rendering bug could not run a script from a message or send data elsewhere.
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
    ),
    # A page of another site that opens the playground gets no handle on its window.
    "Cross-Origin-Opener-Policy": "same-origin",
}


def playground_router(
    prefix: str,
    *,
    default_agent: Callable[[], str | None],
    authenticate: Callable[[Mapping[str, str]], object],
    limits: Mapping[str, int] | None = None,
) -> APIRouter:
    """``/playground`` (and ``/`` redirecting to it) for a bridge under ``prefix``.

    ``default_agent`` is asked at each page load, so agents registered later count.
    ``authenticate`` checks the config request's headers like the API routes do (it raises
    the authentication error the app answers with 401). ``limits`` (camelCase byte counts:
    ``maxBodyBytes``, ``maxMediaPartBytes``, ``maxMediaMessageBytes``) lets the page refuse
    an attachment before sending it; the server enforces them anyway (413).
    """
    folder = files(__package__)
    page = folder.joinpath("playground.html").read_text(encoding="utf-8")
    page = page.replace("__PREFIX__", html.escape(prefix, quote=True))
    assets = {name: folder.joinpath(name).read_bytes() for name in ASSETS}
    router = APIRouter(include_in_schema=False)

    @router.get("/playground")
    async def playground() -> HTMLResponse:
        return HTMLResponse(page, headers=_HEADERS)

    @router.get("/playground/config.json")
    async def config(request: Request) -> dict[str, Any]:
        authenticate(request.headers)
        return {"prefix": prefix, "defaultAgent": default_agent(), "limits": dict(limits or {})}

    @router.get("/playground/{name}")
    async def asset(name: str) -> Response:
        if name not in assets:
            return Response(status_code=404)
        return Response(assets[name], media_type=ASSETS[name], headers=_HEADERS)

    @router.get("/favicon.ico")
    async def favicon() -> Response:
        return Response(assets["favicon.svg"], media_type=ASSETS["favicon.svg"])

    @router.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/playground")

    return router
