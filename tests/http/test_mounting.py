"""An integrator mounts the bridge into an existing FastAPI app."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI
from tests.helpers import LiveServer, parse_sse, run_body

from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import mount


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
            stored = await client.get("/agents-api/threads/t1/messages")
            assert stored.json()["messages"][-1]["content"] == "3 * 3 = 9."
            # The bridge adds no playground or other routes outside its prefix.
            assert (await client.get("/playground")).status_code == 404
            missing = await client.post("/agents-api/runs/nope/cancel")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "RUN_NOT_FOUND"
