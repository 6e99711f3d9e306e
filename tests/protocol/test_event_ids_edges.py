"""Event ids at their edges: the exact text of an open state, a tracker that starts from one
and closes each kind of item, and cursors at the limits of their form."""

from __future__ import annotations

import re
from typing import Any

import pytest

from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import OpenState, OpenTracker, parse_cursor

# Every kind of item, each with and without an owner (or a parent).
STATE = OpenState(
    steps=((None, "plan"), ("sub", "plan")),
    texts=((None, "m1"), ("sub", "m2")),
    reasoning_messages=((None, "r1"), ("sub", "r2")),
    reasoning_spans=((None, "R1"), ("sub", "R2")),
    subagents=(("sub", None), ("child", "sub")),
    pending=("c1", "c2"),
)
STATE_TEXT = (b"s::plan!s:sub:plan!t::m1!t:sub:m2!r::r1!r:sub:r2!R::R1!R:sub:R2"
              b"!a:sub:!a:child:sub!p:c1!p:c2")


def by(owner: str, event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "subagentRunId": owner}


def test_the_text_form_of_every_kind_of_item() -> None:
    assert STATE.encode() == STATE_TEXT
    assert OpenState.decode(STATE_TEXT.decode()) == STATE
    assert OpenState().encode() == b""


def test_fields_are_percent_encoded_except_unreserved_characters() -> None:
    state = OpenState(steps=((None, "a/b c"),), pending=("x~y_z.1-2",),
                      texts=(("s/1", "é"),))
    assert state.encode() == b"s::a%2Fb%20c!t:s%2F1:%C3%A9!p:x~y_z.1-2"
    assert OpenState.decode(state.encode().decode()) == state


def test_a_tracker_starts_from_an_open_state() -> None:
    tracker = OpenTracker(STATE)
    assert tracker.encoded() == STATE_TEXT
    assert tracker.state() == STATE


def test_a_tracker_from_a_state_closes_each_of_its_items() -> None:
    """What a tracker was given is keyed as what it would have tracked itself: each
    closing event removes exactly its item."""
    tracker = OpenTracker(STATE)
    closing = [
        ev.step_finished("plan"), by("sub", ev.step_finished("plan")),
        ev.text_end("m1"), by("sub", ev.text_end("m2")),
        ev.reasoning_message_end("r1"), by("sub", ev.reasoning_message_end("r2")),
        ev.reasoning_end("R1"), by("sub", ev.reasoning_end("R2")),
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "child"},
        {"type": "SUBAGENT_ERROR", "subagentRunId": "sub"},
        ev.tool_call_result("t1", "c1", "ok"), ev.tool_call_result("t2", "c2", "ok"),
    ]
    closed = [b"s::plan", b"s:sub:plan", b"t::m1", b"t:sub:m2", b"r::r1", b"r:sub:r2",
              b"R::R1", b"R:sub:R2", b"a:child:sub", b"a:sub:", b"p:c1", b"p:c2"]
    for count, event in enumerate(closing, 1):
        tracker.apply(event)
        left = [i for i in STATE_TEXT.split(b"!") if i not in closed[:count]]
        assert tracker.encoded() == b"!".join(left), event
    assert tracker.state() == OpenState()


def test_steps_of_the_same_name_are_told_apart_by_their_owner() -> None:
    tracker = OpenTracker()
    tracker.apply(ev.step_started("plan"))
    tracker.apply(by("sub", ev.step_started("plan")))
    assert tracker.encoded() == b"s::plan!s:sub:plan"
    tracker.apply(by("sub", ev.step_finished("plan")))
    assert tracker.state() == OpenState(steps=((None, "plan"),))
    tracker.apply(ev.step_finished("plan"))
    assert tracker.encoded() == b""


