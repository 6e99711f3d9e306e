"""Group commit: concurrent writes share transactions; a bad write fails alone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from iobridge.store.run_batches import RunWrite, write_batch
from iobridge.store.sql_executor import MAX_READ_BATCH, GroupWriter, ThreadExecutor


def _executor(path: Path) -> ThreadExecutor:
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY)"))
    return ThreadExecutor(engine, engine)


def insert(key: int) -> object:
    def job(conn: Connection) -> int:
        conn.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": key})
        return key

    return job


async def test_concurrent_writes_commit_together_and_a_bad_one_fails_alone(
    tmp_path: Path,
) -> None:
    executor = _executor(tmp_path / "w.db")
    commits: list[int] = []
    event.listen(executor.engine, "commit", lambda conn: commits.append(1))
    writer = GroupWriter(executor, max_batch=64)
    keys = [*range(40), 7]  # the second 7 violates the primary key
    results = await asyncio.gather(
        *(writer.submit(insert(k)) for k in keys), return_exceptions=True  # type: ignore[arg-type]
    )
    assert results[:40] == list(range(40))
    assert isinstance(results[40], IntegrityError)
    stored = await executor.read(
        lambda conn: conn.execute(text("SELECT k FROM t ORDER BY k")).scalars().all()
    )
    assert stored == list(range(40))  # the bad job failed alone; the others committed
    commits.clear()
    await asyncio.gather(*(writer.submit(insert(k)) for k in range(100, 140)))  # type: ignore[arg-type]
    assert 1 <= len(commits) <= 3  # group commit: 40 queued writes in a few transactions
    await writer.close()
    await executor.close()


async def test_the_queue_is_bounded(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "w.db")
    gate = threading.Event()

    def slow(conn: Connection) -> None:
        gate.wait(5)

    writer = GroupWriter(executor, max_batch=1, max_queue=2)
    running = [asyncio.create_task(writer.submit(slow)) for _ in range(3)]
    await asyncio.sleep(0.05)  # one job runs, two wait in the queue
    extra = asyncio.create_task(writer.submit(slow))
    await asyncio.sleep(0.05)
    assert not extra.done()  # no room: the caller waits (backpressure), nothing is dropped
    gate.set()
    await asyncio.wait_for(asyncio.gather(*running, extra), 5)
    await writer.close()
    await executor.close()
    with pytest.raises(ValueError):
        GroupWriter(executor, max_batch=0)


async def test_concurrent_reads_share_hops_and_a_bad_read_fails_alone(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "r.db")
    hops: list[str] = []
    event.listen(executor.engine, "engine_connect", lambda conn: hops.append("connect"))
    await GroupWriter(executor).submit(insert(5))
    hops.clear()

    def read(key: int) -> Callable[[Connection], int | None]:
        def fn(conn: Connection) -> int | None:
            if key < 0:
                raise ValueError(f"bad key {key}")
            found: int | None = conn.execute(
                text("SELECT k FROM t WHERE k = :k"), {"k": key}
            ).scalar()
            return found

        return fn

    keys = [5, 6, -1, *([5] * 200)]
    answers = await asyncio.gather(*(executor.read(read(k)) for k in keys),
                                   return_exceptions=True)
    assert answers[:2] == [5, None]
    assert isinstance(answers[2], ValueError) and "bad key -1" in str(answers[2])
    assert answers[3:] == [5] * 200  # the reads after the failing one were answered
    # 203 reads queued at once: the reader threads took them in batches, not one hop each.
    batches = -(-len(keys) // MAX_READ_BATCH)
    assert len(hops) <= batches + 2, hops  # +2: the first reads go out before the rest queue
    await executor.close()


async def test_a_read_batch_is_bounded(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "b.db")
    sizes: list[int] = []
    real = executor._read_batch

    def counting(
        loop: asyncio.AbstractEventLoop, fns: list[Callable[[Connection], object]],
        deliver: Callable[[Any], None], freed: Callable[[], None],
    ) -> None:
        sizes.append(len(fns))
        real(loop, fns, deliver, freed)

    executor._read_batch = counting  # type: ignore[method-assign]
    await asyncio.gather(*(executor.read(lambda conn: 1) for _ in range(3 * MAX_READ_BATCH)))
    assert max(sizes) == MAX_READ_BATCH
    assert sum(sizes) == 3 * MAX_READ_BATCH
    await executor.close()


class _Insert:
    """A job a ``combine`` can merge: its key is visible."""

    def __init__(self, key: int) -> None:
        self.key = key

    def __call__(self, conn: Connection) -> int:
        return insert(self.key)(conn)  # type: ignore[operator, no-any-return]


async def test_a_combine_merges_a_batch_and_its_failures_stay_alone(tmp_path: Path) -> None:
    merges: list[int] = []

    def merged(conn: Connection, jobs: list[Any]) -> list[tuple[bool, Any]]:
        """One multi-row insert for the batch; keys of 1000 and up fail alone, unwritten."""
        merges.append(len(jobs))
        good = [job.key for job in jobs if job.key < 1000]
        conn.execute(text("INSERT INTO t (k) VALUES (:k)"), [{"k": k} for k in good])
        return [(True, j.key) if j.key < 1000 else (False, LookupError(j.key)) for j in jobs]

    executor = _executor(tmp_path / "c.db")
    writer = GroupWriter(executor, combine=merged)
    results = await asyncio.gather(*(writer.submit(_Insert(k)) for k in [*range(20), 1000]),
                                   return_exceptions=True)
    assert results[:20] == list(range(20)) and isinstance(results[20], LookupError)
    assert merges == [21]  # one merged batch: 21 jobs, one combine call
    # A combine that raises (a duplicate key fails the multi-row insert) runs each job alone.
    results = await asyncio.gather(*(writer.submit(_Insert(k)) for k in [30, 31, 5]),
                                   return_exceptions=True)
    assert results[:2] == [30, 31] and isinstance(results[2], IntegrityError)
    stored = await executor.read(
        lambda conn: conn.execute(text("SELECT k FROM t ORDER BY k")).scalars().all()
    )
    assert stored == [*range(20), 30, 31]  # nothing of the failed key 1000, 30 and 31 once
    await writer.close()
    await executor.close()


async def test_reads_of_one_kind_are_answered_together_or_each_alone(tmp_path: Path) -> None:
    """Reads sharing a ``read_many`` get one call of it for the batch; if that call raises,
    each read runs alone, so a read that fails fails alone and the others get answers."""
    executor = _executor(tmp_path / "r.db")
    calls: list[list[int]] = []

    def read_many(conn: Connection, reads: list[Any]) -> list[tuple[bool, Any]]:
        keys = [r.key for r in reads]
        calls.append(keys)
        if -1 in keys:
            raise ValueError("one bad read")
        return [(True, k * 10) for k in keys]

    class Read:
        def __init__(self, key: int) -> None:
            self.key, self.read_many = key, read_many

        def __call__(self, conn: Connection) -> int:
            ((_, value),) = read_many(conn, [self])
            return int(value)

    async def burst(keys: list[int]) -> list[Any]:
        # Occupy both readers so the burst queues into one batch.
        slow = [executor.read(lambda c: c.execute(text("SELECT 1")).scalar()) for _ in range(2)]
        answers = await asyncio.gather(*slow, *(executor.read(Read(k)) for k in keys),
                                       return_exceptions=True)
        return answers[2:]

    assert await burst(list(range(10))) == [k * 10 for k in range(10)]
    assert calls == [list(range(10))]  # one call for the whole batch
    calls.clear()
    answers = await burst([1, -1, 2])
    assert answers[0] == 10 and answers[2] == 20
    assert isinstance(answers[1], ValueError)
    assert calls == [[1, -1, 2], [1], [-1], [2]]  # together, then each alone
    await executor.close()


class SilentExecutor(ThreadExecutor):
    """Every transaction times out (a store that does not answer); counts the attempts."""

    def __init__(self, path: Path) -> None:
        engine = create_engine(f"sqlite:///{path}")
        super().__init__(engine, engine)
        self.attempts: list[int] = []

    async def transaction(self, jobs: Any) -> list[Any]:
        self.attempts.append(len(jobs))
        raise TimeoutError("the store did not answer")


async def test_a_batch_that_times_out_fails_whole_without_waiting_again_per_job(
    tmp_path: Path,
) -> None:
    """A store that does not answer is not one bad job: retrying each job alone would wait
    the timeout once more per job."""
    executor = SilentExecutor(tmp_path / "w.db")
    writer = GroupWriter(executor)
    writes = [writer.submit(insert(k)) for k in range(5)]  # type: ignore[arg-type]
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert all(isinstance(r, TimeoutError) for r in results)
    assert executor.attempts == [5]  # one transaction for the batch, none per job
    await writer.close()
    await executor.close()


async def test_a_read_past_the_timeout_fails_queued_ones_too_and_late_answers_are_dropped(
    tmp_path: Path,
) -> None:
    """Each read is bounded from when it was asked, waiting for a reader included; a reader
    that answers late changes nothing, and the executor serves the next reads."""
    engine = create_engine(f"sqlite:///{tmp_path / 'r.db'}")
    executor = ThreadExecutor(engine, engine, readers=1, timeout=0.3)
    gate = threading.Event()

    def stuck(conn: Connection) -> str:
        gate.wait(10)
        return "late"

    loop = asyncio.get_running_loop()
    begun = loop.time()
    first = asyncio.ensure_future(executor.read(stuck))
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(executor.read(lambda conn: "never read in time"))
    results = await asyncio.gather(first, queued, return_exceptions=True)
    waited = loop.time() - begun
    assert all(isinstance(r, TimeoutError) for r in results), results
    assert "did not answer within 0.3 s" in str(results[0])
    assert 0.3 <= waited < 2.0
    gate.set()
    assert await executor.read(lambda conn: conn.execute(text("SELECT 7")).scalar()) == 7
    await executor.close()


def test_a_write_batch_groups_run_writes_of_distinct_threads_in_order() -> None:
    """``write_batch`` hands consecutive run writes of distinct threads, of one writer, to it
    together; a thread's second write, another writer's write or any other job closes the
    group, so each thread's writes keep their order."""
    calls: list[tuple[str, list[str]]] = []

    def writer(name: str) -> Callable[[Connection, list[RunWrite]], list[tuple[bool, Any]]]:
        def write_runs(conn: Connection, group: list[RunWrite]) -> list[tuple[bool, Any]]:
            calls.append((name, [w.claim_row["id"] for w in group]))
            return [(True, None) for _ in group]

        return write_runs

    a, b = writer("a"), writer("b")

    def run_write(thread: str, write_runs: Any = a) -> RunWrite:
        return RunWrite(claim_row={"id": thread, "now": None}, rows=[], write_runs=write_runs)

    def other(conn: Connection) -> str:
        calls.append(("other", []))
        return "done"

    jobs: list[Any] = [run_write("t1"), run_write("t2"), run_write("t1"), run_write("t3"),
                       run_write("t4", b), other, run_write("t5"), run_write("t6")]
    outcomes = write_batch(None, jobs)  # type: ignore[arg-type]  # the writers take no SQL
    assert calls == [("a", ["t1", "t2"]), ("a", ["t1", "t3"]), ("b", ["t4"]), ("other", []),
                     ("a", ["t5", "t6"])]
    assert outcomes == [(True, None)] * 5 + [(True, "done")] + [(True, None)] * 2
