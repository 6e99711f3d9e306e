"""The run log, the pending registry and the single-process coordinator as their users see
them: sequence numbers, the byte-bounded window, batches, followers, answers delivered once,
and no remote runs."""

from __future__ import annotations

import asyncio

import pytest

from iobridge.agents.context import ToolResult
from iobridge.errors import ConflictError, EventsNotRetained, NotFoundError
from iobridge.runtime.cluster import LocalCluster, RemoteRun
from iobridge.runtime.pending import PendingRegistry
from iobridge.runtime.replica_messages import CancelRun
from iobridge.runtime.runlog import ENTRY_OVERHEAD, RunLog

# -- the run log -------------------------------------------------------------------------


def test_sequence_numbers_start_at_one_and_entries_are_the_same_octets() -> None:
    log = RunLog()
    assert (len(log), log.last_seq, log.first_seq, log.nbytes, log.closed) == (0, 0, 1, 0, False)
    assert [log.append(b"a"), log.append(b"bc")] == [1, 2]
    assert log.entries() == [(1, b"a"), (2, b"bc")]
    assert log.entries(1) == [(2, b"bc")]
    assert log.entries(2) == []
    assert (len(log), log.last_seq, log.first_seq) == (2, 2, 1)
    assert log.nbytes == 3 + 2 * ENTRY_OVERHEAD


def test_a_closed_log_refuses_entries() -> None:
    log = RunLog()
    log.append(b"x")
    log.close()
    assert log.closed
    with pytest.raises(RuntimeError, match=r"^run log is closed$"):
        log.append(b"y")
    assert log.entries() == [(1, b"x")]


def test_the_window_keeps_the_newest_entries_within_max_bytes() -> None:
    entry = 10 + ENTRY_OVERHEAD
    log = RunLog(max_bytes=3 * entry)  # room for exactly three entries
    for n in range(1, 4):
        log.append(bytes([n]) * 10)
    assert (log.first_seq, len(log), log.nbytes) == (1, 3, 3 * entry)  # at the limit: all kept
    log.append(b"\x04" * 10)
    assert (log.first_seq, log.last_seq, len(log), log.nbytes) == (2, 4, 3, 3 * entry)
    assert [seq for seq, _ in log.entries(1)] == [2, 3, 4]
    assert log.entries(3) == [(4, b"\x04" * 10)]
    with pytest.raises(EventsNotRetained) as trimmed:
        log.entries(0)
    assert trimmed.value.first_retained == 2
    assert "before 2" in str(trimmed.value)


def test_trimming_many_times_keeps_sequence_numbers_and_bytes_right() -> None:
    entry = 4 + ENTRY_OVERHEAD
    log = RunLog(max_bytes=2 * entry)
    for n in range(1, 101):
        assert log.append(n.to_bytes(4, "big")) == n
        assert log.nbytes <= 2 * entry
        assert log.entries(n - 1) == [(n, n.to_bytes(4, "big"))]
    assert (log.first_seq, log.last_seq, len(log)) == (99, 100, 2)
    assert log.entries(98) == [(99, (99).to_bytes(4, "big")), (100, (100).to_bytes(4, "big"))]


def test_an_entry_larger_than_the_window_is_still_kept() -> None:
    log = RunLog(max_bytes=8)
    log.append(b"small")
    log.append(b"x" * 100)  # the newest (the terminal event, say) is always retained
    assert (log.first_seq, len(log)) == (2, 1)
    assert log.entries(1) == [(2, b"x" * 100)]


def test_entries_are_batched_by_bytes_but_never_empty() -> None:
    log = RunLog()
    for data in (b"aaaa", b"bbbb", b"cccc", b"dddddddddd"):
        log.append(data)
    assert log.entries(max_bytes=8) == [(1, b"aaaa"), (2, b"bbbb")]  # exactly at the limit
    assert log.entries(max_bytes=7) == [(1, b"aaaa")]
    assert log.entries(2, max_bytes=4) == [(3, b"cccc")]
    assert log.entries(3, max_bytes=1) == [(4, b"dddddddddd")]  # too big, sent alone
    assert len(log.entries(max_bytes=40)) == 4  # everything fits: one slice
    assert len(log.entries(max_bytes=22)) == 4  # the exact total
    assert len(log.entries(max_bytes=21)) == 3


