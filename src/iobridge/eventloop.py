"""The event loop a command runs on: ``iobridge serve`` and the N-PAMP command-line client.

One selection for both ends (the ``event_loop`` setting, ``IOBRIDGE_EVENT_LOOP``): ``auto``
is uvloop when it is installed (a dependency except on Windows), else asyncio's own.
uvloop's TLS is compiled where asyncio's ``sslproto`` is Python: on the client of an N-PAMP
association that is most of the shell's cost besides the cryptography.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["LoopKind", "LoopUnavailable", "run"]

T = TypeVar("T")
LoopKind = Literal["auto", "asyncio", "uvloop"]


class LoopUnavailable(RuntimeError):
    """``uvloop`` was asked for explicitly and is not installed."""


def run(main: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """Run ``main`` to its end on the chosen loop and return its result.

    Raises:
        LoopUnavailable: ``kind`` is ``uvloop`` and uvloop is not installed (``main`` is
            closed without running).
    """
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                main.close()
                raise LoopUnavailable(
                    "event_loop: uvloop is not installed (pip install uvloop, or use auto)"
                ) from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)
