"""The checkpoint rows on real SQLite and PostgreSQL: the first point with the run's start
write, later points (one still queued replaced by a newer one), epochs, posted results, and
the drop with the run's end write."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from tests.backends import SQL_BACKENDS, open_backend

from iobridge.store.base import CheckpointDrop, CheckpointRow, CheckpointSuperseded, PointWrite

USER = {"id": "u1", "role": "user", "content": "hi"}


def _row(run_id: str = "r1") -> CheckpointRow:
    return CheckpointRow(owner="alice", run_id=run_id, thread_id="t1", resource_id="res",
                         agent_id="a", last_seq=1, base=orjson.dumps({"base": 1}),
                         point=orjson.dumps({"messages": []}), holder="A")


def _point(epoch: int, last_seq: int, phase: str = "running", holder: str = "A") -> PointWrite:
    return PointWrite(owner="alice", run_id="r1", epoch=epoch, phase=phase, last_seq=last_seq,
                      nbytes=10, point=orjson.dumps({"at": last_seq}), holder=holder)


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_a_checkpoint_lives_from_the_start_write_to_the_end_write(
    kind: str, tmp_path: Path
) -> None:
    async with open_backend(kind, tmp_path) as store:
        assert store.keeps_checkpoints
        assert await store.load_checkpoint("alice", "r1") is None
        await store.write_for_run("t1", resource_id="res", agent_id="a", messages=[USER],
                                  checkpoint=_row())
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None
        assert (cp.epoch, cp.phase, cp.last_seq, cp.holder) == (0, "running", 1, "A")
        assert cp.base == {"base": 1} and cp.point == {"messages": []}
        assert [m["id"] for m in await store.list_messages("t1")] == ["u1"]
        assert await store.write_point(_point(0, 5, "parked"))
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None and (cp.phase, cp.last_seq, cp.point) == ("parked", 5, {"at": 5})
        assert await store.list_checkpoints() == [("alice", "r1", "parked")]
        assert await store.list_checkpoints(holder="A", phase="parked") == [
            ("alice", "r1", "parked")]
        assert await store.list_checkpoints(holder="B") == []
        # Exactly one claimant moves the run to epoch 1, held by B from then on.
        assert await store.claim_checkpoint("alice", "r1", 0, "B")
        assert not await store.claim_checkpoint("alice", "r1", 0, "C")
        # The old holder can no longer write, nor drop its successor's checkpoint, nor store
        # its copy's messages with its end write (fenced by the epoch).
        with pytest.raises(CheckpointSuperseded):
            await store.write_point(_point(0, 6))
        stale = {"id": "stale", "role": "assistant", "content": "old copy"}
        with pytest.raises(CheckpointSuperseded):
            await store.write_for_run("t1", resource_id="res", agent_id="a", messages=[stale],
                                      checkpoint=CheckpointDrop("alice", "r1", 0, stored=True))
        assert [m["id"] for m in await store.list_messages("t1")] == ["u1"]
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None and cp.epoch == 1 and cp.holder == "B"
        assert await store.write_point(_point(1, 7, holder="B"))
        # The end write drops it, in the same transaction as the run's messages.
        answer = {"id": "a1", "role": "assistant", "content": "hello"}
        await store.write_for_run("t1", resource_id="res", agent_id="a", messages=[answer],
                                  checkpoint=CheckpointDrop("alice", "r1", 1))
        assert await store.load_checkpoint("alice", "r1") is None
        assert await store.list_checkpoints() == []
        # A point of a run whose checkpoint is gone answers False (nothing written).
        assert not await store.write_point(_point(1, 8))
        # An end write whose row was stored and is gone now: another process concluded the
        # run, nothing is stored; one whose row never was (its start write failed) stores.
        with pytest.raises(CheckpointSuperseded):
            await store.write_for_run("t1", resource_id="res", agent_id="a", messages=[stale],
                                      checkpoint=CheckpointDrop("alice", "r1", 0, stored=True))
        late = {"id": "late", "role": "assistant", "content": "unfenced"}
        await store.write_for_run("t1", resource_id="res", agent_id="a", messages=[late],
                                  checkpoint=CheckpointDrop("alice", "r1", 0))
        assert [m["id"] for m in await store.list_messages("t1")] == ["u1", "a1", "late"]


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_a_point_still_queued_takes_the_next_one_s_values(
    kind: str, tmp_path: Path
) -> None:
    async with open_backend(kind, tmp_path) as store:
        await store.insert_checkpoint(_row())
        first = _point(0, 3)
        writes = [store.write_point(first)]
        # Replaced before the writer took it: one statement for both points.
        replaced = first.replace(_point(0, 4, "parked"))
        written = await asyncio.gather(*writes)
        assert written == [True]
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None
        assert (cp.phase, cp.last_seq) == (("parked", 4) if replaced else ("running", 3))
        # Taken: no longer replaceable; withdrawn before being taken: nothing written.
        assert not first.replace(_point(0, 9))
        later = _point(0, 10)
        later.withdraw()
        assert await store.write_point(later)
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None and cp.last_seq != 10


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_a_posted_result_is_kept_once_in_order_and_dropped_with_its_run(
    kind: str, tmp_path: Path
) -> None:
    async with open_backend(kind, tmp_path) as store:
        await store.insert_checkpoint(_row())
        assert await store.record_tool_result("alice", "r1", "c2", "bad", True)
        assert await store.record_tool_result("alice", "r1", "c1", '{"t":1}', False)
        assert not await store.record_tool_result("alice", "r1", "c1", "other", True)
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None
        assert list(cp.results.items()) == [("c2", ("bad", True)), ("c1", ('{"t":1}', False))]
        # Another principal's run with the same id is another row.
        assert await store.load_checkpoint("bob", "r1") is None
        await store.drop_checkpoint("alice", "r1")
        assert await store.load_checkpoint("alice", "r1") is None
        assert await store.record_tool_result("alice", "r1", "c1", "again", False)


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_a_fenced_end_write_leaves_the_others_of_its_batch_whole(
    kind: str, tmp_path: Path
) -> None:
    """End writes batched together: the one of a run taken over stores nothing, the others
    store their messages and drop their checkpoints."""
    async with open_backend(kind, tmp_path) as store:
        threads = [f"t{n}" for n in range(4)]
        for n, thread in enumerate(threads):
            row = CheckpointRow(owner="alice", run_id=f"r{n}", thread_id=thread,
                                resource_id="res", agent_id="a", last_seq=1,
                                base=orjson.dumps({}), point=orjson.dumps({}), holder="A")
            await store.write_for_run(thread, resource_id="res", agent_id="a",
                                      messages=[{**USER, "id": f"u{n}"}], checkpoint=row)
        assert await store.claim_checkpoint("alice", "r1", 0, "B")
        ends = await asyncio.gather(*(
            store.write_for_run(thread, resource_id="res", agent_id="a", messages=[
                {"id": f"a{n}", "role": "assistant", "content": "done"}],
                checkpoint=CheckpointDrop("alice", f"r{n}", 0, stored=True))
            for n, thread in enumerate(threads)), return_exceptions=True)
        assert [type(e).__name__ for e in ends] == [
            "NoneType", "CheckpointSuperseded", "NoneType", "NoneType"]
        for n, thread in enumerate(threads):
            stored = [m["id"] for m in await store.list_messages(thread)]
            assert stored == ([f"u{n}"] if n == 1 else [f"u{n}", f"a{n}"])
        assert await store.list_checkpoints() == [("alice", "r1", "running")]
