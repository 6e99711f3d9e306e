"""``GET /healthz`` (the process answers) and ``GET /readyz`` (it can serve: store reachable,
admitting runs), for load balancers and orchestrators. Neither needs credentials."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from iobridge.http.security import CurrentBackend

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the server runs."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the store answers and runs are admitted")
async def readyz(backend: CurrentBackend) -> JSONResponse:
    """200 ``{"status": "ready"}``, or 503 with the reason (store down, shutting down)."""
    problem = await backend.readiness_problem()
    if problem is None:
        return JSONResponse({"status": "ready"})
    return JSONResponse(
        {"error": {"code": "NOT_READY", "message": problem}}, status_code=503
    )
