"""FastAPI dependencies: the request's ``Backend`` and its authenticated principal.

The ``X-API-Key`` and bearer schemes are declared only so the OpenAPI document (and its
"Authorize" button) shows them; ``Authenticator`` reads the headers itself, for every mode.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from iobridge.app import Backend
from iobridge.auth import Principal

__all__ = ["CurrentBackend", "CurrentPrincipal", "current_backend", "current_principal"]

_api_key = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="auth mode api-key: the API key"
)
_bearer = HTTPBearer(
    auto_error=False, description="auth mode jwt: a JWT; auth mode api-key: the API key"
)


async def current_backend(request: Request) -> Backend:
    """The backend the app serves (``app.state.backend``)."""
    backend: Backend = request.app.state.backend
    return backend


#: Route parameter type: ``backend: CurrentBackend``.
CurrentBackend = Annotated[Backend, Depends(current_backend)]


async def current_principal(
    request: Request,
    _key: Annotated[str | None, Security(_api_key)],
    _token: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """The request's principal; raises ``AuthenticationError`` (401) on bad credentials."""
    backend: Backend = request.app.state.backend
    return backend.authenticator.authenticate(request.headers)


#: Route parameter type: ``principal: CurrentPrincipal``.
CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
