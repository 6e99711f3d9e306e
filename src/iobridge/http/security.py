"""The FastAPI dependency that authenticates a request (``app.state.authenticator``).

The ``X-API-Key`` and bearer schemes are declared only so the OpenAPI document (and its
"Authorize" button) shows them; ``Authenticator`` reads the headers itself, for every mode.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from iobridge.auth import Authenticator, Principal

__all__ = ["CurrentPrincipal", "current_principal"]

_api_key = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="auth mode api-key: the API key"
)
_bearer = HTTPBearer(
    auto_error=False, description="auth mode jwt: a JWT; auth mode api-key: the API key"
)


async def current_principal(
    request: Request,
    _key: Annotated[str | None, Security(_api_key)],
    _token: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """The request's principal; raises ``AuthenticationError`` (401) on bad credentials."""
    authenticator: Authenticator = request.app.state.authenticator
    return authenticator.authenticate(request.headers)


#: Route parameter type: ``principal: CurrentPrincipal``.
CurrentPrincipal = Annotated[Principal, Depends(current_principal)]