async def test_a_follower_gets_what_is_ready_in_batches_then_waits_for_more() -> None:
    log = RunLog(batch_bytes=4)
    for data in (b"aa", b"bb", b"cc", b"dd"):
        log.append(data)
    batches: list[list[tuple[int, bytes]]] = []

    async def follow() -> None:
        async for batch in log.follow(1):
            batches.append(batch)

    task = asyncio.create_task(follow())
    for _ in range(5):
        await asyncio.sleep(0)
    assert batches == [[(2, b"bb"), (3, b"cc")], [(4, b"dd")]]  # at most 4 bytes a batch
    log.append(b"ee")
    for _ in range(5):
        await asyncio.sleep(0)
    assert batches[-1] == [(5, b"ee")]
    assert not task.done()
    log.append(b"ff")
    log.close()
    await asyncio.wait_for(task, 1)
    assert batches == [[(2, b"bb"), (3, b"cc")], [(4, b"dd")], [(5, b"ee")], [(6, b"ff")]]


async def test_followers_of_a_closed_log_get_its_entries_and_end() -> None:
    log = RunLog()
    log.append(b"x")
    log.close()
    got = [batch async for batch in log.follow()]
    assert got == [[(1, b"x")]]
    assert [batch async for batch in log.follow(1)] == []


async def test_an_idle_follower_gets_empty_batches_for_keep_alives() -> None:
    log = RunLog()
    stream = log.follow(idle=0.01)
    assert await asyncio.wait_for(anext(stream), 1) == []
    log.append(b"x")
    assert await asyncio.wait_for(anext(stream), 1) == [(1, b"x")]
    await stream.aclose()


async def test_a_follower_behind_the_window_is_told_so() -> None:
    log = RunLog(max_bytes=2 * (1 + ENTRY_OVERHEAD))
    for _ in range(5):
        log.append(b"x")
    with pytest.raises(EventsNotRetained) as trimmed:
        await anext(log.follow(0))
    assert trimmed.value.first_retained == 4


async def test_every_follower_is_woken_by_one_append() -> None:
    log = RunLog()
    first, second = log.follow(), log.follow()
    waits = [asyncio.ensure_future(anext(first)), asyncio.ensure_future(anext(second))]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waits)
    log.append(b"x")
    assert await asyncio.wait_for(asyncio.gather(*waits), 1) == [[(1, b"x")], [(1, b"x")]]
    log.close()
    # Once the log is closed and read, followers end.
    ends = [asyncio.ensure_future(anext(first)), asyncio.ensure_future(anext(second))]
    done, _ = await asyncio.wait(ends, timeout=1)
    assert len(done) == 2
    assert all(isinstance(e.exception(), StopAsyncIteration) for e in ends)


async def test_close_wakes_a_waiting_follower() -> None:
    log = RunLog()
    stream = log.follow()
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    log.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 1)


# -- the pending registry -----------------------------------------------------------------

RUN = ("alice", "r1")
OTHER = ("bob", "r1")


async def test_a_result_reaches_its_waiter_once_then_the_call_is_gone() -> None:
    pending = PendingRegistry()
    call = pending.register(RUN, "c1", "get_weather")
    assert pending.register(RUN, "c1", "get_weather") is call  # idempotent
    assert (len(pending), call.run, call.tool_call_id, call.name) == (1, RUN, "c1", "get_weather")
    waiter = asyncio.ensure_future(pending.wait(call, 5))
    await asyncio.sleep(0)
    pending.resolve(RUN, "c1", ToolResult(content="sunny"))
    assert (await waiter).content == "sunny"
    assert len(pending) == 0
    with pytest.raises(ConflictError) as again:
        pending.resolve(RUN, "c1", ToolResult(content="rain"))
    assert again.value.code == "TOOL_RESULT_ALREADY_SUBMITTED"
    assert again.value.message == "this tool call already has a result"


