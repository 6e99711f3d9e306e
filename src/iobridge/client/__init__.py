"""A Python client of io.Intelligence Agent Protocol backends (async, httpx).

    async with IoBridgeClient("http://127.0.0.1:8000", api_key="...") as client:
        async for event in client.run("What is 2 + 3?", thread_id="t1"):
            print(event.type)

It imports nothing of the server (an import-linter contract checks it): it talks to any
io-bridge backend, ours or another.
"""

from iobridge.client.api import (
    DEFAULT_MAX_EVENT_BYTES,
    IoBridgeClient,
    IoBridgeError,
    RunStream,
    parse_event,
)
from iobridge.protocol.resources import Agent, AgentTool, MessagePage, Thread, ThreadPage

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "Agent",
    "AgentTool",
    "IoBridgeClient",
    "IoBridgeError",
    "MessagePage",
    "RunStream",
    "Thread",
    "ThreadPage",
    "parse_event",
]
