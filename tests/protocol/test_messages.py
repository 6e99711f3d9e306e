"""History merging, windows and the model's view: examples plus hypothesis properties."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from iobridge.protocol.messages import answered_call, call_ids, model_view, new_messages, window

Msg = dict[str, Any]


def user(mid: str) -> Msg:
    return {"id": mid, "role": "user", "content": mid}


def call(mid: str, *calls: str, content: str | None = None) -> Msg:
    message: Msg = {
        "id": mid,
        "role": "assistant",
        "toolCalls": [
            {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}}
            for c in calls
        ],
    }
    if content is not None:
        message["content"] = content
    return message


def result(mid: str, call_id: str) -> Msg:
    return {"id": mid, "role": "tool", "toolCallId": call_id, "content": "ok"}


def ids(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


# --- examples ---------------------------------------------------------------------------


def test_new_messages_whole_history_or_only_new_give_the_same_result() -> None:
    stored = [user("u1"), call("a1", "c1"), result("t1", "c1")]
    assert new_messages(stored, [*stored, user("u2")]) == [user("u2")]
    assert new_messages(stored, [user("u2")]) == [user("u2")]
    assert new_messages(stored, stored) == []


def test_new_messages_skips_answered_tool_calls_activity_and_repeats() -> None:
    stored = [call("a1", "c1"), result("t1", "c1")]
    incoming = [
        result("t1-again", "c1"),  # same call answered under a new message id
        {"id": "act", "role": "activity", "activityType": "x", "content": {}},
        {"id": "r1", "role": "reasoning", "content": "kept for replay"},
        user("u2"),
        user("u2"),
        {"role": "user", "content": "no id"},
        call("a2", "c2"),
        result("t2", "c2"),
        result("t2b", "c2"),
    ]
    assert ids(new_messages(stored, incoming)) == ["r1", "u2", "a2", "t2"]


def test_new_messages_does_not_mutate_or_alias_input() -> None:
    incoming = [user("u1")]
    out = new_messages([], incoming)
    out[0]["content"] = "changed"
    assert incoming == [user("u1")]


def test_window_keeps_tool_pairs_together() -> None:
    history = [user("u1"), call("a1", "c1", "c2"), result("t1", "c1"), result("t2", "c2")]
    history += [user("u2")]
    # The last 2 would start at t2; the window reaches back to a1.
    assert ids(window(history, 2)) == ["a1", "t1", "t2", "u2"]
    assert ids(window(history, 4)) == ["a1", "t1", "t2", "u2"]
    assert ids(window(history, 5)) == ids(history)
    assert window(history, 0) == []
    assert window([], 3) == []


def test_window_drops_orphaned_results_at_its_start() -> None:
    history = [result("t0", "ghost"), user("u1"), result("t9", "ghost2"), user("u2")]
    assert ids(window(history, 4)) == ["u1", "t9", "u2"]
    assert ids(window(history, 2)) == ["u2"]


def test_model_view_hides_activity_and_reasoning() -> None:
    history = [
        user("u1"),
        {"id": "r", "role": "reasoning", "content": "hmm"},
        {"id": "x", "role": "activity", "activityType": "plan", "content": {}},
        {"id": "a", "role": "assistant", "content": "hello"},
    ]
    assert ids(model_view(history)) == ["u1", "a"]



def test_model_view_returns_reasoning_only_with_a_provider_artefact() -> None:
    history = [
        user("u1"),
        {"id": "r1", "role": "reasoning", "content": "hmm", "encryptedValue": "sig"},
        {"id": "r2", "role": "reasoning", "content": "hmm", "encryptedValue": ""},
        {"id": "r3", "role": "reasoning", "content": "hmm", "encryptedValue": 5},
        {"id": "r4", "role": "reasoning", "content": "hmm", "encryptedvalue": "sig"},
        {"id": "r5", "role": "reasoning", "content": "hmm"},
        {"id": "x1", "role": "activity", "activityType": "plan", "content": {},
         "encryptedValue": "sig"},
        {"id": "a", "role": "assistant", "content": "hello"},
    ]
    assert ids(model_view(history)) == ["u1", "r1", "a"]


def test_model_view_drops_what_a_subagent_said_inside_a_run() -> None:
    history = [
        user("u1"),
        {"id": "s1", "role": "assistant", "content": "sub", "subagentRunId": "run-2"},
        {"id": "s2", "role": "user", "content": "to sub", "subagentRunId": "run-2"},
        {"id": "a", "role": "assistant", "content": "hello", "subagentrunid": "run-2"},
    ]
    assert ids(model_view(history)) == ["u1", "a"]

def test_model_view_repairs_pairs() -> None:
    history = [
        result("orphan", "nobody"),
        user("u1"),
        call("a1", "c1", "c2", content="let me check"),  # c2 never answered
        user("u-between"),
        result("t1", "c1"),  # moved right after a1
        result("t1-dup", "c1"),  # second answer dropped
        call("a2", "c3"),  # unanswered and not the last turn: dropped entirely
        user("u2"),
        call("a3", "c4", "c5"),  # last turn: pending calls kept
        result("t4", "c4"),
    ]
    view = model_view(history)
    assert ids(view) == ["u1", "a1", "t1", "u-between", "u2", "a3", "t4"]
    assert call_ids(view[1]) == ["c1"] and view[1]["content"] == "let me check"
    assert call_ids(view[-2]) == ["c4", "c5"]
    assert call_ids(history[2]) == ["c1", "c2"]  # input untouched


# --- properties ---------------------------------------------------------------------------

ROLES = ["user", "assistant", "tool", "system", "activity", "reasoning"]


@st.composite
def histories(draw: st.DrawFn) -> list[Msg]:
    """Plausible-but-messy histories: unique ids, calls, results, orphans, duplicates."""
    count = draw(st.integers(0, 25))
    out: list[Msg] = []
    calls: list[str] = []
    for i in range(count):
        role = draw(st.sampled_from(ROLES))
        mid = f"m{i}"
        if role == "assistant":
            n = draw(st.integers(0, 3))
            new = [f"c{i}-{k}" for k in range(n)]
            calls += new
            out.append(call(mid, *new) if new else {"id": mid, "role": role, "content": "a"})
        elif role == "tool":
            pool = [*calls, "ghost"] if calls else ["ghost"]
            out.append(result(mid, draw(st.sampled_from(pool))))
        else:
            out.append({"id": mid, "role": role, "content": "x"})
    return out


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_new_messages_properties(history: list[Msg], data: st.DataObject) -> None:
    split = data.draw(st.integers(0, len(history)))
    stored = new_messages([], history[:split])
    whole = new_messages(stored, history)
    only_new = new_messages(stored, history[split:])
    assert whole == only_new  # full-history and delta clients store the same thing
    merged = stored + whole
    assert len(set(ids(merged))) == len(merged)
    answered = [m["toolCallId"] for m in merged if m["role"] == "tool"]
    assert len(answered) == len(set(answered))
    assert all(m["role"] != "activity" for m in merged)
    assert new_messages(merged, history) == []  # idempotent


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(0, 30))
def test_window_properties(history: list[Msg], n: int) -> None:
    out = window(history, n)
    # A suffix of the history...
    assert out == history[len(history) - len(out) :]
    # ...at least as long as asked (less only for dropped leading orphans)...
    expected_min = min(n, len(history))
    leading_tools = 0
    for m in history[len(history) - expected_min :]:
        if m["role"] != "tool":
            break
        leading_tools += 1
    assert len(out) >= expected_min - leading_tools
    # ...never starting with a tool result, and every result's call is inside.
    if out:
        assert out[0]["role"] != "tool"
    issued = {c for m in out for c in call_ids(m)}
    everywhere = {c for m in history for c in call_ids(m)}
    for kept in out:
        if kept["role"] == "tool" and kept["toolCallId"] in everywhere:
            issuer = next(i for i, h in enumerate(history) if kept["toolCallId"] in call_ids(h))
            if issuer < history.index(dict(kept)):
                assert kept["toolCallId"] in issued


@settings(max_examples=150, deadline=None)
@given(histories())
def test_model_view_properties(history: list[Msg]) -> None:
    view = model_view(history)
    assert all(m["role"] not in ("activity", "reasoning") for m in view)
    last_turn = max((i for i, m in enumerate(view) if m["role"] != "tool"), default=-1)
    answered = [m["toolCallId"] for m in view if m["role"] == "tool"]
    assert len(answered) == len(set(answered))
    for i, m in enumerate(view):
        calls = call_ids(m)
        if m["role"] == "tool":
            # Directly after its assistant message (within that message's block of results).
            j = i - 1
            while view[j]["role"] == "tool":
                j -= 1
            assert m["toolCallId"] in call_ids(view[j])
        elif calls:
            followers = []
            for after in view[i + 1 :]:
                if after["role"] != "tool":
                    break
                followers.append(after["toolCallId"])
            if i != last_turn:
                assert followers == calls  # every call answered, in call order
            else:
                assert set(followers) <= set(calls)
    # Non-tool, visible messages keep their relative order.
    kept = [m["id"] for m in view if m["role"] != "tool"]
    original = [m["id"] for m in history if m["id"] in set(kept)]
    assert kept == original


def test_only_well_formed_call_ids_count() -> None:
    message = {"id": "a", "role": "assistant",
               "toolCalls": [{"id": "c1"}, {"id": 5}, {"function": {}}]}
    assert call_ids(message) == ["c1"]
    assert answered_call({"id": "t", "role": "tool", "toolCallId": 5}) is None
    assert answered_call({"id": "t", "role": "tool", "toolCallId": "c1"}) == "c1"


def test_an_earlier_turn_keeps_its_text_without_its_unanswered_calls() -> None:
    view = model_view([call("a1", "c1", content="let me look"), user("u2"), call("a2", "c2")])
    assert view == [{"id": "a1", "role": "assistant", "content": "let me look"},
                    {"id": "u2", "role": "user", "content": "u2"},
                    call("a2", "c2")]