async def test_a_second_result_before_the_waiter_ran_is_a_conflict() -> None:
    pending = PendingRegistry()
    pending.register(RUN, "c1", "t")
    pending.resolve(RUN, "c1", ToolResult(content="one"))
    with pytest.raises(ConflictError) as again:
        pending.resolve(RUN, "c1", ToolResult(content="two"))
    assert again.value.code == "TOOL_RESULT_ALREADY_SUBMITTED"


async def test_unknown_calls_and_other_owners_calls_are_not_found() -> None:
    pending = PendingRegistry()
    pending.register(RUN, "c1", "t")
    for run, call_id in ((RUN, "c2"), (OTHER, "c1"), (("alice", "r2"), "c1")):
        with pytest.raises(NotFoundError) as missing:
            pending.resolve(run, call_id, ToolResult(content="x"))
        assert missing.value.code == "TOOL_CALL_NOT_FOUND"
        assert missing.value.message == "unknown tool call for this run"
    assert len(pending) == 1


async def test_a_wait_that_times_out_unregisters_the_call() -> None:
    pending = PendingRegistry()
    call = pending.register(RUN, "c1", "t")
    other = pending.register(RUN, "c2", "t")
    with pytest.raises(TimeoutError):
        await pending.wait(call, 0.01)
    assert isinstance(call.future.exception(), TimeoutError)
    assert len(pending) == 1  # the run's other call still waits
    with pytest.raises(NotFoundError):
        pending.resolve(RUN, "c1", ToolResult(content="late"))
    pending.resolve(RUN, "c2", ToolResult(content="ok"))
    assert other.future.result().content == "ok"


async def test_ending_a_run_cancels_its_calls_and_leaves_other_runs_alone() -> None:
    pending = PendingRegistry()
    mine = [pending.register(RUN, f"c{n}", "t") for n in (1, 2)]
    theirs = pending.register(OTHER, "c1", "t")
    pending.resolve(RUN, "c1", ToolResult(content="answered"))
    pending.cancel_run(RUN)
    assert mine[0].future.result().content == "answered"
    assert mine[1].future.cancelled()
    assert not theirs.future.done()
    assert len(pending) == 1
    # The answer is remembered until the run is forgotten: 409, then 404.
    with pytest.raises(ConflictError):
        pending.resolve(RUN, "c1", ToolResult(content="again"))
    pending.forget_run(RUN)
    with pytest.raises(NotFoundError):
        pending.resolve(RUN, "c1", ToolResult(content="again"))
    pending.forget_run(OTHER)
    assert theirs.future.cancelled()
    assert len(pending) == 0


async def test_waiting_on_a_call_of_an_ended_run_is_cancelled() -> None:
    pending = PendingRegistry()
    call = pending.register(RUN, "c1", "t")
    pending.cancel_run(RUN)
    with pytest.raises(asyncio.CancelledError):
        await pending.wait(call, 1)
    assert len(pending) == 0


# -- the single-process coordinator --------------------------------------------------------


async def test_a_single_process_has_no_remote_runs_to_follow_or_command() -> None:
    cluster = LocalCluster()
    assert cluster.distributed is False
    assert await cluster.find("alice", "r1") is None
    assert await cluster.problem() is None
    remote = RemoteRun(run_id="r1", thread_id="t1", owner="alice", resource_id="ra",
                       replica="elsewhere",
                       first_seq=1, last_seq=1, ended=False)
    with pytest.raises(RuntimeError, match=r"^a single process has no remote runs$"):
        await anext(cluster.follow(remote, 0, idle=None))
    with pytest.raises(RuntimeError, match=r"^a single process has no remote runs$"):
        await cluster.tell(remote, CancelRun(owner="alice", run="r1"))
    assert await cluster.ask(CancelRun(owner="alice", run="r1")) is None
