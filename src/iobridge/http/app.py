"""The FastAPI application: ``create_app()`` for a server, ``Bridge`` to mount into your own.

``Bridge`` owns one runtime, agent catalog, authenticator and thread store; ``install``
adds its routes (under the configured prefix) and error handlers to any FastAPI app, and its
``lifespan`` opens and closes the store and stops live runs on shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from iobridge import __version__
from iobridge.agents.base import Agent
from iobridge.agents.catalog import AgentCatalog
from iobridge.agents.definitions import load_agents
from iobridge.agents.demo import DemoAgent
from iobridge.auth import Authenticator
from iobridge.config import Settings
from iobridge.http.agents import router as agents_router
from iobridge.http.errors import install_error_handlers
from iobridge.http.runs import router as runs_router
from iobridge.http.threads import router as threads_router
from iobridge.runtime.engine import Runtime, RuntimeSettings
from iobridge.runtime.memory import StoreMemory
from iobridge.store.base import ThreadStore
from iobridge.store.migrate import open_store
from iobridge.web import playground_router

logger = logging.getLogger("iobridge")


def build_catalog(settings: Settings, agents: Sequence[Agent] = ()) -> AgentCatalog:
    """The demo agent, the configured agents, then ``agents`` given in Python.

    The default agent is ``settings.default_agent``, else the first configured or given
    agent, else the demo agent.

    A configured agent that cannot be built (missing API key, bad tool import) is logged and
    left out; the server still starts with the others.
    """
    catalog = AgentCatalog([DemoAgent()])
    configured, errors = load_agents(settings.agents)
    for agent in [*configured, *agents]:
        catalog.register(agent)
    for agent_id, reason in errors.items():
        logger.error("agent %s is unavailable: %s", agent_id, reason)
    catalog.unavailable.update(errors)
    if settings.default_agent is not None:
        catalog.default_id = settings.default_agent
    elif configured or agents:
        catalog.default_id = [*configured, *agents][0].id
    return catalog


class Bridge:
    """The io.Intelligence bridge as a mountable unit."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agents: Sequence[Agent] = (),
        catalog: AgentCatalog | None = None,
        store: ThreadStore | None = None,
    ) -> None:
        self.settings = settings or Settings.load()
        #: The thread store; opened from ``settings.database_url`` at startup if not given.
        self.store = store
        self.catalog = catalog or build_catalog(self.settings, agents)
        self.authenticator = Authenticator(self.settings.auth)
        self.runtime = Runtime(
            self.catalog,
            settings=RuntimeSettings(
                tool_timeout=self.settings.tool_timeout,
                retention_seconds=self.settings.retention_seconds,
                max_retained_runs=self.settings.max_retained_runs,
                detach_grace_seconds=self.settings.detach_grace_seconds,
                tool_result_mode=self.settings.tool_result_mode,
            ),
        )

    def install(self, app: FastAPI) -> None:
        """Add the bridge's routes, state and error handlers to ``app``."""
        app.state.settings = self.settings
        app.state.catalog = self.catalog
        app.state.authenticator = self.authenticator
        app.state.runtime = self.runtime
        app.state.store = self.store
        install_error_handlers(app)
        prefix = self.settings.prefix
        app.include_router(runs_router, prefix=prefix, tags=["runs"])
        app.include_router(threads_router, prefix=prefix, tags=["threads"])
        app.include_router(agents_router, prefix=prefix, tags=["agents"])

    @asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        """Open the store at startup; stop live runs and close the store at shutdown."""
        owned = self.store is None
        if self.store is None:
            self.store = await open_store(self.settings.database_url)
        app.state.store = self.store
        self.runtime.memory = StoreMemory(self.store)
        try:
            yield
        finally:
            await self.runtime.aclose()
            if owned:
                await self.store.close()
                self.store = None


def create_app(
    settings: Settings | None = None,
    *,
    agents: Sequence[Agent] = (),
    catalog: AgentCatalog | None = None,
    store: ThreadStore | None = None,
) -> FastAPI:
    """A complete server application."""
    bridge = Bridge(settings, agents=agents, catalog=catalog, store=store)
    app = FastAPI(
        title="iobridge",
        version=__version__,
        summary="io.Intelligence Agent Protocol backend (AG-UI over SSE)",
        lifespan=bridge.lifespan,
    )
    if bridge.settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=bridge.settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
            allow_headers=["*"],
        )
    bridge.install(app)
    if bridge.settings.playground:
        app.include_router(playground_router(bridge.settings.prefix))
    app.state.bridge = bridge
    return app
