"""An AG-UI upstream that sends events without end, as its own process (for timing probes:
in the test's process its busy thread would compete with the probe for the GIL).

``python -m tests.hostile.endless_upstream PORT KIND``: ``KIND`` is ``text`` (short text
deltas), ``close`` (TEXT_MESSAGE_END of ever new message ids) or ``delta`` (a 400 KB
state, then STATE_DELTAs that copy it and remove the copy: each a few ms of work for the
bridge, however small).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_COPY_AND_REMOVE = [{"op": "copy", "from": "/a", "path": "/b"}, {"op": "remove", "path": "/b"}]


def _heavy_delta(n: int) -> dict[str, Any]:
    if n == 0:
        return {"type": "STATE_SNAPSHOT", "snapshot": {"a": "x" * 400_000}}
    return {"type": "STATE_DELTA", "delta": _COPY_AND_REMOVE * 4}


EVENTS: dict[str, Callable[[int], dict[str, Any]]] = {
    "text": lambda n: {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"word{n} "},
    "close": lambda n: {"type": "TEXT_MESSAGE_END", "messageId": f"message-{n:08d}"},
    "delta": _heavy_delta,
}


def app(event: Callable[[int], dict[str, Any]]) -> Starlette:
    """The upstream: each POST streams ``event(0)``, ``event(1)``, ... until disconnected."""

    async def run(request: Request) -> Response:
        await request.body()

        async def stream() -> AsyncIterator[bytes]:
            n = 0
            while True:
                yield b"data: " + json.dumps(event(n)).encode() + b"\n\n"
                n += 1
                if n % 100 == 0:
                    await asyncio.sleep(0)

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


if __name__ == "__main__":
    port, kind = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(app(EVENTS[kind]), host="127.0.0.1", port=port, log_level="warning")
