"""iobridge: an io.Intelligence Agent Protocol backend (AG-UI over HTTP/SSE and N-PAMP)."""

__version__ = "0.1.0"
