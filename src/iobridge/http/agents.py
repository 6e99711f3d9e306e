"""Agent discovery: ``GET /agents`` and ``GET /agents/{agentId}`` (conformance Level 4)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from iobridge.agents.catalog import AgentCatalog
from iobridge.http.security import CurrentPrincipal
from iobridge.store.base import validate_id

__all__ = ["router"]

router = APIRouter(tags=["agents"])


def _catalog(request: Request) -> AgentCatalog:
    catalog: AgentCatalog = request.app.state.catalog
    return catalog


@router.get("/agents", summary="List available agents")
async def list_agents(request: Request, principal: CurrentPrincipal) -> dict[str, Any]:
    """``{"agents": [{id, name, description, modelId?, tools}]}`` in registration order."""
    return {"agents": [agent.describe() for agent in _catalog(request).list()]}


@router.get("/agents/{agentId}", summary="Read one agent")
async def get_agent(agentId: str, request: Request, principal: CurrentPrincipal) -> dict[str, Any]:
    """One agent's discovery data, or 404 ``AGENT_NOT_FOUND``."""
    return _catalog(request).get(validate_id(agentId, "agentId")).describe()
