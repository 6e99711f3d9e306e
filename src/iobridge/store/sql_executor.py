"""Where the SQL store's statements run, and group commit of its writes.

Queries are written once, as plain SQLAlchemy Core functions of a sync ``Connection``. An
executor runs them without blocking the event loop:

* SQLite (``ThreadExecutor``): a sync ``pysqlite`` engine (the standard library's
  ``sqlite3``) in worker threads — one thread hop per read or per batch of writes, where an
  async driver (aiosqlite) makes every statement, cursor and fetch its own hop to the
  driver's thread (~100 hops per run, which cost more than the queries).
* PostgreSQL (``AsyncExecutor``): the asyncpg engine, the function driven by ``run_sync``.

Each read and each transaction is bounded by the executor's ``timeout`` (the
``store_timeout_seconds`` setting): past it the caller gets ``TimeoutError`` (an outage, see
``store.base.is_outage``). On PostgreSQL the stalled connection is cancelled with it, so it
rolls back and leaves the pool (a stalled server holds no reader for good); a SQLite worker
thread cannot be stopped, only stopped waiting for (its busy timeout bounds it).

Both group concurrent reads (``_BatchedReads``): a few connections answer a burst of reads
in batches, so the pool never overflows into new connections under load; reads of one kind
in a batch may be answered together (``ReadMany``: the runs' reads of their threads).

``GroupWriter`` owns the writes: jobs queued while a transaction runs are committed together in
the next one (group commit), so N concurrent runs cost about one commit, and SQLite never
sleeps in its busy handler for our own writes; a ``Combine`` may merge a batch's jobs into
fewer statements (the run writes, ``run_batches.write_batch``). If a batch fails its
jobs run again one transaction each, so one bad job (a conflicting insert) fails alone (a
batch that timed out fails whole: the store is not answering). The
queue is bounded: a caller waits for room rather than memory growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:  # SQLAlchemy's asyncio part needs greenlet: the postgres extra
    from sqlalchemy.ext.asyncio import AsyncEngine

from iobridge.store.base import StoreUnavailable

__all__ = [
    "AsyncExecutor", "Combine", "GroupWriter", "Job", "ReadMany", "SqlExecutor", "ThreadExecutor"
]

T = TypeVar("T")
#: A unit of work: SQLAlchemy Core statements on one connection, inside its transaction.
Job = Callable[[Connection], Any]
#: Runs a batch's jobs on one connection, merging what it can into fewer statements; each
#: job's ``(True, result)`` or ``(False, error)``. A job may fail alone only if it wrote
#: nothing; any other error is raised (the batch then runs again, one transaction a job).
Combine = Callable[[Connection, list[Job]], list[tuple[bool, Any]]]
#: Answers several reads of one kind (callables with this as their ``read_many``) on one
#: connection; each one's ``(True, answer)`` or ``(False, error)``, in order. An error it
#: raises makes each read run alone.
ReadMany = Callable[[Connection, list[Any]], list[tuple[bool, Any]]]
#: Each read's ``(True, answer)`` or ``(False, error)``, in order.
Answers = list[tuple[bool, Any]]
#: Hands a batch's answers (or the error that failed its connection) to its readers.
Deliver = Callable[[Answers | BaseException], None]

#: Jobs committed together at most, and queued at most.
MAX_BATCH = 256
MAX_QUEUE = 8192
#: Reads answered in one hop to a reader thread at most.
MAX_READ_BATCH = 64


#: What a database that is down, unreachable or too slow raises through SQLAlchemy.
_OUTAGES = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)


def _unavailable(exc: Exception) -> StoreUnavailable | None:
    """``exc`` as the store's outage, when it is one (``None``: a bug or bad input)."""
    if isinstance(exc, _OUTAGES) or (
        isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated
    ):
        return StoreUnavailable(f"{type(exc).__name__}: {exc}")
    return None


class SqlExecutor(ABC):
    """Runs sync Core functions against the database, off the event loop. A database that
    does not answer raises :class:`~iobridge.store.base.StoreUnavailable` (from the driver's
    error)."""

    @abstractmethod
    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in a read transaction."""

    async def transaction(self, jobs: Sequence[Job]) -> list[Any]:
        """Every job in one write transaction, committed; their results in order.

        Raises:
            Exception: the first job's error, or the commit's (nothing is committed).
        """
        try:
            return await self._transaction(list(jobs))
        except Exception as exc:
            outage = _unavailable(exc)
            if outage is None:
                raise
            raise outage from exc

    @abstractmethod
    async def _transaction(self, jobs: list[Job]) -> list[Any]:
        """:meth:`transaction` as the driver reports it."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections and threads."""


