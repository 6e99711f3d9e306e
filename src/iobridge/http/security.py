"""The FastAPI dependency that authenticates a request (``app.state.authenticator``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from iobridge.auth import Authenticator, Principal

__all__ = ["CurrentPrincipal", "current_principal"]


async def current_principal(request: Request) -> Principal:
    """The request's principal; raises ``AuthenticationError`` (401) on bad credentials."""
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.authenticate(request.headers)


#: Route parameter type: ``principal: CurrentPrincipal``.
CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
