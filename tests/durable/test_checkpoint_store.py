"""The checkpoint rows on real SQLite and PostgreSQL: points, epochs, posted results."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tests.backends import SQL_BACKENDS, open_backend

from iobridge.store.base import CheckpointGap, CheckpointSuperseded, PointWrite


def _point(
    epoch: int, last_seq: int, segment: list[bytes], *, first_seq: int, phase: str = "running",
    base: dict[str, object] | None = None, point: dict[str, object] | None = None,
) -> PointWrite:
    return PointWrite(
        owner="alice", run_id="r1", thread_id="t1", resource_id="res", agent_id="a",
        epoch=epoch, phase=phase, last_seq=last_seq, nbytes=100,
        base=orjson.dumps(base) if base is not None else None,
        point=orjson.dumps(point or {}), first_seq=first_seq, segment=segment,
    )


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_points_append_events_and_a_claim_supersedes_the_old_holder(
    kind: str, tmp_path: Path
) -> None:
    async with open_backend(kind, tmp_path) as store:
        assert store.keeps_checkpoints
        assert await store.load_checkpoint("alice", "r1") is None
        await store.write_point(_point(0, 2, [b'{"a":1}', b'{"b":"x\\ny"}'], first_seq=1,
                                       base={"history": [1]}))
        await store.write_point(_point(0, 3, [b'{"c":3}'], first_seq=3, phase="parked",
                                       point={"pending": ["c1"]}))
        # A point that does not follow the stored one (an earlier write failed) is refused.
        with pytest.raises(CheckpointGap):
            await store.write_point(_point(0, 9, [b"{}"], first_seq=6))
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None
        assert (cp.epoch, cp.phase, cp.last_seq) == (0, "parked", 3)
        assert cp.base == {"history": [1]} and cp.point == {"pending": ["c1"]}
        assert cp.events == [b'{"a":1}', b'{"b":"x\\ny"}', b'{"c":3}']
        assert await store.list_checkpoints() == [("alice", "r1", "parked")]
        # Exactly one claimant moves the run to epoch 1.
        assert await store.claim_checkpoint("alice", "r1", 0)
        assert not await store.claim_checkpoint("alice", "r1", 0)
        # The old holder can no longer write, nor drop its successor's checkpoint.
        with pytest.raises(CheckpointSuperseded):
            await store.write_point(_point(0, 4, [b"{}"], first_seq=4))
        await store.drop_checkpoint("alice", "r1", epoch=0)
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None and cp.epoch == 1 and len(cp.events) == 3
        await store.write_point(_point(1, 4, [b'{"d":4}'], first_seq=4))
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None and cp.last_seq == 4 and cp.events[-1] == b'{"d":4}'
        # A run is created only at epoch 0 with its base.
        with pytest.raises(CheckpointSuperseded):
            await store.write_point(PointWrite(
                owner="alice", run_id="r2", thread_id="t", resource_id="r", agent_id="a",
                epoch=1, phase="running", last_seq=1, nbytes=1, base=b"{}", point=b"{}",
                first_seq=1, segment=[b"{}"]))
        await store.drop_checkpoint("alice", "r1", epoch=1)
        assert await store.load_checkpoint("alice", "r1") is None
        assert await store.list_checkpoints() == []


@pytest.mark.parametrize("kind", SQL_BACKENDS)
async def test_a_posted_result_is_kept_once_and_dropped_with_its_run(
    kind: str, tmp_path: Path
) -> None:
    async with open_backend(kind, tmp_path) as store:
        await store.write_point(_point(0, 1, [b"{}"], first_seq=1, phase="parked", base={}))
        assert await store.record_tool_result("alice", "r1", "c1", '{"t":1}', False)
        assert not await store.record_tool_result("alice", "r1", "c1", "other", True)
        assert await store.record_tool_result("alice", "r1", "c2", "bad", True)
        cp = await store.load_checkpoint("alice", "r1")
        assert cp is not None
        assert cp.results == {"c1": ('{"t":1}', False), "c2": ("bad", True)}
        # Another principal's run with the same id is another row.
        assert await store.load_checkpoint("bob", "r1") is None
        await store.drop_checkpoint("alice", "r1")
        assert await store.load_checkpoint("alice", "r1") is None
        assert await store.record_tool_result("alice", "r1", "c1", "again", False)
