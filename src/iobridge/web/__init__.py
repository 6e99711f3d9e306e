"""The playground page: chat with the agents, watch the AG-UI events, try frontend tools."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse


def playground_router(prefix: str) -> APIRouter:
    """``GET /playground`` (and ``/`` redirecting to it) for a bridge under ``prefix``."""
    page = files(__package__).joinpath("playground.html").read_text(encoding="utf-8")
    page = page.replace("__PREFIX__", prefix)
    router = APIRouter(include_in_schema=False)

    @router.get("/playground")
    async def playground() -> HTMLResponse:
        return HTMLResponse(page)

    @router.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/playground")

    return router
