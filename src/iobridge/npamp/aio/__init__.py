"""The asyncio shell: TCP + TLS 1.3 (ALPN ``n-pamp/2``) around the sans-IO association.

The only N-PAMP subpackage that touches sockets, TLS, timers or the event loop.
"""

from iobridge.npamp.aio.association import (
    Association,
    Handler,
    NpampServer,
    TransportConfig,
    connect,
    serve,
)
from iobridge.npamp.aio.tls import (
    ALPN,
    client_ssl_context,
    self_signed_certificate,
    server_ssl_context,
)

__all__ = [
    "ALPN",
    "Association",
    "Handler",
    "NpampServer",
    "TransportConfig",
    "client_ssl_context",
    "connect",
    "self_signed_certificate",
    "serve",
    "server_ssl_context",
]
