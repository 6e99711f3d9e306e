"""A small MCP server (the ``mcp`` SDK) for the MCP tests: ``stdio``, or ``http PORT TOKEN``.

Its ``forecast`` tool answers with ``FORECAST_PREFIX`` from its environment, so a test sees
that ``env`` reached the process. Over HTTP every request must carry
``Authorization: Bearer TOKEN`` (else 401), so a test sees that ``headers`` were sent.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("iobridge-test")


@server.tool()
def forecast(city: str) -> str:
    """The weather forecast for a city."""
    return f"{os.environ.get('FORECAST_PREFIX', 'plain')}: sunny in {city}"


def _require_token(app: Any, token: str) -> Any:
    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no token"})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port, token = int(sys.argv[2]), sys.argv[3]
    app = _require_token(server.streamable_http_app(), token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