class _BatchedReads(SqlExecutor):
    """Reads grouped like writes: while every reader is busy, new reads queue, and a reader
    that comes free takes the queue (up to ``MAX_READ_BATCH``) in one hop and one connection.
    Under load that is a few hops per burst of runs instead of one per run; each hop costs
    the event loop more than a read by key does (a thread hop and the GIL on SQLite; a pool
    checkout, BEGIN and ROLLBACK round trips on PostgreSQL, and a new connection whenever
    the pool overflowed).
    """

    def __init__(self, readers: int, timeout: float | None = None) -> None:
        self._readers = readers
        #: Seconds a read or a transaction may take (``None``: unbounded).
        self.timeout = timeout
        self._queued: list[tuple[Callable[[Connection], Any], asyncio.Future[Any]]] = []
        self._reading = 0  # batches out with readers

    async def read(self, fn: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queued.append((fn, future))
        if self._reading < self._readers:
            self._dispatch(loop)
        # A timer that fails the read's own future: its answer, if it comes later, is dropped.
        timer = None if self.timeout is None else loop.call_later(
            self.timeout, _expire, future, self.timeout
        )
        try:
            return await future
        except Exception as exc:
            outage = _unavailable(exc)
            if outage is None:
                raise
            raise outage from exc
        finally:
            if timer is not None:
                timer.cancel()

    @abstractmethod
    def _read_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        fns: list[Callable[[Connection], Any]],
        deliver: Deliver,
        freed: Callable[[], None],
    ) -> None:
        """Start answering ``fns`` on one connection (``_answer_all``); on the loop, call
        ``deliver`` with the answers (or the error that failed the connection) as soon as
        they are there, and ``freed`` once the connection is released.

        Every loop iteration between the answers and their readers counts: under load one
        iteration is tens of milliseconds of other runs' streaming, so the answers do not
        wait for the connection's release, nor for an executor future's done callback.
        """

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._queued[:MAX_READ_BATCH]
        del self._queued[:MAX_READ_BATCH]
        self._reading += 1
        futures = [future for _, future in batch]
        self._read_batch(
            loop,
            [fn for fn, _ in batch],
            functools.partial(_deliver, futures),
            functools.partial(self._freed, loop),
        )

    def _freed(self, loop: asyncio.AbstractEventLoop) -> None:
        """A reader is free again: it takes what queued meanwhile."""
        self._reading -= 1
        if self._queued:
            self._dispatch(loop)


def _expire(future: asyncio.Future[Any], timeout: float) -> None:
    _settle(future, error=TimeoutError(f"the store did not answer within {timeout} s"))


def _deliver(
    futures: list[asyncio.Future[Any]], answers: Answers | BaseException
) -> None:
    if isinstance(answers, BaseException):  # the connection itself failed
        for future in futures:
            _settle(future, error=answers)
        return
    for future, (ok, value) in zip(futures, answers, strict=True):
        if ok:
            _settle(future, result=value)
        else:
            _settle(future, error=value)


def _deliver_then_free(
    deliver: Deliver,
    freed: Callable[[], None],
    answers: Answers | BaseException,
) -> None:
    deliver(answers)
    freed()


def _answer_all(conn: Connection, fns: list[Callable[[Connection], Any]]) -> list[tuple[bool, Any]]:
    """Each read's answer or error, in order; a failed read does not fail the others.

    Reads with the same ``read_many`` attribute (a ``ReadMany``) are answered by one call of
    it, in as few statements as it can; if that call fails, each of them runs alone.
    """
    answers: list[tuple[bool, Any]] = [(False, None)] * len(fns)
    groups: dict[ReadMany, list[int]] = {}
    for index, fn in enumerate(fns):
        many = getattr(fn, "read_many", None)
        if many is None:
            answers[index] = _answer_one(conn, fn)
        else:
            groups.setdefault(many, []).append(index)
    for many, indexes in groups.items():
        try:
            results = many(conn, [fns[i] for i in indexes]) if len(indexes) > 1 else None
        except Exception:
            conn.rollback()
            results = None
        if results is None:
            results = [_answer_one(conn, fns[i]) for i in indexes]
        for index, result in zip(indexes, results, strict=True):
            answers[index] = result
    return answers


def _answer_one(conn: Connection, fn: Callable[[Connection], Any]) -> tuple[bool, Any]:
    try:
        return True, fn(conn)
    except Exception as exc:  # this read's answer; the others still run
        conn.rollback()
        return False, exc


