"""What a follower is sent of a durable run besides its log: event ids with what it has open,
and the catch-up of a client whose cursor is an id of an earlier epoch (``protocol.event_ids``).

A client that resumes with an id its run's previous holder sent (a lost owner, or a drained
one) may hold anything open that holder streamed after the durable point the run was
continued from. It is sent, each with an id of its own epoch after its cursor:

1. what closes what its cursor says it has open (``protocol.guard.closers``);
2. a ``MESSAGES_SNAPSHOT`` of the conversation at the run's last durable point (the thread's
   stored messages and what the run produced up to the point), which replaces what the lost
   holder streamed after it, and a ``STATE_SNAPSHOT`` of the shared state there;
3. the run's log after that point, in the run's current epoch, without the results of calls
   the client already had a result for (a result posted before the takeover, which the lost
   holder may have sent, is given again by the continued run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import (
    EPOCH_SHIFT,
    OPENS_OR_CLOSES,
    Cursor,
    OpenState,
    OpenTracker,
)
from iobridge.protocol.events import encode_event
from iobridge.protocol.guard import closers

__all__ = ["Continuation", "RemoteTags", "catch_up", "skip_results"]

_RESULT_PREFIX = b'{"type":"TOOL_CALL_RESULT"'


@dataclass(slots=True)
class Continuation:
    """How a follower goes on: ``prologue`` (events made for it, with their ids and
    tags), then the log after sequence number ``after``, whose first entries drop the
    results of the calls in ``skip``."""

    after: int
    prologue: list[tuple[int, bytes]] = field(default_factory=list)
    tags: list[bytes] = field(default_factory=list)
    skip: frozenset[str] = frozenset()


def catch_up(
    cursor: Cursor, state: OpenState, *, started: dict[str, Any], branches: list[int],
    point_seq: int, point: dict[str, Any], messages: list[dict[str, Any]],
) -> Continuation:
    """The continuation of a client whose cursor (and its open ``state``) is of an earlier
    epoch than the run's (see the module docstring).

    Args:
        started: The run's RUN_STARTED (sent first to a client that has nothing yet).
        branches: Where each later epoch began (``RunIds.branches``).
        point_seq: The run's last durable point; ``point`` its values.
        messages: The conversation at that point (the thread's and the run's messages).
    """
    made: list[dict[str, Any]] = []
    if cursor.number == 0:
        made.append(started)
    made += closers(state)
    made.append(ev.messages_snapshot(messages))
    if point.get("state") is not None:
        made.append(ev.state_snapshot(point["state"]))
    tracker = OpenTracker(state)
    out = Continuation(after=point_seq)
    for offset, event in enumerate(made, start=1):
        if event["type"] in OPENS_OR_CLOSES:
            tracker.apply(event)
        out.prologue.append((cursor.number + offset, encode_event(event)))
        encoded = tracker.encoded()
        out.tags.append(b"~" + encoded if encoded else b"")
    # The client knew a call the point waits on if it was announced before the client's
    # cursor and before the client's epoch ended; if it has no result pending for it, it
    # has the result.
    known = min(cursor.seq, branches[cursor.epoch]) if cursor.epoch < len(branches) else 0
    out.skip = frozenset(
        c["id"] for c in point.get("pending", ())
        if c["id"] not in state.pending and c["at"] <= known
    )
    return out


def skip_results(
    batch: list[tuple[int, bytes]], skip: frozenset[str]
) -> tuple[list[tuple[int, bytes]], bool]:
    """``batch`` without the TOOL_CALL_RESULTs of ``skip`` at its start; True once an entry
    of another kind was seen (the continued run gives the results first: nothing later is
    dropped)."""
    for index, (_, data) in enumerate(batch):
        if not data.startswith(_RESULT_PREFIX):
            kept = [e for e in batch[:index] if not _skipped(e[1], skip)]
            return kept + batch[index:], True
    return [e for e in batch if not _skipped(e[1], skip)], False


def _skipped(data: bytes, skip: frozenset[str]) -> bool:
    return orjson.loads(data).get("toolCallId") in skip


class RemoteTags:
    """The open state after each event of a run followed from another replica (its log
    comes through Redis without it), from the cursor's state on."""

    def __init__(self, state: OpenState | None) -> None:
        self.tracker = OpenTracker(state)
        encoded = self.tracker.encoded()
        self.tag = b"~" + encoded if encoded else b""

    def tags(self, batch: list[tuple[int, bytes]]) -> list[bytes]:
        out = []
        for _, data in batch:
            if data.startswith(b'{"type":"') and data[9:data.index(b'"', 9)].decode(
                "ascii", "replace"
            ) in OPENS_OR_CLOSES:
                self.tracker.apply(orjson.loads(data))
                encoded = self.tracker.encoded()
                self.tag = b"~" + encoded if encoded else b""
            out.append(self.tag)
        return out


def numbered(batch: list[tuple[int, bytes]], epoch: int) -> list[tuple[int, bytes]]:
    """``batch`` with its sequence numbers made the ids of ``epoch``."""
    if not epoch:
        return batch
    base = epoch << EPOCH_SHIFT
    return [(base + seq, data) for seq, data in batch]
