"""An integrator mounts the bridge into an existing FastAPI app."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app, mount
from iobridge.store import MemoryThreadStore, Thread


async def test_the_backend_mounts_into_an_existing_app_in_one_call(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path}/m.db"
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    mount(app, Backend(Settings(prefix="/agents-api", database_url=database)))
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/health")).json() == {"status": "ok"}
            run = await client.post("/agents-api/run", json=run_body("what is 3 * 3"))
            events = parse_sse(run.text)
            assert events[-1]["type"] == "RUN_FINISHED"
            stored = await client.get("/agents-api/threads/t1/messages?format=agui")
            assert stored.json()["messages"][-1]["content"] == "3 * 3 = 9."
            # The bridge adds no playground or other routes outside its prefix.
            assert (await client.get("/playground")).status_code == 404
            missing = await client.post("/agents-api/runs/nope/cancel")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "RUN_NOT_FOUND"


class _DownStore(MemoryThreadStore):
    """A store whose database went away."""

    down = False

    async def get_thread(self, thread_id: str) -> Thread | None:
        if self.down:
            raise OSError("connection refused")
        return await super().get_thread(thread_id)


async def test_healthz_and_readyz_follow_the_store() -> None:
    store = _DownStore()
    with LiveServer(create_app(Backend(Settings(), store=store))) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            assert (await client.get("/readyz")).json() == {"status": "ready"}
            store.down = True
            down = await client.get("/readyz")
            assert down.status_code == 503
            assert down.json() == {"error": {"code": "NOT_READY",
                                             "message": "the store does not answer"}}
            assert (await client.get("/healthz")).status_code == 200  # still alive
            store.down = False
            assert (await client.get("/readyz")).status_code == 200


async def test_the_prefix_answers_a_small_index() -> None:
    with LiveServer(create_app(Backend(Settings(database_url="memory://")))) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            index = (await client.get("/io-bridge")).json()
    from iobridge import __version__
    from iobridge.http.health import ROUTES

    assert index == {"name": "iobridge", "version": __version__,
                     "protocol": "io.Intelligence Agent Protocol", "levels": [1, 2, 3, 4],
                     "prefix": "/io-bridge", "routes": ROUTES}
    assert "POST /run" in index["routes"]
    # Without a prefix the index is the root.
    bare = Settings(database_url="memory://", prefix="", playground=False)
    with LiveServer(create_app(Backend(bare))) as server:
        root = httpx.get(f"{server.url}/", timeout=10)
    assert root.status_code == 200 and root.json()["prefix"] == ""


async def test_an_unopened_backend_lives_with_the_app_an_open_one_with_its_caller() -> None:
    given = Backend(Settings(database_url="memory://"))
    app = create_app(given)
    async with app.router.lifespan_context(app):
        assert given.is_open  # opened by the app's startup ...
    assert not given.is_open  # ... and closed by its shutdown
    async with Backend(Settings(database_url="memory://")) as owned:
        app = create_app(owned)
        async with app.router.lifespan_context(app):
            assert owned.is_open
        assert owned.is_open  # the caller opened it: the app only served it
        mounted = FastAPI()
        mount(mounted, owned)
        async with mounted.router.lifespan_context(mounted):
            pass
        assert owned.is_open
    assert not owned.is_open
