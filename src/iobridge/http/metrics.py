"""``GET /metrics``: the Backend's Prometheus registry (text or OpenMetrics, by ``Accept``).

On by default, without credentials like ``/healthz``; with ``metrics.token_env`` set, a
scraper must send ``Authorization: Bearer <token>`` (401 otherwise). Off with
``metrics.enabled = false``, or moved to a port of its own with ``metrics.port`` (then 404
here, like any unknown route).
"""

from __future__ import annotations

import hmac
import os

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client.exposition import choose_encoder

from iobridge.app import Backend
from iobridge.errors import AuthenticationError

__all__ = ["install_metrics", "metrics_token"]


def metrics_token(backend: Backend) -> bytes | None:
    """The scrape token (``None``: open).

    Raises:
        ValueError: ``metrics.token_env`` names an unset or empty environment variable.
    """
    name = backend.settings.metrics.token_env
    if name is None:
        return None
    token = os.environ.get(name, "")
    if not token:
        raise ValueError(f"metrics.token_env: the environment variable {name} is not set")
    return token.encode()


def install_metrics(app: FastAPI, backend: Backend) -> None:
    """Add ``GET /metrics`` to ``app`` when ``metrics.enabled`` (and no ``metrics.port``)."""
    if not backend.settings.metrics.enabled or backend.settings.metrics.port is not None:
        return
    token = metrics_token(backend)
    expected = b"Bearer " + token if token is not None else None
    registry = backend.metrics.registry

    async def metrics(request: Request) -> Response:
        if expected is not None:
            sent = request.headers.get("authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(sent, expected):
                raise AuthenticationError(
                    "missing or invalid credentials", reason="wrong or missing metrics token"
                )
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    text = {"schema": {"type": "string"}}
    app.add_api_route(
        "/metrics", metrics, methods=["GET"], tags=["health"],
        summary="Prometheus metrics (runs, tool calls, events, store latency)",
        response_class=Response,
        responses={200: {"description": "The Prometheus text format (OpenMetrics by Accept)",
                         "content": {"text/plain": text, "application/openmetrics-text": text}}},
    )
