"""Example-based tests of each repair rule of the lifecycle guard."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agui_verify import verify_events
from iobridge.protocol import events as ev
from iobridge.protocol.guard import INVALID_TOOL_ARGS, GuardState, LifecycleGuard

START = {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0"}
FINISHED = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def _guard() -> LifecycleGuard:
    ids = itertools.count(1)
    return LifecycleGuard("t", "r", new_id=lambda: f"id{next(ids)}")


def run(*events: dict[str, Any], end: str = "finish") -> list[dict[str, Any]]:
    """Feed ``events`` then finish (or fail); the result must pass the checker."""
    guard = _guard()
    emitted: list[dict[str, Any]] = []
    for event in events:
        emitted += guard.feed(event)
    emitted += guard.finish() if end == "finish" else guard.fail("boom", "AGENT_ERROR")
    verify_events(emitted, thread_id="t", run_id="r")
    return emitted


def body(emitted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events between RUN_STARTED and the terminal event."""
    return emitted[1:-1]


def text(kind: str, mid: str = "m", **extra: Any) -> dict[str, Any]:
    return {"type": f"TEXT_MESSAGE_{kind}", "messageId": mid, **extra}


def call(kind: str, cid: str = "c", **extra: Any) -> dict[str, Any]:
    return {"type": f"TOOL_CALL_{kind}", "toolCallId": cid, **extra}


# -- run lifecycle ---------------------------------------------------------------------------


def test_start_emits_run_started_once_with_the_request_ids() -> None:
    guard = LifecycleGuard("t", "r", parent_run_id="p")
    assert guard.start() == [{**START, "parentRunId": "p"}]
    assert guard.start() == []
    assert guard.state is GuardState.RUNNING


def test_first_event_emits_run_started_before_it() -> None:
    guard = _guard()
    assert guard.feed(text("START")) == [START, text("START")]


def test_finish_on_an_idle_guard_is_a_complete_empty_run() -> None:
    guard = _guard()
    assert guard.finish(result={"a": 1}) == [START, {**FINISHED, "result": {"a": 1}}]
    assert guard.ended


def test_agent_run_started_is_dropped_and_ids_are_never_replaced() -> None:
    emitted = run({"type": "RUN_STARTED", "threadId": "x", "runId": "y"}, text("START"))
    assert emitted[0] == START
    assert [e["type"] for e in emitted].count("RUN_STARTED") == 1


def test_agent_run_finished_closes_everything_and_echoes_the_request_ids() -> None:
    guard = _guard()
    guard.feed(text("START"))
    guard.feed({"type": "STEP_STARTED", "stepName": "s"})
    out = guard.feed({"type": "RUN_FINISHED", "threadId": "x", "runId": "y", "result": 3,
                      "outcome": "not an object"})
    assert out == [text("END"), {"type": "STEP_FINISHED", "stepName": "s"},
                   {**FINISHED, "result": 3}]
    assert guard.ended and guard.feed(text("START", "m2")) == []


@pytest.mark.parametrize(
    ("message", "code", "expected"),
    [("broke", "E1", {"type": "RUN_ERROR", "message": "broke", "code": "E1"}),
     ("", None, {"type": "RUN_ERROR", "message": "The run failed.", "code": "AGENT_ERROR"}),
     (None, 5, {"type": "RUN_ERROR", "message": "The run failed.", "code": "AGENT_ERROR"})],
)
def test_agent_run_error_is_the_terminal_with_a_safe_message(
    message: Any, code: Any, expected: dict[str, Any]
) -> None:
    guard = _guard()
    guard.start()
    assert guard.feed({"type": "RUN_ERROR", "message": message, "code": code}) == [expected]
    assert guard.fail("again") == [] and guard.finish() == []


def test_fail_closes_open_sequences_innermost_first() -> None:
    emitted = run({"type": "STEP_STARTED", "stepName": "s"}, text("START"),
                  {"type": "REASONING_START", "messageId": "rs"},
                  {"type": "REASONING_MESSAGE_START", "messageId": "rm"}, end="fail")
    assert [e["type"] for e in emitted[-5:]] == [
        "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_END", "STEP_FINISHED",
        "RUN_ERROR"]
    assert emitted[-1] == {"type": "RUN_ERROR", "message": "boom", "code": "AGENT_ERROR"}


