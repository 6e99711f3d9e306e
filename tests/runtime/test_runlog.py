"""RunLog followers: each waits on its own, so one follower's idle timeout or cancel never
disturbs another, and idle waits leave nothing behind."""

from __future__ import annotations

import asyncio
import contextlib

from iobridge.runtime.runlog import RunLog


async def _collect(log: RunLog, idle: float | None, into: list[list[tuple[int, bytes]]]) -> None:
    async for batch in log.follow(0, idle=idle):
        into.append(batch)


async def test_a_follower_timing_out_or_cancelled_leaves_the_others_waiting() -> None:
    log = RunLog()
    pinged: list[list[tuple[int, bytes]]] = []
    patient: list[list[tuple[int, bytes]]] = []
    doomed: list[list[tuple[int, bytes]]] = []
    pinging = asyncio.create_task(_collect(log, 0.01, pinged))
    waiting = asyncio.create_task(_collect(log, None, patient))
    cancelled = asyncio.create_task(_collect(log, None, doomed))
    await asyncio.sleep(0.1)  # several idle timeouts of the first follower
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    assert pinged and all(batch == [] for batch in pinged)
    assert patient == []
    log.append(b"one")
    log.append(b"two")
    log.close()
    await asyncio.wait_for(asyncio.gather(pinging, waiting), 2)
    assert patient == [[(1, b"one"), (2, b"two")]] or patient == [[(1, b"one")], [(2, b"two")]]
    assert [entry for batch in pinged for entry in batch] == [(1, b"one"), (2, b"two")]
    assert doomed == []


async def test_idle_timeouts_do_not_accumulate_waiters() -> None:
    log = RunLog()
    batches: list[list[tuple[int, bytes]]] = []
    follower = asyncio.create_task(_collect(log, 0.001, batches))
    while len(batches) < 50:
        await asyncio.sleep(0.005)
    assert len(log._waiters) <= 1  # one per waiting follower, however many timeouts passed
    follower.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follower
    assert log._waiters == []
