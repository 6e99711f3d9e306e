"""The guard keeps the run's shared state and refuses deltas that do not apply to it."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.protocol.guard import INVALID_STATE_DELTA, STATE_TOO_LARGE, LifecycleGuard


def _started(state: Any = None, **kwargs: Any) -> LifecycleGuard:
    guard = LifecycleGuard("t", "r", state=state, **kwargs)
    guard.start()
    return guard


def delta(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def test_deltas_apply_to_the_state_the_run_started_from() -> None:
    guard = _started({"count": 1, "items": ["a"]})
    events = guard.feed(delta({"op": "replace", "path": "/count", "value": 2},
                              {"op": "add", "path": "/items/-", "value": "b"}))
    assert [e["type"] for e in events] == ["STATE_DELTA"]
    assert guard.shared_state == {"count": 2, "items": ["a", "b"]}


def test_a_snapshot_replaces_the_state_and_is_a_copy() -> None:
    guard = _started({"old": True})
    snapshot = {"todo": []}
    assert guard.feed({"type": "STATE_SNAPSHOT", "snapshot": snapshot})[0]["type"] == (
        "STATE_SNAPSHOT")
    snapshot["todo"].append("changed later by the agent")
    assert guard.shared_state == {"todo": []}
    guard.feed(delta({"op": "add", "path": "/todo/0", "value": "x"}))
    assert guard.shared_state == {"todo": ["x"]}


def test_no_state_counts_as_the_clients_empty_object() -> None:
    guard = _started(None)
    guard.feed(delta({"op": "add", "path": "/a", "value": 1}))
    assert guard.shared_state == {"a": 1}


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/a/b/c", "value": 1}],
        [{"op": "remove", "path": "/items/5"}],
        [{"op": "test", "path": "/count", "value": 99}],
        [{"op": "bogus", "path": "/count"}],
        [{"path": "/count", "value": 1}],
        [{"op": "add", "path": "count", "value": 1}],
        [{"op": "add", "path": "/x"}],
        [{"op": "move", "from": "/nowhere", "path": "/x"}],
        ["not an operation"],
    ],
)
def test_a_delta_that_does_not_apply_ends_the_run_and_is_never_shown(
    ops: list[Any],
) -> None:
    guard = _started({"count": 1, "items": []})
    guard.feed({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"})
    events = guard.feed({"type": "STATE_DELTA", "delta": ops})
    assert [e["type"] for e in events] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert events[-1]["code"] == INVALID_STATE_DELTA
    assert "does not apply" in events[-1]["message"]
    assert guard.ended and guard.feed(delta()) == [] and guard.finish() == []


def test_a_delta_applies_whole_or_not_at_all() -> None:
    guard = _started({"count": 1})
    guard.feed(delta({"op": "replace", "path": "/count", "value": 2},
                     {"op": "remove", "path": "/missing"}))
    assert guard.ended
    assert guard.shared_state == {"count": 1}


def test_state_at_the_limit_is_kept_and_one_byte_more_ends_the_run() -> None:
    # {"s":"…"} is 8 bytes of JSON around the string.
    guard = _started({}, max_state_bytes=20)
    fits = guard.feed({"type": "STATE_SNAPSHOT", "snapshot": {"s": "x" * 12}})
    assert [e["type"] for e in fits] == ["STATE_SNAPSHOT"]
    over = guard.feed(delta({"op": "replace", "path": "/s", "value": "x" * 13}))
    assert [e["type"] for e in over] == ["RUN_ERROR"]
    assert over[0]["code"] == STATE_TOO_LARGE
    assert guard.shared_state == {"s": "x" * 12}


def test_a_snapshot_over_the_limit_ends_the_run() -> None:
    guard = _started(None, max_state_bytes=10)
    events = guard.feed({"type": "STATE_SNAPSHOT", "snapshot": ["x" * 20]})
    assert [e["code"] for e in events] == [STATE_TOO_LARGE]
    assert guard.shared_state is None