# -- text ------------------------------------------------------------------------------------


def test_empty_and_non_string_deltas_are_dropped() -> None:
    emitted = run(text("START"), text("CONTENT", delta=""), text("CONTENT", delta=None),
                  text("CONTENT", delta=4), text("CONTENT", delta="hi"), text("END"))
    assert body(emitted) == [text("START"), text("CONTENT", delta="hi"), text("END")]


def test_content_for_an_unopened_message_opens_it() -> None:
    emitted = run(text("CONTENT", delta="hi"))
    assert body(emitted) == [text("START", role="assistant"), text("CONTENT", delta="hi"),
                             text("END")]


def test_duplicate_start_and_unknown_end_are_dropped() -> None:
    emitted = run(text("START"), text("START"), text("END", "other"), text("END"), text("END"))
    assert body(emitted) == [text("START"), text("END")]


def test_text_chunks_expand_to_start_content_end() -> None:
    emitted = run({"type": "TEXT_MESSAGE_CHUNK", "messageId": "a", "delta": "x"},
                  {"type": "TEXT_MESSAGE_CHUNK", "delta": "y"},
                  {"type": "TEXT_MESSAGE_CHUNK", "messageId": "b", "delta": "z"})
    assert body(emitted) == [
        text("START", "a", role="assistant"), text("CONTENT", "a", delta="x"),
        text("CONTENT", "a", delta="y"), text("END", "a"),
        text("START", "b", role="assistant"), text("CONTENT", "b", delta="z"), text("END", "b")]


def test_a_chunk_without_any_message_id_is_dropped() -> None:
    assert body(run({"type": "TEXT_MESSAGE_CHUNK", "delta": "x"})) == []


# -- tool calls ------------------------------------------------------------------------------


def test_a_tool_call_is_held_back_until_its_end_then_released_whole() -> None:
    guard = _guard()
    guard.start()
    assert guard.feed(call("START", toolCallName="f")) == []
    assert guard.feed(call("ARGS", delta='{"a":')) == []
    assert guard.feed(call("ARGS", delta="1}")) == []
    assert guard.feed(call("END")) == [
        call("START", toolCallName="f"), call("ARGS", delta='{"a":'),
        call("ARGS", delta="1}"), call("END")]
    # Released once: a second END for the same call is dropped, and the run finishes clean.
    assert guard.feed(call("END")) == []
    assert [e["type"] for e in guard.finish()] == ["RUN_FINISHED"]


def test_a_call_without_arguments_gets_an_empty_object() -> None:
    emitted = run(call("START", toolCallName="f"), call("END"))
    assert body(emitted) == [call("START", toolCallName="f"), call("ARGS", delta="{}"),
                             call("END")]


@pytest.mark.parametrize("fragments", [["{"], ['{"a":1', "}}"], ["nope"], ["{}", "{}"]])
def test_invalid_arguments_end_the_run_and_the_call_is_never_shown(
    fragments: list[str],
) -> None:
    guard = _guard()
    emitted = guard.feed(text("START")) + guard.feed(call("START", toolCallName="f"))
    for fragment in fragments:
        emitted += guard.feed(call("ARGS", delta=fragment))
    emitted += guard.feed(call("END"))
    verify_events(emitted, thread_id="t", run_id="r")
    assert emitted[-1]["type"] == "RUN_ERROR" and emitted[-1]["code"] == INVALID_TOOL_ARGS
    assert not any(e["type"].startswith("TOOL_CALL") for e in emitted)
    assert emitted[-2] == text("END")
    assert guard.ended and guard.finish() == []


def test_calls_still_open_at_the_end_are_dropped() -> None:
    emitted = run(call("START", toolCallName="f"), call("ARGS", delta="{"))
    assert body(emitted) == []


@pytest.mark.parametrize(
    "start",
    [call("START"), call("START", toolCallName=""), call("START", toolCallName=3),
     {"type": "TOOL_CALL_START", "toolCallName": "f"}, call("START", "", toolCallName="f")],
)
def test_malformed_tool_call_starts_are_dropped(start: dict[str, Any]) -> None:
    assert body(run(start, call("ARGS", delta="{}"), call("END"))) == []