class ThreadExecutor(_BatchedReads):
    """A sync engine driven from worker threads (SQLite).

    Args:
        engine: Reads use ``engine``; writes use ``writer`` (one connection at a time).
        writer: The same engine with the write-transaction execution option.
        readers: Threads serving reads at once.
        timeout: Seconds a read or a transaction is waited for (``None``: unbounded).
    """

    def __init__(
        self, engine: Engine, writer: Engine, *, readers: int = 2, timeout: float | None = None
    ) -> None:
        super().__init__(readers, timeout)
        self.engine, self._writer = engine, writer
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix="iobridge-sql-read")
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="iobridge-sql-write")

    def _read_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        fns: list[Callable[[Connection], Any]],
        deliver: Deliver,
        freed: Callable[[], None],
    ) -> None:
        self._reads.submit(self._answer_in_thread, loop, fns, deliver, freed)

    def _answer_in_thread(
        self,
        loop: asyncio.AbstractEventLoop,
        fns: list[Callable[[Connection], Any]],
        deliver: Deliver,
        freed: Callable[[], None],
    ) -> None:
        answers: Answers | BaseException
        try:
            with self.engine.connect() as conn:
                answers = _answer_all(conn, fns)
        except BaseException as exc:  # handed to the readers, like any answer
            answers = exc
        loop.call_soon_threadsafe(_deliver_then_free, deliver, freed, answers)

    async def _transaction(self, jobs: list[Job]) -> list[Any]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.timeout):
            return await loop.run_in_executor(self._writes, self._commit, jobs)

    def _commit(self, jobs: list[Job]) -> list[Any]:
        with self._writer.begin() as conn:
            return [job(conn) for job in jobs]

    async def close(self) -> None:
        self._reads.shutdown(wait=True)
        self._writes.shutdown(wait=True)
        self.engine.dispose()


class AsyncExecutor(_BatchedReads):
    """An async engine (PostgreSQL through asyncpg); functions run through ``run_sync``.

    Args:
        engine: Reads use ``engine``; writes use ``writer``.
        writer: The same engine with the write-transaction execution option.
        readers: Connections serving reads at once (size the pool above this plus one).
        timeout: Seconds a read batch or a transaction may take, connecting included
            (``None``: unbounded); a stalled one is cancelled.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        writer: AsyncEngine,
        *,
        readers: int = 4,
        timeout: float | None = None,
    ) -> None:
        super().__init__(readers, timeout)
        self.engine, self._writer = engine, writer
        self._batches: set[asyncio.Task[None]] = set()

    def _read_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        fns: list[Callable[[Connection], Any]],
        deliver: Deliver,
        freed: Callable[[], None],
    ) -> None:
        task = loop.create_task(self._answer(fns, deliver, freed), name="iobridge-store-reads")
        self._batches.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._batches.discard)

    async def _answer(
        self,
        fns: list[Callable[[Connection], Any]],
        deliver: Deliver,
        freed: Callable[[], None],
    ) -> None:
        try:
            async with asyncio.timeout(self.timeout), self.engine.connect() as conn:
                # Delivered before the connection's release (its ROLLBACK is a round trip).
                deliver(await conn.run_sync(_answer_all, fns))
        except asyncio.CancelledError:
            deliver(asyncio.CancelledError())
            raise
        except Exception as exc:  # answers already delivered are kept
            deliver(exc)
        finally:
            freed()

    async def _transaction(self, jobs: list[Job]) -> list[Any]:
        async with asyncio.timeout(self.timeout), self._writer.begin() as conn:
            return await conn.run_sync(lambda sync: [job(sync) for job in jobs])

    async def close(self) -> None:
        await asyncio.gather(*self._batches, return_exceptions=True)
        await self.engine.dispose()


class GroupWriter:
    """Runs write jobs one transaction at a time, batching what is queued meanwhile.

    Args:
        executor: Where transactions run.
        max_batch: Most jobs in one transaction.
        max_queue: Most jobs waiting; ``submit`` waits for room beyond that.
        combine: Runs a batch of several jobs (default: each job in turn).
    """

    def __init__(
        self,
        executor: SqlExecutor,
        *,
        max_batch: int = MAX_BATCH,
        max_queue: int = MAX_QUEUE,
        combine: Combine | None = None,
    ) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be at least 1")
        self._executor = executor
        self._max_batch = max_batch
        self._combine = combine
        self._queue: asyncio.Queue[tuple[Job, asyncio.Future[Any]]] = asyncio.Queue(max_queue)
        self._task: asyncio.Task[None] | None = None

    async def submit(self, job: Callable[[Connection], T]) -> T:
        """Run ``job`` in the next transaction and return its result once committed.

        Raises:
            Exception: whatever the job raised, or the commit's error.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((job, future))
        self._wake()
        result: T = await future
        return result

    def _wake(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="iobridge-store-writer")

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
        jobs = [job for job, _ in live]
        combine = self._combine
        try:
            if combine is not None and len(jobs) > 1:
                (outcomes,) = await self._executor.transaction([lambda c: combine(c, jobs)])
            else:
                outcomes = [(True, r) for r in await self._executor.transaction(jobs)]
        except Exception as exc:
            if len(live) == 1 or isinstance(exc, TimeoutError):
                # A store that did not answer is not one bad job: each alone would wait again.
                for _, future in live:
                    _settle(future, error=exc)
                return
            for job, future in live:  # one transaction each: a bad job fails alone
                try:
                    (result,) = await self._executor.transaction([job])
                except Exception as alone:
                    _settle(future, error=alone)
                else:
                    _settle(future, result=result)
            return
        for (_, future), (ok, value) in zip(live, outcomes, strict=True):
            if ok:
                _settle(future, result=value)
            else:
                _settle(future, error=value)


def _settle(
    future: asyncio.Future[Any], *, result: Any = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
