"""A client's catch-up after a takeover (``runtime.following``): what closes its open state,
the snapshot, and which results of the continued run it is not sent again; the open state
after each event of a run followed from another replica."""

from __future__ import annotations

import orjson
from tests.agui_verify import verify_events

from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import Cursor, OpenState, number, parse_cursor
from iobridge.protocol.events import encode_event
from iobridge.runtime.following import RemoteTags, catch_up, skip_results

STARTED = ev.run_started("t", "r")
POINT = {"messages": [], "state": {"n": 1},
         "pending": [{"id": "c1", "name": "f", "at": 5}, {"id": "c2", "name": "f", "at": 9}]}


def test_a_client_with_a_text_open_gets_it_closed_a_snapshot_and_ids_after_its_own() -> None:
    state = OpenState(steps=((None, "s"),), texts=((None, "m"),), pending=("c2",))
    plan = catch_up(Cursor(12, state), state, started=STARTED, branches=[10],
                    point_seq=10, point=POINT, messages=[{"id": "u", "role": "user"}])
    kinds = [orjson.loads(d)["type"] for _, d in plan.prologue]
    assert kinds == ["TEXT_MESSAGE_END", "STEP_FINISHED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert [n for n, _ in plan.prologue] == [13, 14, 15, 16]
    # The ids made for it say what it still has open: a resume from any of them is a cursor.
    assert parse_cursor(f"14{plan.tags[0].decode()}").state == OpenState(
        steps=((None, "s"),), pending=("c2",))
    assert plan.tags[-1] == b"~p:c2"
    # c1 was announced before the cursor and before epoch 0 ended, and the client has no
    # result pending for it: it has its result. c2 it still waits for.
    assert plan.after == 10 and plan.skip == frozenset({"c1"})


def test_a_client_with_nothing_gets_run_started_and_every_result() -> None:
    plan = catch_up(Cursor(0, OpenState()), OpenState(), started=STARTED, branches=[10],
                    point_seq=10, point=POINT, messages=[])
    events = [orjson.loads(d) for _, d in plan.prologue]
    assert events[0]["type"] == "RUN_STARTED"
    assert plan.skip == frozenset()
    verify_events([*events, ev.run_finished("t", "r")], thread_id="t", run_id="r")


def test_the_results_it_has_are_dropped_from_the_continued_run_s_first_events() -> None:
    first = [(11, encode_event(ev.tool_call_result("x1", "c1", "a"))),
             (12, encode_event(ev.tool_call_result("x2", "c2", "b")))]
    rest = [(13, encode_event(ev.step_started("s"))),
            (14, encode_event(ev.tool_call_result("x3", "c1", "late")))]
    kept, seen = skip_results(first, frozenset({"c1"}))
    assert [s for s, _ in kept] == [12] and not seen
    kept, seen = skip_results(rest, frozenset({"c1"}))
    assert [s for s, _ in kept] == [13, 14] and seen  # only the results first are dropped
    assert number(1, 11) > 14


def entries(*events: dict[str, object]) -> list[tuple[int, bytes]]:
    return [(n, encode_event(e)) for n, e in enumerate(events, start=1)]


def test_a_remote_run_s_events_get_what_is_open_after_each() -> None:
    tags = RemoteTags(None)
    assert tags.tags(entries(ev.text_start("m"), ev.text_content("m", "hi"),
                             ev.tool_call_end("c"), ev.text_end("m"))) == [
        b"~t::m", b"~t::m", b"~t::m!p:c", b"~p:c"]
    # It goes on from where the last batch left it.
    assert tags.tags(entries(ev.custom("x", 1), ev.tool_call_result("mr", "c", "ok"))) == [
        b"~p:c", b""]


def test_a_remote_run_followed_from_a_cursor_starts_from_its_state() -> None:
    tags = RemoteTags(OpenState(steps=((None, "s"),)))
    assert tags.tags(entries(ev.custom("x", 1))) == [b"~s::s"]
    assert tags.tags(entries(ev.step_finished("s"), ev.custom("x", 2))) == [b"", b""]
    assert RemoteTags(OpenState()).tags(entries(ev.custom("x", 1))) == [b""]