def test_a_tool_call_id_cannot_be_reused() -> None:
    emitted = run(call("START", toolCallName="f"), call("END"),
                  call("START", toolCallName="g"), call("END"))
    assert [e["type"] for e in body(emitted)].count("TOOL_CALL_START") == 1


def test_results_only_for_closed_calls_and_only_once() -> None:
    result = call("RESULT", messageId="res", content="ok", role="tool")
    emitted = run(call("RESULT", "unknown", messageId="x", content="1"),
                  call("START", toolCallName="f"), result, call("END"), result, result)
    assert body(emitted) == [call("START", toolCallName="f"), call("ARGS", delta="{}"),
                             call("END"), result]


def test_a_result_gets_text_content_and_a_message_id() -> None:
    emitted = run(call("START", toolCallName="f"), call("END"),
                  call("RESULT", content={"v": [1, None]}))
    assert emitted[-2] == call("RESULT", content='{"v":[1,null]}', messageId="id1")


def test_a_result_of_content_parts_passes_and_malformed_parts_become_text() -> None:
    parts = [{"type": "text", "text": "shot"},
             {"type": "image", "source": {"type": "url", "value": "https://x/s.png"}}]
    emitted = run(call("START", toolCallName="f"), call("END"),
                  call("RESULT", messageId="r", content=parts))
    assert emitted[-2] == call("RESULT", messageId="r", content=parts)
    broken = [{"type": "image", "source": {"type": "data", "value": "***"}}]
    emitted = run(call("START", toolCallName="f"), call("END"),
                  call("RESULT", messageId="r", content=broken))
    assert emitted[-2]["content"] == json.dumps(broken, separators=(",", ":"))


def test_a_result_for_a_call_of_an_earlier_run_only_when_allowed_and_once() -> None:
    result = call("RESULT", "old", messageId="r", content="ok")
    guard = _guard()
    assert guard.feed(dict(result))[1:] == []  # not a call of this run: dropped
    guard.allow_result("old")
    assert guard.feed(dict(result)) == [result]
    assert guard.feed(dict(result)) == []  # answered
    guard.feed(call("START", "open", toolCallName="f"))
    guard.allow_result("open")  # held back in this run: it must end first
    assert guard.feed(call("RESULT", "open", messageId="r2", content="x")) == []


def test_annotated_events_carry_the_metadata_and_run_scoped_ones_do_not() -> None:
    guard = _guard()
    guard.annotate({"trace": "t", "k": 1})
    emitted = guard.feed(text("START")) + guard.feed(text("CONTENT", delta="hi",
                                                          metadata={"k": 2, "own": True}))
    emitted += guard.feed({**FINISHED})
    assert emitted[0]["type"] == "RUN_STARTED" and "metadata" not in emitted[0]
    assert emitted[1] == text("START", metadata={"trace": "t", "k": 1})
    assert emitted[2] == text("CONTENT", delta="hi", metadata={"trace": "t", "k": 2,
                                                               "own": True})
    assert "metadata" not in emitted[-1]
    guard = _guard()
    guard.annotate({"a": 1})
    guard.annotate(None)
    assert "metadata" not in guard.feed(text("START"))[1]
    # Metadata that is not an object never reaches the client.
    assert "metadata" not in _guard().feed(text("START", metadata=[1]))[1]


def test_tool_chunks_expand_and_the_next_id_ends_the_previous_call() -> None:
    emitted = run({"type": "TOOL_CALL_CHUNK", "toolCallId": "a", "toolCallName": "f",
                   "parentMessageId": "m", "delta": '{"x":'},
                  {"type": "TOOL_CALL_CHUNK", "delta": "1}"},
                  {"type": "TOOL_CALL_CHUNK", "toolCallId": "b", "toolCallName": "g"},
                  call("END", "b"))
    assert body(emitted) == [
        call("START", "a", toolCallName="f", parentMessageId="m"),
        call("ARGS", "a", delta='{"x":'), call("ARGS", "a", delta="1}"), call("END", "a"),
        call("START", "b", toolCallName="g"), call("ARGS", "b", delta="{}"), call("END", "b")]


def test_a_chunk_that_ends_a_call_with_broken_arguments_ends_the_run() -> None:
    emitted = run({"type": "TOOL_CALL_CHUNK", "toolCallId": "a", "toolCallName": "f",
                   "delta": "{"},
                  {"type": "TOOL_CALL_CHUNK", "toolCallId": "b", "toolCallName": "g"})
    assert emitted[-1]["code"] == INVALID_TOOL_ARGS and len(emitted) == 2


