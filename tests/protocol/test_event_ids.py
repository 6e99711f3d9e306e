"""Event ids of durable runs (``protocol.event_ids``): the open state's text form, the cursor,
the tracker against the guard, and what closes an open state."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.agui_verify import verify_events

from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import (
    OPENS_OR_CLOSES,
    Cursor,
    OpenState,
    OpenTracker,
    number,
    parse_cursor,
)
from iobridge.protocol.guard import LifecycleGuard, closers

TEXT = st.text(min_size=1, max_size=12)
OWNED = st.tuples(st.none() | TEXT, TEXT)
STATES = st.builds(
    OpenState,
    steps=st.lists(OWNED, max_size=3, unique=True).map(tuple),
    texts=st.lists(OWNED, max_size=2, unique_by=lambda o: o[1]).map(tuple),
    reasoning_messages=st.lists(OWNED, max_size=2, unique_by=lambda o: o[1]).map(tuple),
    reasoning_spans=st.lists(OWNED, max_size=2, unique_by=lambda o: o[1]).map(tuple),
    subagents=st.lists(st.tuples(TEXT, st.none() | TEXT), max_size=2,
                       unique_by=lambda o: o[0]).map(tuple),
    pending=st.lists(TEXT, max_size=3, unique=True).map(tuple),
)


@given(STATES)
def test_an_open_state_reads_back_from_an_id_of_printable_ascii(state: OpenState) -> None:
    encoded = state.encode()
    assert all(33 <= b < 127 for b in encoded)
    cursor = parse_cursor(f"{number(2, 17)}~{encoded.decode()}" if encoded else "17")
    assert cursor.state == state
    assert (cursor.epoch, cursor.seq) == ((2, 17) if encoded else (0, 17))
    assert bool(state) == bool(encoded)


@pytest.mark.parametrize("text", ["", "x", "-1", "1~q:x", "1~s:a", "1~s::b:c", "1 ", "1" * 20,
                                  "1~s::%zz", "١٢"])
def test_what_is_not_an_event_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cursor(text)


def test_a_number_alone_is_nothing_open_and_ids_grow_across_epochs() -> None:
    assert parse_cursor("12") == Cursor(12, OpenState())
    assert number(0, 5) == 5
    assert number(1, 6) > number(0, 2**32 - 1)


def _stream() -> list[dict[str, Any]]:
    """What an agent emits: steps, a subagent with its own text, reasoning, a tool call."""
    return [
        ev.step_started("plan"),
        ev.text_start("m1"), ev.text_content("m1", "hi"),
        {"type": "SUBAGENT_STARTED", "subagentRunId": "sub", "name": "helper"},
        {**ev.text_start("m2"), "subagentRunId": "sub"},
        {**ev.text_content("m2", "x"), "subagentRunId": "sub"},
        ev.reasoning_start("r1"), ev.reasoning_message_start("r2"),
        ev.reasoning_message_content("r2", "think"),
        ev.tool_call_start("c1", "lookup"), ev.tool_call_args("c1", "{}"), ev.tool_call_end("c1"),
    ]


def test_the_tracker_follows_what_the_guard_has_open_and_closers_close_it() -> None:
    guard = LifecycleGuard("t", "r")
    tracker = OpenTracker()
    emitted = guard.start()
    for candidate in _stream():
        out = guard.feed(candidate)
        for event in out:
            if event["type"] in OPENS_OR_CLOSES:
                tracker.apply(event)
        emitted += out
        # After every event the guard emitted, the tracker has what the guard has open.
        assert tracker.state() == guard.open_state()
    state = tracker.state()
    assert state.steps == ((None, "plan"),) and state.pending == ("c1",)
    assert ("sub", "m2") in state.texts and ("sub", None) in state.subagents
    # A client that got this far, then only what closes it and the terminal: valid.
    verify_events([*emitted, *closers(state), ev.run_finished("t", "r")],
                  thread_id="t", run_id="r")


def test_a_primed_guard_goes_on_from_an_open_state() -> None:
    state = OpenState(steps=((None, "s"),), texts=((None, "m"),), pending=("c",))
    guard = LifecycleGuard("t", "r")
    guard.prime(state)
    assert guard.open_state() == state
    assert guard.feed(ev.text_content("m", "more")) == [ev.text_content("m", "more")]
    kinds = [e["type"] for e in guard.finish()]
    assert kinds == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]


def test_a_cursor_is_at_most_max_cursor_chars_long() -> None:
    from iobridge.protocol.event_ids import MAX_CURSOR_CHARS

    longest = "1~s::" + "a" * (MAX_CURSOR_CHARS - 5)
    assert len(longest) == MAX_CURSOR_CHARS
    assert parse_cursor(longest).state == OpenState(steps=((None, "a" * (MAX_CURSOR_CHARS - 5)),))
    with pytest.raises(ValueError):
        parse_cursor(longest + "a")
