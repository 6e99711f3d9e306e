"""Agent discovery: ``GET /agents`` and ``GET /agents/{agentId}`` (conformance Level 4)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from iobridge.http.openapi import errors
from iobridge.http.security import CurrentBackend, CurrentPrincipal
from iobridge.protocol.resources import Agent, AgentList
from iobridge.protocol.versions import SUPPORTED_VERSIONS

__all__ = ["router"]

router = APIRouter()  # tagged where it is included (http/app.py)


@router.get(
    "/agents",
    summary="List available agents",
    responses={200: {"model": AgentList, "description": "The agents"}, **errors(401)},
)
async def list_agents(backend: CurrentBackend, principal: CurrentPrincipal) -> dict[str, Any]:
    """``{"agents": [{id, name, description, modelId?, tools, capabilities}],
    "protocolVersions": [...]}``, agents in registration order."""
    return {"agents": backend.list_agents(), "protocolVersions": list(SUPPORTED_VERSIONS)}


@router.get(
    "/agents/{agentId}",
    summary="Read one agent",
    responses={
        200: {"model": Agent, "description": "The agent"},
        **errors(400, 401, 404, s404="No such agent (AGENT_NOT_FOUND)"),
    },
)
async def get_agent(
    agentId: str, backend: CurrentBackend, principal: CurrentPrincipal
) -> dict[str, Any]:
    """One agent's discovery data, or 404 ``AGENT_NOT_FOUND``."""
    return backend.describe_agent(agentId)