# -- steps, reasoning, pass-through and cleaning ---------------------------------------------


def test_steps_duplicate_and_unknown_are_dropped() -> None:
    step = {"type": "STEP_STARTED", "stepName": "s"}
    done = {"type": "STEP_FINISHED", "stepName": "s"}
    emitted = run(step, step, {"type": "STEP_FINISHED", "stepName": "x"}, done, done)
    assert body(emitted) == [step, done]


def test_reasoning_end_closes_its_messages_and_content_opens_one() -> None:
    emitted = run({"type": "REASONING_START", "messageId": "s"},
                  {"type": "REASONING_MESSAGE_CONTENT", "messageId": "m", "delta": "hm"},
                  {"type": "REASONING_MESSAGE_CONTENT", "messageId": "m", "delta": ""},
                  {"type": "REASONING_END", "messageId": "s"})
    assert [e["type"] for e in body(emitted)] == [
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END"]
    assert body(emitted)[1]["role"] == "reasoning"


@pytest.mark.parametrize(
    "event", [{"messageId": "m"}, {"type": None}, {"type": 7}, {"type": ["TEXT_MESSAGE_START"]}]
)
def test_events_without_a_string_type_are_dropped(event: dict[str, Any]) -> None:
    assert body(run(event)) == []


def test_extensions_pass_through_and_unknown_types_ride_in_raw() -> None:
    events = [{"type": "CUSTOM", "name": "n", "value": {"a": None}},
              {"type": "RAW", "event": {"x": 1}, "source": "p"},
              {"type": "STATE_SNAPSHOT", "snapshot": {}}]
    newer = {"type": "SOMETHING_NEWER", "x": 1}
    assert body(run(*events, newer)) == [
        *events, {"type": "RAW", "event": newer, "source": "iobridge"}
    ]


def test_null_is_kept_where_it_is_a_required_value() -> None:
    emitted = body(run({"type": "CUSTOM", "name": "n", "value": None},
                       {"type": "CUSTOM", "name": "m"},
                       {"type": "STATE_SNAPSHOT", "snapshot": None, "metadata": None}))
    assert emitted == [{"type": "CUSTOM", "name": "n", "value": None},
                       {"type": "CUSTOM", "name": "m", "value": None},
                       {"type": "STATE_SNAPSHOT", "snapshot": None}]


def test_reasoning_chunks_are_expanded_and_closed() -> None:
    emitted = run({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "hm"},
                  {"type": "REASONING_MESSAGE_CHUNK", "delta": " ok"},
                  {"type": "REASONING_MESSAGE_CHUNK", "messageId": "s", "delta": "x"})
    assert [(e["type"], e.get("delta")) for e in body(emitted)] == [
        ("REASONING_MESSAGE_START", None), ("REASONING_MESSAGE_CONTENT", "hm"),
        ("REASONING_MESSAGE_CONTENT", " ok"), ("REASONING_MESSAGE_END", None),
        ("REASONING_MESSAGE_START", None), ("REASONING_MESSAGE_CONTENT", "x"),
        ("REASONING_MESSAGE_END", None),  # closed by the run's end
    ]
    assert emitted[-2] == {"type": "REASONING_MESSAGE_END", "messageId": "s"}


def test_nulls_and_non_integer_timestamps_are_removed_without_touching_the_input() -> None:
    event = text("START", role="assistant", metadata=None, name=None, timestamp=1.5)
    emitted = run(event, text("CONTENT", delta="x", timestamp=True),
                  text("END", timestamp=1_700_000_000_000))
    assert body(emitted) == [text("START", role="assistant"), text("CONTENT", delta="x"),
                             text("END", timestamp=1_700_000_000_000)]
    assert event["metadata"] is None and event["timestamp"] == 1.5


# -- repairs found by test_guard_properties (each once broke the client) ---------------

REPAIRED = [
    ({"type": ""}, "empty type is dropped"),
    ({"type": "CUSTOM", "value": 1}, "CUSTOM without a name is dropped"),
    (text("START", role="tool"), "an invalid TEXT_MESSAGE_START role becomes assistant"),
    ({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "role": "bogus", "delta": "x"},
     "an invalid TEXT_MESSAGE_CHUNK role becomes assistant"),
    (text("START", name=5), "a non-string TEXT_MESSAGE_START name is dropped"),
    ({"type": "RUN_FINISHED", "outcome": {"type": "bogus"}}, "an unknown outcome is dropped"),
    ({"type": "SUBAGENT_STARTED", "subagentRunId": "s", "name": "n"},
     "open subagents are finished before RUN_FINISHED"),
]


@pytest.mark.parametrize(("event", "why"), REPAIRED, ids=[why for _, why in REPAIRED])
def test_repaired_inputs_give_a_valid_run(event: dict[str, Any], why: str) -> None:
    run(event)


def test_a_bad_role_start_is_repaired_and_keeps_its_members() -> None:
    """Repaired, not dropped: the START (with its name) is on the wire, END closes it."""
    emitted = run(text("START", role="tool", name="helper"), text("END"))
    assert body(emitted) == [text("START", role="assistant", name="helper"), text("END")]
    emitted = run(text("START", role="system"), text("CONTENT", delta="x"), text("END"))
    assert body(emitted) == [text("START", role="system"), text("CONTENT", delta="x"),
                             text("END")]


def test_a_bad_role_chunk_is_repaired_exactly() -> None:
    emitted = run({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "role": "bogus", "delta": "x"})
    assert body(emitted) == [text("START", role="assistant"), text("CONTENT", delta="x"),
                             text("END")]


def test_the_text_fast_path_drops_empty_deltas() -> None:
    guard = _guard()
    guard.feed(text("START", role="assistant"))
    assert guard.feed_text_content("m", "") == []
    assert guard.feed_text_content("m", "a") == [text("CONTENT", delta="a")]
    assert guard.feed_text_content("unknown", "") == []


def test_unhashable_tool_call_id_in_args_is_dropped() -> None:
    emitted = run(call("ARGS", {"id": "c"}, delta="{}"))
    assert body(emitted) == []


def test_non_string_parent_message_id_is_removed() -> None:
    emitted = run(call("START", toolCallName="f", parentMessageId=5), call("END"))
    assert "parentMessageId" not in body(emitted)[0]


def test_result_role_is_always_tool() -> None:
    emitted = run(call("START", toolCallName="f"), call("END"),
                  call("RESULT", content="x", role="user"))
    assert body(emitted)[-1]["role"] == "tool"


def test_closed_message_id_is_never_reopened() -> None:
    emitted = run(text("START"), text("CONTENT", delta="a"), text("END"),
                  text("CONTENT", delta="b"), text("START"))
    assert [e["type"] for e in emitted].count("TEXT_MESSAGE_START") == 1
    assert [e.get("delta") for e in emitted if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["a"]


@pytest.mark.parametrize("role", ["user", "system", "developer", "assistant"])
def test_a_chunk_keeps_its_valid_role(role: str) -> None:
    emitted = run({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "role": role, "delta": "x"})
    assert body(emitted) == [text("START", role=role), text("CONTENT", delta="x"), text("END")]


VALID_OUTCOMES = [
    {"type": "success"},
    {"type": "success", "pendingToolCallIds": []},
    {"type": "success", "pendingToolCallIds": ["c1", "c2"]},
    {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "approve"}]},
    {"type": "cancelled"},
]
INVALID_OUTCOMES = [
    {"type": "bogus"},
    {"pendingToolCallIds": []},
    {"type": "success", "pendingToolCallIds": "c1"},
    {"type": "success", "pendingToolCallIds": ["c1", 2]},
]
#: Interrupt outcomes the client would reject: an interrupted run is never reported as a
#: success, so these end the run with RUN_ERROR INVALID_INTERRUPT.
INVALID_INTERRUPTS = [
    {"type": "interrupt"},
    {"type": "interrupt", "interrupts": []},
    {"type": "interrupt", "interrupts": [{"reason": "no id"}]},
    {"type": "interrupt", "interrupts": [{"id": 1, "reason": "r"}]},
    {"type": "interrupt", "interrupts": [{"id": "i1"}]},
    {"type": "interrupt", "interrupts": [{"id": "i1", "reason": ""}]},
    {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "a"}, {"id": "i1", "reason": "b"}]},
    {"type": "interrupt", "interrupts": ["i1"]},
]


