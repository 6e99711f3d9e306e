"""Group commit: every write of a store goes through one connection, many per transaction.

SQLite allows one writer at a time; several connections taking turns spend their time in
the busy handler's sleeps. One task owning the writes instead takes whatever jobs are queued
when it is free and runs them in one transaction (``BEGIN IMMEDIATE`` on SQLite), so N
concurrent runs cost about one commit, not N. On PostgreSQL the same batching saves a
commit round trip per write.

A job is an ``async (AsyncConnection) -> T`` function. If a batch fails, its jobs are run
again one transaction each, so one bad job (a conflicting insert) fails alone. The queue
is bounded: a caller waits for room (backpressure) rather than growing memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["GroupWriter", "Job"]

T = TypeVar("T")
Job = Callable[[AsyncConnection], Awaitable[Any]]

#: Jobs committed together at most, and queued at most.
MAX_BATCH = 256
MAX_QUEUE = 8192


class GroupWriter:
    """Runs write jobs on one connection, batching what is queued into one transaction.

    Args:
        engine: An engine whose ``begin()`` opens a write transaction.
        max_batch: Most jobs in one transaction.
        max_queue: Most jobs waiting; ``submit`` waits for room beyond that.
    """

    def __init__(
        self, engine: AsyncEngine, *, max_batch: int = MAX_BATCH, max_queue: int = MAX_QUEUE
    ) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be at least 1")
        self._engine = engine
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[Job, asyncio.Future[Any]]] = asyncio.Queue(max_queue)
        self._task: asyncio.Task[None] | None = None

    async def submit(self, job: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``job`` in the next transaction and return its result once committed.

        Raises:
            Exception: whatever the job raised, or the commit's error.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((job, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="iobridge-store-writer")
        result: T = await future
        return result

    async def close(self) -> None:
        """Finish the queued jobs, then stop."""
        if self._task is not None and not self._task.done():
            await self._queue.join()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._commit(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _commit(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        live = [(job, future) for job, future in batch if not future.done()]
        if not live:
            return
        try:
            results = []
            async with self._engine.begin() as conn:
                for job, _ in live:
                    results.append(await job(conn))
        except Exception as exc:
            if len(live) == 1:
                if not live[0][1].done():
                    live[0][1].set_exception(exc)
                return
            for job, future in live:  # one transaction each: a bad job fails alone
                await self._alone(job, future)
            return
        for (_, future), result in zip(live, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _alone(self, job: Job, future: asyncio.Future[Any]) -> None:
        try:
            async with self._engine.begin() as conn:
                result = await job(conn)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)
