"""``GET /healthz`` (the process answers) and ``GET /readyz`` (it can serve: store reachable,
admitting runs), for load balancers and orchestrators, and ``GET {prefix}``, a small index of
the backend for people and tools. None needs credentials."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from iobridge import __version__
from iobridge.http.security import CurrentBackend
from iobridge.protocol.resources import ErrorEnvelope

__all__ = ["install_index", "router"]

router = APIRouter(tags=["health"])

#: The io.Intelligence Agent Protocol routes, relative to the prefix.
ROUTES = [
    "POST /run",
    "POST /runs/{runId}/tool-calls/{toolCallId}/result",
    "GET /runs/{runId}/events",
    "POST /runs/{runId}/cancel",
    "GET /agents",
    "GET /agents/{agentId}",
    "POST /threads",
    "GET /threads",
    "GET /threads/{threadId}",
    "PATCH /threads/{threadId}",
    "DELETE /threads/{threadId}",
    "GET /threads/{threadId}/messages",
]


def install_index(app: FastAPI, prefix: str) -> None:
    """``GET {prefix}``: name, version, conformance levels and routes."""

    async def index() -> dict[str, Any]:
        return {
            "name": "iobridge",
            "version": __version__,
            "protocol": "io.Intelligence Agent Protocol",
            "levels": [1, 2, 3, 4],
            "prefix": prefix,
            "routes": ROUTES,
        }

    app.add_api_route(prefix or "/", index, methods=["GET"], summary="What this backend serves",
                      tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the server runs."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the store answers and runs are admitted",
    responses={503: {"model": ErrorEnvelope, "description": "Not ready (NOT_READY)"}},
)
async def readyz(backend: CurrentBackend) -> JSONResponse:
    """200 ``{"status": "ready"}``, or 503 with the reason (store down, shutting down)."""
    problem = await backend.readiness_problem()
    if problem is None:
        return JSONResponse({"status": "ready"})
    return JSONResponse(
        {"error": {"code": "NOT_READY", "message": problem}}, status_code=503
    )
