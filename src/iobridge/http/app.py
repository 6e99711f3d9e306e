"""The FastAPI application: ``create_app(backend)`` for a server, ``mount(app, backend)``
into your own app.

Both put a :class:`~iobridge.app.Backend` behind the io protocol's routes (under the
configured prefix) and route every error through the JSON envelope. A backend that is not
open when the app starts is opened by the app's lifespan and closed at its shutdown
(``create_app(Backend(settings, agents=[...]))``); one the caller already opened is only
served, and the caller closes it (``iobridge serve`` does so to share it with N-PAMP).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.telemetry import TelemetryConfig

from iobridge import __version__
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.agents import router as agents_router
from iobridge.http.errors import install_error_handlers
from iobridge.http.guards import install_guards
from iobridge.http.health import install_index
from iobridge.http.health import router as health_router
from iobridge.http.metrics import install_metrics
from iobridge.http.openapi import document_api
from iobridge.http.run_route import RunRoute
from iobridge.http.runs import router as runs_router
from iobridge.http.security import document_security
from iobridge.http.threads import router as threads_router
from iobridge.web import playground_router
from iobridge.web.docs import install_docs

__all__ = ["create_app", "mount"]


def _fastapi_telemetry(settings: Settings) -> TelemetryConfig:
    """FastAPI's own OpenTelemetry (HTTP spans, metrics, logs) follows ``tracing.enabled``.

    Off, iobridge emits no OpenTelemetry signal at all, and FastAPI is told so: otherwise it
    asks the global providers on every request whether someone configured them (three
    environment lookups; 2 % of a short run's server time in ``bench/load_runs.py``).
    """
    if settings.tracing.enabled:
        return {}
    return {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


def _install_routes(app: FastAPI, backend: Backend) -> None:
    app.state.backend = backend
    install_error_handlers(app)
    prefix = backend.settings.prefix
    app.include_router(runs_router, prefix=prefix, tags=["runs"])
    app.include_router(threads_router, prefix=prefix, tags=["threads"])
    app.include_router(agents_router, prefix=prefix, tags=["agents"])
    document_security(app, prefix)
    document_api(app)


@asynccontextmanager
async def _serving(backend: Backend) -> AsyncIterator[None]:
    """Open ``backend`` for the app's life unless its caller already did."""
    async with AsyncExitStack() as stack:
        if not backend.is_open:
            await stack.enter_async_context(backend)
        yield


def mount(app: FastAPI, backend: Backend) -> None:
    """Serve ``backend`` from an existing FastAPI ``app`` (one call).

    Adds the routes and error handlers, and wraps the app's lifespan so that a backend not
    yet open opens at startup and closes (live runs stopped, store closed) at shutdown.
    """
    _install_routes(app, backend)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _serving(backend), inner(app):
            yield

    app.router.lifespan_context = lifespan


def create_app(backend: Backend) -> FastAPI:
    """A complete server application for ``backend``.

    The app's lifespan opens and closes ``backend`` unless it is already open when the app
    starts (then the caller opens and closes it; the app only serves it).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _serving(backend):
            yield

    app = FastAPI(
        title="iobridge",
        version=__version__,
        summary="io.Intelligence Agent Protocol backend (AG-UI over SSE)",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=_fastapi_telemetry(backend.settings),
    )
    install_docs(app)
    # Innermost, inside CORS and the guards: a run's stream held below the router costs 20 %
    # less memory per idle run (bench/idle_runs.py A/B, round 3: 35.3 vs 44.4 KiB).
    app.add_middleware(RunRoute, backend=backend)
    if backend.settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=backend.settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
            allow_headers=["*"],
        )
    install_guards(app, backend.settings)
    _install_routes(app, backend)
    app.include_router(health_router)
    install_metrics(app, backend)
    install_index(app, backend.settings.prefix)
    if backend.settings.playground:
        catalog = backend.catalog
        page = playground_router(
            backend.settings.prefix,
            default_agent=lambda: catalog.default_id,
            authenticate=backend.authenticator.authenticate,
            limits={
                "maxBodyBytes": backend.settings.max_body_bytes,
                "maxMediaPartBytes": backend.settings.max_media_part_bytes,
                "maxMediaMessageBytes": backend.settings.max_media_message_bytes,
            },
        )
        app.include_router(page)
    return app