@pytest.mark.parametrize("outcome", VALID_OUTCOMES)
def test_a_valid_outcome_reaches_run_finished(outcome: dict[str, Any]) -> None:
    guard = _guard()
    guard.start()
    assert guard.feed({"type": "RUN_FINISHED", "outcome": outcome}) == [
        {**FINISHED, "outcome": outcome}]


@pytest.mark.parametrize("outcome", INVALID_INTERRUPTS)
@pytest.mark.parametrize("via_finish", [False, True])
def test_a_malformed_interrupt_outcome_is_a_run_error(
    outcome: dict[str, Any], via_finish: bool
) -> None:
    guard = _guard()
    guard.start()
    guard.feed({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"})
    emitted = (
        guard.finish(outcome=outcome)
        if via_finish
        else guard.feed({"type": "RUN_FINISHED", "outcome": outcome})
    )
    assert [e["type"] for e in emitted] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert emitted[-1]["code"] == "INVALID_INTERRUPT"
    assert guard.ended


@pytest.mark.parametrize("outcome", INVALID_OUTCOMES)
def test_an_invalid_outcome_is_dropped_from_run_finished(outcome: dict[str, Any]) -> None:
    guard = _guard()
    guard.start()
    assert guard.feed({"type": "RUN_FINISHED", "result": "r", "outcome": outcome}) == [
        {**FINISHED, "result": "r"}]


def test_ids_of_exactly_the_longest_length_are_kept() -> None:
    """256 characters is a usable id (the stores' columns hold 256): the agent's ids are
    streamed as given; 257 is refused (the test below)."""
    longest = "m" * 256
    call_id = "c" * 256
    emitted = run(
        text("START", longest), text("CONTENT", longest, delta="kept"), text("END", longest),
        call("START", call_id, toolCallName="f", parentMessageId=longest), call("END", call_id),
        {"type": "TOOL_CALL_RESULT", "toolCallId": call_id, "messageId": "r" * 256,
         "content": "1"},
    )
    assert [e["type"] for e in body(emitted)] == [
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START",
        "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    start, content, end, call_start, *_, result = body(emitted)
    assert start["messageId"] == content["messageId"] == end["messageId"] == longest
    assert call_start["toolCallId"] == call_id and call_start["parentMessageId"] == longest
    assert result["toolCallId"] == call_id and result["messageId"] == "r" * 256


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 257, "\ud800"])
def test_ids_no_store_could_keep_are_refused_like_missing_ones(bad: str) -> None:
    """An agent's empty, non-printable or overlong message or tool-call id opens nothing
    (the thread would refuse the message after the client saw it); a tool result's id is
    replaced, a call's parentMessageId dropped."""
    emitted = run(
        text("START", bad), text("CONTENT", bad, delta="lost"), text("END", bad),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": bad, "delta": "lost"},
        call("START", bad, toolCallName="f"), call("ARGS", bad, delta="{}"), call("END", bad),
        {"type": "TOOL_CALL_CHUNK", "toolCallId": bad, "toolCallName": "f", "delta": "{}"},
        {"type": "REASONING_MESSAGE_START", "messageId": bad, "role": "reasoning"},
        call("START", "ok", toolCallName="f", parentMessageId=bad), call("END", "ok"),
        {"type": "TOOL_CALL_RESULT", "toolCallId": "ok", "messageId": bad, "content": "1"},
    )
    assert [e["type"] for e in body(emitted)] == [
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    start, *_, result = body(emitted)
    assert start["toolCallId"] == "ok"
    assert "parentMessageId" not in start
    assert result["messageId"] == "id1"


# -- subagents (AG-UI 1.0) ------------------------------------------------------------


def _sub(kind: str, run_id: str, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": kind, "subagentRunId": run_id, **fields}
    if kind == "SUBAGENT_STARTED":
        event.setdefault("name", "helper")
    return event


def test_subagent_work_outside_its_invocation_is_dropped() -> None:
    guard = LifecycleGuard("t", "r")
    guard.start()
    assert guard.feed({**ev.text_start("m1"), "subagentRunId": "s1"}) == []  # not started
    assert guard.feed(_sub("SUBAGENT_STARTED", "s1"))
    guard.feed(_sub("SUBAGENT_FINISHED", "s1"))
    assert guard.feed(_sub("SUBAGENT_STARTED", "s1")) == []  # an id is used once per run
    assert guard.feed({**ev.text_start("m2"), "subagentRunId": "s1"}) == []  # it ended
    assert guard.feed(_sub("SUBAGENT_STARTED", "s2", parentSubagentRunId="s1")) == []
    assert guard.feed(_sub("SUBAGENT_FINISHED", "s9")) == []


def test_continuations_keep_their_owner() -> None:
    guard = LifecycleGuard("t", "r")
    guard.start()
    guard.feed(_sub("SUBAGENT_STARTED", "s1"))
    guard.feed(_sub("SUBAGENT_STARTED", "s2"))
    assert guard.feed({**ev.text_start("m1"), "subagentRunId": "s1"})
    # Another subagent's content for it is dropped; an unattributed one gets its owner.
    assert guard.feed({**ev.text_content("m1", "x"), "subagentRunId": "s2"}) == []
    [content] = guard.feed(ev.text_content("m1", "y"))
    assert content["subagentRunId"] == "s1"
    [content] = guard.feed_text_content("m1", "z")  # the fast path too
    assert content["subagentRunId"] == "s1"
    # A call of s2 on s1's message loses that link (a call belongs to its message).
    guard.feed({**ev.tool_call_start("c1", "search", "m1"), "subagentRunId": "s2"})
    released = guard.feed(ev.tool_call_end("c1"))
    assert [e["type"] for e in released] == ["TOOL_CALL_START", "TOOL_CALL_ARGS",
                                             "TOOL_CALL_END"]
    assert "parentMessageId" not in released[0]
    assert {e["subagentRunId"] for e in released} == {"s2"}
    # Steps are per owner: the same name may be open for two of them.
    assert guard.feed(ev.step_started("plan"))
    assert guard.feed({**ev.step_started("plan"), "subagentRunId": "s1"})
    assert guard.feed({**ev.step_finished("plan"), "subagentRunId": "s2"}) == []


def test_ending_a_subagent_ends_its_children_and_closes_what_it_opened() -> None:
    guard = LifecycleGuard("t", "r")
    guard.start()
    guard.feed(_sub("SUBAGENT_STARTED", "s1"))
    guard.feed(_sub("SUBAGENT_STARTED", "s2", parentSubagentRunId="s1"))
    guard.feed(_sub("SUBAGENT_STARTED", "s3"))  # a sibling, left alone
    guard.feed({**ev.text_start("m1"), "subagentRunId": "s1"})
    guard.feed({**ev.text_start("m2"), "subagentRunId": "s2"})
    guard.feed({**ev.tool_call_start("c1", "search"), "subagentRunId": "s1"})  # held back
    out = guard.feed(_sub("SUBAGENT_FINISHED", "s1", outcome="done", result={"a": 1}))
    assert [(e["type"], e.get("messageId"), e["subagentRunId"]) for e in out] == [
        ("TEXT_MESSAGE_END", "m2", "s2"),
        ("SUBAGENT_FINISHED", None, "s2"),
        ("TEXT_MESSAGE_END", "m1", "s1"),
        ("SUBAGENT_FINISHED", None, "s1"),
    ]
    assert "outcome" not in out[-1] and out[-1]["result"] == {"a": 1}  # not a 1.0 outcome
    assert guard.feed({**ev.tool_call_end("c1"), "subagentRunId": "s1"}) == []
    tail = guard.fail("boom")
    assert [(e["type"], e.get("subagentRunId")) for e in tail] == [
        ("SUBAGENT_ERROR", "s3"), ("RUN_ERROR", None)]


def test_run_scoped_events_are_never_a_subagents() -> None:
    guard = LifecycleGuard("t", "r")
    guard.start()
    guard.feed(_sub("SUBAGENT_STARTED", "s1"))
    [snapshot] = guard.feed({**ev.messages_snapshot([]), "subagentRunId": "s1"})
    assert "subagentRunId" not in snapshot
    out = guard.feed({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                      "subagentRunId": "s1"})
    assert [e["type"] for e in out] == ["SUBAGENT_FINISHED", "RUN_FINISHED"]
    assert "subagentRunId" not in out[-1]
