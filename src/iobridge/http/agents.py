"""Agent discovery: ``GET /agents`` and ``GET /agents/{agentId}`` (conformance Level 4)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from iobridge.http.security import CurrentBackend, CurrentPrincipal

__all__ = ["router"]

router = APIRouter(tags=["agents"])


@router.get("/agents", summary="List available agents")
async def list_agents(backend: CurrentBackend, principal: CurrentPrincipal) -> dict[str, Any]:
    """``{"agents": [{id, name, description, modelId?, tools}]}`` in registration order."""
    return {"agents": backend.list_agents()}


@router.get("/agents/{agentId}", summary="Read one agent")
async def get_agent(
    agentId: str, backend: CurrentBackend, principal: CurrentPrincipal
) -> dict[str, Any]:
    """One agent's discovery data, or 404 ``AGENT_NOT_FOUND``."""
    return backend.describe_agent(agentId)
