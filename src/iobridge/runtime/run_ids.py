"""The event ids of a durable run's log (``protocol.event_ids``): its epoch, and what a client
has open after each event, kept as the points where that changes (a handful per message, not
one per event)."""

from __future__ import annotations

import bisect
from typing import Any

from iobridge.protocol.event_ids import EPOCH_SHIFT, OPENS_OR_CLOSES, OpenState, OpenTracker

__all__ = ["RunIds"]

#: Most change points kept beyond the log's window before the old ones are dropped.
_SLACK = 64


class RunIds:
    """Ids of one run's events in this process.

    Args:
        epoch: The run's takeover epoch (0 until another process first continued it).
        after: The last sequence number before this process's events (the durable point a
            continued run goes on from; 0 for a new run).
    """

    def __init__(self, epoch: int = 0, after: int = 0) -> None:
        self.epoch = epoch
        self.after = after
        #: Added to a sequence number to make the event's id.
        self.base = epoch << EPOCH_SHIFT
        self.tracker = OpenTracker()
        #: Calls waiting for a result, by id: the sequence number of their TOOL_CALL_END.
        self.announced: dict[str, int] = {}
        #: Where each later epoch began: ``branches[e]`` is the last sequence number epoch
        #: ``e`` shares with epoch ``e + 1`` (the durable point it was continued from).
        self.branches: list[int] = []
        #: The last durable point: its sequence number and values (``Checkpointer.last``).
        self.point_seq = after
        self.point: dict[str, Any] = {}
        #: After event ``_at[i]`` (and until the next change) the open state is
        #: ``_tags[i]``: ``b""`` when nothing is open, else ``~`` and its text form.
        self._at: list[int] = [after]
        self._tags: list[bytes] = [b""]

    def start_from(self, state: OpenState) -> None:
        """What clients have open at the point this process goes on from."""
        self.tracker = OpenTracker(state)
        encoded = self.tracker.encoded()
        self._at, self._tags = [self.after], [b"~" + encoded if encoded else b""]

    def apply(self, seq: int, event: dict[str, Any]) -> None:
        """Event ``seq`` was appended: follow what it opens or closes."""
        kind = event["type"]
        if kind not in OPENS_OR_CLOSES:
            return
        if kind == "TOOL_CALL_END":
            self.announced[event["toolCallId"]] = seq
        elif kind == "TOOL_CALL_RESULT":
            self.announced.pop(event["toolCallId"], None)
        self.tracker.apply(event)
        encoded = self.tracker.encoded()
        tag = b"~" + encoded if encoded else b""
        if tag != self._tags[-1]:
            self._at.append(seq)
            self._tags.append(tag)

    def tags(self, batch: list[tuple[int, bytes]]) -> list[bytes]:
        """The open state after each entry of ``batch`` (in order of sequence numbers)."""
        at, tags = self._at, self._tags
        index = max(0, bisect.bisect_right(at, batch[0][0]) - 1)
        following = at[index + 1] if index + 1 < len(at) else None
        if following is None or following > batch[-1][0]:
            return [tags[index]] * len(batch)  # no change within the batch (most batches)
        out: list[bytes] = []
        for seq, _ in batch:
            while following is not None and seq >= following:
                index += 1
                following = at[index + 1] if index + 1 < len(at) else None
            out.append(tags[index])
        return out

    def prune(self, first_retained: int) -> None:
        """Forget change points before the log's window (the one in force there stays)."""
        at = self._at
        if len(at) > _SLACK and at[_SLACK // 2] <= first_retained:
            keep = bisect.bisect_right(at, first_retained) - 1
            del at[:keep]
            del self._tags[:keep]
