"""``POST {prefix}/run`` is answered below FastAPI's router (``RunRoute``): a live run's
request holds none of the router's frames for the life of its stream, while every other
request, and a run request under another method or path, still reaches the router."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from tests.helpers import LiveServer, run_body

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


#: mutmut's copy of a method (``make mutants``): ``Class.xǁClassǁmethod__mutmut_orig``.
_MUTMUT_COPY = re.compile(r"\.xǁ\w+ǁ(\w+?)__mutmut_\w+$")
#: The coroutine mutmut wraps each copied coroutine function in.
_MUTMUT_WRAPPER = "._trampoline_wrapper"


def _request_chains(server: LiveServer) -> list[list[str]]:
    """For each task of the server's loop, the coroutines it is suspended in, outermost
    first, as ``file:qualified name`` (under mutmut: its wrappers left out, its copies named
    as the methods they copy)."""
    loop = server.server.servers[0].get_loop()

    async def collect() -> list[list[str]]:
        chains = []
        for task in asyncio.all_tasks():
            chain: list[str] = []
            coro: Any = task.get_coro()
            while coro is not None and hasattr(coro, "cr_code"):
                name = _MUTMUT_COPY.sub(r".\1", coro.cr_code.co_qualname)
                if not name.endswith(_MUTMUT_WRAPPER):
                    chain.append(f"{coro.cr_code.co_filename}:{name}")
                coro = coro.cr_await
            chains.append(chain)
        return chains

    return asyncio.run_coroutine_threadsafe(collect(), loop).result(5)


async def test_a_live_run_stream_holds_no_frame_of_the_router(serve: Any) -> None:
    server = serve()
    body = run_body("get_weather", tools=[WEATHER], thread_id="t-live", run_id="r-live")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client, \
            client.stream("POST", "/io-bridge/run", json=body) as stream:
        assert stream.status_code == 200
        async for line in stream.aiter_lines():  # the run now waits for the tool's result
            if line.startswith("data: ") and '"TOOL_CALL_END"' in line:
                break
        [chain] = [c for c in _request_chains(server)
                   if c and c[0].endswith(":RequestResponseCycle.run_asgi")]
        at = [name.rpartition(":")[2] for name in chain].index("RunRoute.__call__")
        # Straight from RunRoute into the run's stream: no router, no route, no exit stacks.
        assert chain[at + 1].endswith(":RunEventStream.__call__"), chain
        assert not [name for name in chain if "/routing.py:" in name], chain


async def test_other_requests_and_methods_reach_the_router(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        assert (await client.get("/io-bridge/agents")).status_code == 200
        wrong = await client.get("/io-bridge/run")
        assert wrong.status_code == 405
        assert wrong.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        nested = await client.post("/io-bridge/run/more", json={})
        assert nested.status_code == 404
