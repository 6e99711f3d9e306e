"""FastAPI dependencies: the request's ``Backend`` and its authenticated principal.

``Authenticator`` reads the credential headers itself, for every mode. The ``X-API-Key`` and
bearer schemes are added to the OpenAPI document by ``document_security`` (so its "Authorize"
button shows them) rather than declared as FastAPI security dependencies, which would be
resolved on every request for nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from iobridge.app import Backend
from iobridge.auth import Principal

__all__ = [
    "CurrentBackend",
    "CurrentPrincipal",
    "current_backend",
    "current_principal",
    "document_security",
]

SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "ApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "auth mode api-key: the API key",
    },
    "Bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "auth mode jwt: a JWT; auth mode api-key: the API key",
    },
}


async def current_backend(request: Request) -> Backend:
    """The backend the app serves (``app.state.backend``)."""
    backend: Backend = request.app.state.backend
    return backend


#: Route parameter type: ``backend: CurrentBackend``.
CurrentBackend = Annotated[Backend, Depends(current_backend)]


async def current_principal(request: Request) -> Principal:
    """The request's principal; raises ``AuthenticationError`` (401) on bad credentials."""
    backend: Backend = request.app.state.backend
    return backend.authenticator.authenticate(request.headers)


#: Route parameter type: ``principal: CurrentPrincipal``.
CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


def document_security(app: FastAPI, prefix: str) -> None:
    """Declare the credential schemes in ``app``'s OpenAPI document for the routes under
    ``prefix`` (every one of them authenticates)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schema.setdefault("components", {}).setdefault("securitySchemes", {}).update(
            SECURITY_SCHEMES
        )
        requirement: list[dict[str, list[str]]] = [{name: []} for name in SECURITY_SCHEMES]
        for path, operations in schema.get("paths", {}).items():
            if path.startswith(prefix + "/"):
                for operation in operations.values():
                    operation.setdefault("security", requirement)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