def test_a_subagent_keeps_its_parent_until_it_ends() -> None:
    tracker = OpenTracker()
    tracker.apply({"type": "SUBAGENT_STARTED", "subagentRunId": "sub", "name": "helper"})
    tracker.apply({"type": "SUBAGENT_STARTED", "subagentRunId": "child", "name": "helper",
                   "parentSubagentRunId": "sub"})
    tracker.apply({"type": "SUBAGENT_STARTED", "subagentRunId": "odd", "name": "helper",
                   "parentSubagentRunId": None})
    assert tracker.encoded() == b"a:sub:!a:child:sub!a:odd:"
    assert tracker.state().subagents == (("sub", None), ("child", "sub"), ("odd", None))
    tracker.apply({"type": "SUBAGENT_ERROR", "subagentRunId": "child"})
    tracker.apply({"type": "SUBAGENT_FINISHED", "subagentRunId": "odd"})
    assert tracker.encoded() == b"a:sub:"


def test_a_tool_call_waits_from_its_end_to_its_result() -> None:
    tracker = OpenTracker()
    tracker.apply(ev.tool_call_end("c1"))
    tracker.apply(ev.tool_call_end("c2"))
    assert tracker.encoded() == b"p:c1!p:c2"
    tracker.apply(ev.tool_call_result("m", "c1", "done"))
    assert tracker.state() == OpenState(pending=("c2",))


def test_closing_what_is_not_open_changes_nothing() -> None:
    """The tracker checks nothing (the guard did): a close of something it does not have,
    such as a result for a call of an earlier run, is not an error."""
    tracker = OpenTracker(OpenState(steps=((None, "s"),), texts=((None, "m"),)))
    for event in [ev.step_finished("other"), by("sub", ev.step_finished("s")),
                  ev.text_end("other"), ev.reasoning_end("x"), ev.reasoning_message_end("x"),
                  ev.tool_call_result("m", "old", "done"),
                  {"type": "SUBAGENT_FINISHED", "subagentRunId": "gone"},
                  {"type": "SUBAGENT_ERROR", "subagentRunId": "gone"}]:
        tracker.apply(event)
    assert tracker.encoded() == b"s::s!t::m"


def test_a_cursor_number_has_at_most_19_digits() -> None:
    assert parse_cursor("9" * 19).number == 10**19 - 1
    assert parse_cursor("1" * 19 + "~p:c").state == OpenState(pending=("c",))
    with pytest.raises(ValueError, match=r"^not an event id$"):
        parse_cursor("1" * 20)
    with pytest.raises(ValueError, match=r"^not an event id$"):
        parse_cursor("x~p:c")
    with pytest.raises(ValueError, match=r"^not an event id$"):
        parse_cursor("1~p:" + "é")
    with pytest.raises(ValueError, match=r"^not an event id$"):
        parse_cursor("1~p:" + "c" * (16 * 1024))


@pytest.mark.parametrize("item", ["q::x", "X::a", "s::a:b", "s:a", "p::a:b", "p", "t:x",
                                  "a::b:c:d"])
def test_items_of_an_unknown_kind_or_the_wrong_fields_are_refused(item: str) -> None:
    with pytest.raises(ValueError, match=rf"^not an open-state item: '{re.escape(item)}'$"):
        parse_cursor(f"1~p:c!{item}")


@pytest.mark.parametrize("field", ["%FF", "%C3", "%ED%A0%80"])
def test_fields_that_are_not_utf_8_are_refused(field: str) -> None:
    with pytest.raises(ValueError):
        parse_cursor(f"1~p:{field}")


def test_fields_must_be_in_their_one_encoded_form() -> None:
    """One open state has one text: a field encoded where it need not be, or left as it
    is where it must be encoded, is refused."""
    for item in ["p:%61", "p:a%2fb", "s::a b"]:
        with pytest.raises(ValueError, match=r"^not an open-state item"):
            parse_cursor(f"1~{item}")
    assert parse_cursor("1~p:a%2Fb").state == OpenState(pending=("a/b",))
