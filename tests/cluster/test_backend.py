"""The Backend with and without ``redis_url``, in process."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis
from tests.cluster.replicas import redis_server

from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.runtime.cluster import LocalCluster

ONE_NODE = """
import asyncio, sys
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings

async def main():
    async with Backend(Settings(database_url="memory://")) as backend:
        body = {"threadId": "t", "runId": "r", "messages": [
            {"id": "u", "role": "user", "content": "hello"}]}
        run = await backend.start_run(ANONYMOUS, body)
        await run.task
        assert run.log.closed
        assert await backend.readiness_problem() is None
    loaded = sorted(m for m in sys.modules if m == "redis" or m.startswith(("redis.",
                    "iobridge.cluster")))
    print(loaded)

asyncio.run(main())
"""


def test_without_redis_url_nothing_of_redis_is_imported_or_run() -> None:
    done = subprocess.run([sys.executable, "-c", ONE_NODE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_readiness_reports_redis_going_away(tmp_path: Path) -> None:
    stack = contextlib.ExitStack()
    url = stack.enter_context(redis_server(tmp_path))
    backend = Backend(Settings(database_url="memory://", redis_url=url, redis_prefix="ready"))
    try:
        async with backend:
            assert backend.cluster.distributed
            assert backend.runtime.cluster is backend.cluster
            assert await backend.readiness_problem() is None
            stack.close()  # Redis stops while the backend serves
            assert await backend.readiness_problem() == "Redis does not answer"
    finally:
        stack.close()
    assert isinstance(backend.cluster, LocalCluster)  # closed: back to one process


async def test_runs_are_shared_after_redis_lost_its_scripts(tmp_path: Path) -> None:
    """The scripts are loaded once; after a restart or SCRIPT FLUSH they are loaded again."""
    settings = Settings(database_url="memory://", redis_url=None, redis_prefix="noscript")
    with redis_server(tmp_path) as url:
        redis = aioredis.from_url(url)
        try:
            async with Backend(settings.model_copy(update={"redis_url": url})) as backend:
                for n in range(2):
                    assert await redis.script_flush()
                    body = {"threadId": f"t{n}", "runId": f"r{n}", "messages": [
                        {"id": "u", "role": "user", "content": "hello there"}]}
                    run = await backend.start_run(ANONYMOUS, body)
                    await run.task
                    [log] = await redis.keys(f"noscript:log:*r{n}")
                    for _ in range(200):
                        mirrored = await redis.xrange(log)
                        if len(mirrored) == run.log.last_seq:
                            break
                        await asyncio.sleep(0.01)
                    assert [(int(i.split(b"-")[0]), f[b"d"]) for i, f in mirrored] == (
                        run.log.entries())
                    assert b"e" in mirrored[-1][1]
        finally:
            await redis.aclose()
