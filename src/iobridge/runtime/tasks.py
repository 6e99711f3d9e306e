"""Stopping tasks for good.

A task cancelled once may go on: on Python 3.11, ``asyncio.wait_for`` returns its inner
future's result instead of raising when the cancellation arrives in the loop iteration in
which that future completes (CPython gh-86296, fixed in 3.12 by building ``wait_for`` on
``asyncio.timeout``). redis-py and asyncpg await most commands through ``wait_for``, so a
loop like a heartbeat, cancelled while a command finishes, loses its one cancellation,
sleeps and beats again; whoever waits for it to end waits forever. ``cancel_and_wait`` sends
the cancellation again until each task has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_and_wait"]

#: Seconds between cancellations of a task that did not end.
RESEND_SECONDS = 0.1


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]], *, resend: float = RESEND_SECONDS
) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again every
    ``resend`` seconds those that go on (their outcomes are read, not raised)."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()  # a task already done ignores it
        done, pending = await asyncio.wait(pending, timeout=resend)
        for task in done:
            if not task.cancelled():
                task.exception()  # read: not "never retrieved"
