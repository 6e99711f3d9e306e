"""AG-UI over N-PAMP: the server that maps Bridge streams onto the run engine, and a client.

The sans-IO protocol lives in :mod:`iobridge.npamp`; this package is the asyncio glue between
it and :mod:`iobridge.runtime` (server) or the application (client). See ``docs/npamp-agui.md``.
"""

from __future__ import annotations

from iobridge.npamp_server.client import AgUiClient, AgUiEvent, RunRefused, RunStream, connect
from iobridge.npamp_server.principals import PeerDirectory
from iobridge.npamp_server.server import AgUiServer, install
from iobridge.npamp_server.settings import ANY_PEER, NpampPeer, NpampSettings

__all__ = [
    "ANY_PEER",
    "AgUiClient",
    "AgUiEvent",
    "AgUiServer",
    "NpampPeer",
    "NpampSettings",
    "PeerDirectory",
    "RunRefused",
    "RunStream",
    "connect",
    "install",
]
