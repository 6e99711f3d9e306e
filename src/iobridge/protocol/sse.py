"""Server-Sent Events framing for AG-UI runs.

LF only: ``@ag-ui/client`` splits frames on ``\\n\\n`` and breaks on CRLF. Each event is
``id: <seq>\\n`` + ``data: <one-line JSON>\\n\\n``; the ``id`` lets a client resume with
``Last-Event-ID``. Comments (``: ping``) keep idle connections alive through proxies.
"""

from __future__ import annotations

from collections.abc import Iterable

PING = b": ping\n\n"


def sse_frames(entries: Iterable[tuple[int, bytes]]) -> bytes:
    """Frame several events into one chunk (one socket write for a batch)."""
    return b"".join([b"id: %d\ndata: %b\n\n" % entry for entry in entries])
