"""The lifecycle guard at its edges: the exact events of each bound, repair and terminal
error (messages and codes a client sees), token usage, the durable-run API, and what a
subagent's events carry and close."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from agui_verify import verify_events
from iobridge.protocol import events as ev
from iobridge.protocol.event_ids import OpenState
from iobridge.protocol.guard import (
    INVALID_EVENT,
    INVALID_INTERRUPT,
    INVALID_RESULT,
    INVALID_STATE_DELTA,
    INVALID_TOOL_ARGS,
    STATE_DELTA_TOO_LARGE,
    STATE_TOO_LARGE,
    GuardState,
    LifecycleGuard,
    closers,
)
from iobridge.protocol.run_limits import INTERRUPTS_TOO_LARGE, RUN_OUTPUT_TOO_LARGE, RunLimits

FINISHED = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
USAGE = [{"model": "m", "inputTokens": 3}]


def _started(**kwargs: Any) -> LifecycleGuard:
    ids = itertools.count(1)
    guard = LifecycleGuard("t", "r", new_id=lambda: f"id{next(ids)}", **kwargs)
    guard.start()
    return guard


def _limited(**limits: int) -> LifecycleGuard:
    return _started(limits=RunLimits(**limits))


def _nested(depth: int) -> Any:
    """A JSON value of exactly ``depth`` levels of arrays (``0``: a number)."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _sub(kind: str, run_id: str, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": f"SUBAGENT_{kind}", "subagentRunId": run_id, **fields}
    if kind == "STARTED":
        event.setdefault("name", "helper")
    return event


def _of(owner: str | None, event: dict[str, Any]) -> dict[str, Any]:
    return event if owner is None else {**event, "subagentRunId": owner}


# -- token usage -------------------------------------------------------------------------


def test_an_agents_run_finished_keeps_only_well_formed_usage_entries() -> None:
    guard = _started()
    usage = [
        "not an entry",
        {"provider": "p", "model": "m", "inputTokens": 3, "outputTokens": 0,
         "cachedInputTokens": ev.MAX_SAFE_INTEGER, "totalTokens": ev.MAX_SAFE_INTEGER + 1,
         "reasoningTokens": -1, "cacheWriteInputTokens": True, "bogus": 5, "other": "x"},
        {"inputTokens": "3", "outputTokens": 2.0, "provider": 7},  # no count left: dropped
        {"model": "only a label"},  # no count: dropped
        {"totalTokens": 1},
    ]
    assert guard.feed({"type": "RUN_FINISHED", "usage": usage}) == [{**FINISHED, "usage": [
        {"provider": "p", "model": "m", "inputTokens": 3, "outputTokens": 0,
         "cachedInputTokens": ev.MAX_SAFE_INTEGER},
        {"totalTokens": 1},
    ]}]


@pytest.mark.parametrize("usage", ["3 tokens", [], [{"model": "m"}], [{"inputTokens": -1}]])
def test_usage_with_no_entry_left_is_left_out(usage: Any) -> None:
    guard = _started()
    assert guard.feed({"type": "RUN_FINISHED", "usage": usage}) == [FINISHED]


def test_finish_and_fail_carry_the_callers_usage() -> None:
    assert _started().finish(result=1, usage=USAGE) == [
        {**FINISHED, "result": 1, "usage": USAGE}]
    assert _started().fail("broke", "E1", usage=USAGE) == [
        {"type": "RUN_ERROR", "message": "broke", "code": "E1", "usage": USAGE}]


# -- terminal events ---------------------------------------------------------------------


def test_a_malformed_interrupt_is_a_run_error_with_its_message_and_usage() -> None:
    guard = _started()
    assert guard.finish(outcome={"type": "interrupt", "interrupts": []}, usage=USAGE) == [{
        "type": "RUN_ERROR",
        "message": "The agent interrupted the run with malformed interrupts (1 to 100, each "
                   "with a unique id and a reason).",
        "code": INVALID_INTERRUPT,
        "usage": USAGE,
    }]


def test_interrupts_at_the_byte_bound_finish_and_one_byte_more_is_a_run_error() -> None:
    interrupts = [{"id": "i1", "reason": "approve"}]
    size = len(orjson.dumps(interrupts))
    outcome = {"type": "interrupt", "interrupts": interrupts}
    assert _limited(max_interrupt_bytes=size).finish(outcome=outcome) == [
        {**FINISHED, "outcome": outcome}]
    guard = _limited(max_interrupt_bytes=size - 1)
    guard.feed(ev.text_start("m"))
    assert guard.finish(outcome=outcome, usage=USAGE) == [ev.text_end("m"), {
        "type": "RUN_ERROR",
        "message": f"The agent's interrupts exceed {size - 1} bytes of JSON (or do not encode).",
        "code": INTERRUPTS_TOO_LARGE,
        "usage": USAGE,
    }]
    assert guard.ended


@pytest.mark.parametrize("payload", [{"not", "json"}, "deep"])
def test_interrupts_that_do_not_encode_within_the_depth_are_a_run_error(payload: Any) -> None:
    guard = _limited(max_json_depth=3)
    value = _nested(3) if payload == "deep" else payload  # the interrupts list adds 2 levels
    outcome = {"type": "interrupt", "interrupts": [{"id": "i", "reason": "r", "value": value}]}
    [error] = guard.finish(outcome=outcome)
    assert error["code"] == INTERRUPTS_TOO_LARGE


def test_a_result_at_the_depth_bound_finishes_and_one_level_more_is_invalid_result() -> None:
    """RUN_FINISHED is one level itself: its result may nest ``max_json_depth`` below it."""
    assert _limited(max_json_depth=3).finish(result=_nested(3)) == [
        {**FINISHED, "result": _nested(3)}]
    guard = _limited(max_json_depth=3)
    guard.feed(ev.step_started("s"))
    assert guard.finish(result=_nested(4), usage=USAGE) == [ev.step_finished("s"), {
        "type": "RUN_ERROR",
        "message": "The agent ended the run with a terminal event that cannot be encoded as "
                   "JSON (or whose result nests deeper than 3 levels).",
        "code": INVALID_RESULT,
        "usage": USAGE,
    }]


def test_a_result_that_is_not_json_is_invalid_result() -> None:
    [error] = _started().feed({"type": "RUN_FINISHED", "result": {1, 2}})
    assert error["code"] == INVALID_RESULT and "usage" not in error


# -- pass-through events -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "named"), [("CUSTOM", "CUSTOM event"), ("SOMETHING_NEWER", "an unknown event")]
)
def test_a_pass_through_event_one_level_too_deep_ends_the_run(kind: str, named: str) -> None:
    guard = _limited(max_json_depth=3)
    fits = {"type": kind, "name": "n", "value": _nested(3)}
    assert guard.feed(dict(fits)) == [
        fits if kind == "CUSTOM" else {"type": "RAW", "event": fits, "source": "iobridge"}]
    guard.feed(ev.text_start("m"))
    assert guard.feed({"type": kind, "name": "n", "value": _nested(4)}) == [
        ev.text_end("m"),
        {"type": "RUN_ERROR",
         "message": f"The agent produced {named} that cannot be encoded as JSON (or that "
                    "nests deeper than 3 levels).",
         "code": INVALID_EVENT},
    ]
    assert guard.ended


def test_null_optional_members_are_dropped_and_the_nullable_value_is_kept() -> None:
    guard = _started()
    assert guard.feed({"type": "CUSTOM", "name": "n", "value": None, "rawEvent": None}) == [
        {"type": "CUSTOM", "name": "n", "value": None}]
    assert guard.feed({"type": "RAW", "event": None, "source": None}) == [
        {"type": "RAW", "event": None}]


@pytest.mark.parametrize(("subtype", "kept"), [("tool-call", True), ("message", True),
                                               ("other", False), (None, False)])
def test_an_encrypted_value_needs_a_known_subtype(subtype: Any, kept: bool) -> None:
    event = {"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype, "entityId": "e",
             "encryptedValue": "v"}
    assert _started().feed(dict(event)) == ([event] if kept else [])


# -- tool-call arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [("{", "are not valid JSON"),
     ("[" * 1100 + "]" * 1100, "nest deeper than 3 levels"),  # past orjson's own limit
     (orjson.dumps(_nested(4)).decode(), "nest deeper than 3 levels")],
)
def test_arguments_that_cannot_be_released_end_the_run_with_why(
    arguments: str, problem: str
) -> None:
    guard = _limited(max_json_depth=3)
    guard.feed(ev.tool_call_start("c", "f"))
    guard.feed(ev.tool_call_args("c", arguments))
    assert guard.feed(ev.tool_call_end("c")) == [{
        "type": "RUN_ERROR",
        "message": f"The agent produced tool-call arguments that {problem}.",
        "code": INVALID_TOOL_ARGS,
    }]


def test_arguments_nesting_exactly_the_depth_are_released() -> None:
    guard = _limited(max_json_depth=3)
    guard.feed(ev.tool_call_start("c", "f"))
    guard.feed(ev.tool_call_args("c", "[[[1]]]"))
    assert [e["type"] for e in guard.feed(ev.tool_call_end("c"))] == [
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]


# -- output bytes ------------------------------------------------------------------------


def test_each_produced_message_counts_its_bytes() -> None:
    guard = _started()
    spent: list[int] = []
    for event in [
        _sub("STARTED", "s1"),  # 64 + 2
        ev.text_start("mm"),  # 64 + 2
        ev.text_content("mm", "é😀"),  # UTF-8: 2 + 4
        ev.reasoning_message_start("r"),  # 64 + 1
        ev.reasoning_message_content("r", "ab"),
        ev.tool_call_start("c", "fn"),  # 64 + 1 + 2
        ev.tool_call_args("c", "{}"),
        ev.tool_call_end("c"),
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x", "content": "ok"},
    ]:
        before = guard.output_bytes
        guard.feed(event)
        spent.append(guard.output_bytes - before)
    assert spent == [66, 66, 6, 65, 2, 67, 2, 0, 2]
    assert guard.output_bytes == 276


def test_a_result_of_content_parts_counts_their_json() -> None:
    parts = [{"type": "text", "text": "hi"}]
    guard = _started()
    guard.feed(ev.tool_call_start("c", "f"))
    guard.feed(ev.tool_call_end("c"))
    before = guard.output_bytes
    guard.feed({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x",
                "content": parts})
    assert guard.output_bytes - before == len(orjson.dumps(parts))


@pytest.mark.parametrize("fast", [False, True])
def test_the_last_byte_of_the_bound_is_usable_then_the_run_ends(fast: bool) -> None:
    guard = _limited(max_run_output_bytes=70)
    guard.feed(ev.text_start("m"))

    def content(delta: str) -> list[dict[str, Any]]:
        if fast:
            return guard.feed_text_content("m", delta)
        return guard.feed(ev.text_content("m", delta))

    assert content("abcé") == [ev.text_content("m", "abcé")]  # 65 + 5
    assert guard.output_bytes == 70
    assert content("x") == [ev.text_end("m"), {
        "type": "RUN_ERROR", "message": "The run produced more than 70 bytes of messages.",
        "code": RUN_OUTPUT_TOO_LARGE}]
    assert guard.ended and guard.nothing_open


def test_an_overspending_start_opens_nothing() -> None:
    guard = _limited(max_run_output_bytes=65)
    guard.feed(ev.text_start("m"))
    assert [e["type"] for e in guard.feed(ev.text_start("n"))] == [
        "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert guard.nothing_open and guard.open_state() == OpenState()


def test_a_reasoning_chunk_that_overspends_opens_nothing() -> None:
    guard = _limited(max_run_output_bytes=65)
    out = guard.feed({"type": "REASONING_MESSAGE_CHUNK", "messageId": "rr", "delta": "x"})
    assert [e["code"] for e in out] == [RUN_OUTPUT_TOO_LARGE]
    assert guard.nothing_open


# -- the text fast path ------------------------------------------------------------------


def test_the_fast_path_opens_an_unknown_message_like_feed() -> None:
    guard = _started()
    assert guard.feed_text_content("m", "hi") == [ev.text_start("m"), ev.text_content("m", "hi")]


def test_the_fast_path_drops_a_delta_that_is_not_a_string() -> None:
    guard = _started()
    guard.feed(ev.text_start("m"))
    assert guard.feed_text_content("m", 5) == []  # type: ignore[arg-type]
    assert guard.output_bytes == 65


def test_the_fast_path_annotates_like_feed() -> None:
    guard = _started()
    guard.feed(ev.text_start("m"))
    guard.annotate({"trace": "t"})
    assert guard.feed_text_content("m", "a") == [
        {**ev.text_content("m", "a"), "metadata": {"trace": "t"}}]


# -- state -------------------------------------------------------------------------------


def test_a_snapshot_that_is_not_json_ends_the_run() -> None:
    guard = _started(state={"a": 1})
    assert guard.feed({"type": "STATE_SNAPSHOT", "snapshot": {"a": {1}}}) == [{
        "type": "RUN_ERROR", "message": "The agent produced a state snapshot that is not JSON.",
        "code": INVALID_STATE_DELTA}]
    assert guard.shared_state == {"a": 1}


def test_a_snapshot_one_level_too_deep_is_state_too_large() -> None:
    guard = _started(limits=RunLimits(max_json_depth=3), max_state_bytes=100)
    assert guard.feed({"type": "STATE_SNAPSHOT", "snapshot": _nested(3)}) == [
        {"type": "STATE_SNAPSHOT", "snapshot": _nested(3)}]
    assert guard.feed({"type": "STATE_SNAPSHOT", "snapshot": _nested(4)}) == [{
        "type": "RUN_ERROR",
        "message": "The shared state would exceed 100 bytes or nest deeper than 3 levels.",
        "code": STATE_TOO_LARGE}]
    assert guard.shared_state == _nested(3)


def test_a_delta_one_level_too_deep_is_state_too_large() -> None:
    guard = _started(limits=RunLimits(max_json_depth=3), state={"a": [1]})
    ok = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a/0", "value": [2]}]}
    assert guard.feed(ok) == [ok]
    deep = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a/0", "value": [[2]]}]}
    [error] = guard.feed(deep)
    assert error["code"] == STATE_TOO_LARGE
    assert guard.shared_state == {"a": [[2], 1]}


def test_a_delta_of_too_many_operations_is_state_delta_too_large() -> None:
    guard = _started(limits=RunLimits(max_state_patch_ops=2))
    op = {"op": "add", "path": "/a", "value": 1}
    assert guard.feed({"type": "STATE_DELTA", "delta": [op, op]})
    guard.feed(ev.text_start("m"))
    assert guard.feed({"type": "STATE_DELTA", "delta": [op, op, op]}) == [ev.text_end("m"), {
        "type": "RUN_ERROR",
        "message": "The agent produced a state delta too large: the patch has 3 operations; "
                   "at most 2 are allowed",
        "code": STATE_DELTA_TOO_LARGE}]


def test_why_a_delta_does_not_apply_is_cut_at_200_characters() -> None:
    prefix = "The agent produced a state delta that does not apply to the current state: "
    guard = _started(state={})
    [error] = guard.feed({"type": "STATE_DELTA",
                          "delta": [{"op": "remove", "path": "/missing"}]})
    assert error == {"type": "RUN_ERROR", "message": prefix + "no member 'missing'",
                     "code": INVALID_STATE_DELTA}
    guard = _started(state={})
    [error] = guard.feed({"type": "STATE_DELTA",
                          "delta": [{"op": "remove", "path": "/" + "\x01" * 100}]})
    assert error["message"] == prefix + ("no member '" + "\\x01" * 100)[:200]


def test_the_tracked_state_size_bounds_later_deltas() -> None:
    guard = _started(state={}, max_state_bytes=12)
    guard.feed({"type": "STATE_SNAPSHOT", "snapshot": {"a": "xxxx"}})  # 12 bytes
    [error] = guard.feed({"type": "STATE_DELTA",
                          "delta": [{"op": "add", "path": "/b", "value": 1}]})
    assert error["code"] == STATE_TOO_LARGE


# -- repairs -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", 5])
def test_a_step_needs_a_non_empty_string_name(name: Any) -> None:
    assert _started().feed({"type": "STEP_STARTED", "stepName": name}) == []


def test_reasoning_ends_and_duplicate_starts_for_nothing_open_are_dropped() -> None:
    guard = _started()
    assert guard.feed(ev.reasoning_end("s")) == []
    assert guard.feed(ev.reasoning_message_end("m")) == []
    assert guard.feed(ev.reasoning_start("s")) == [ev.reasoning_start("s")]
    assert guard.feed(ev.reasoning_start("s")) == []


def test_an_explicit_end_stops_the_chunks_of_that_message_only() -> None:
    guard = _started()
    guard.feed({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "a"})
    guard.feed(ev.reasoning_message_end("r"))
    assert guard.feed({"type": "REASONING_MESSAGE_CHUNK", "delta": "b"}) == []
    guard.feed({"type": "TEXT_MESSAGE_CHUNK", "messageId": "a", "delta": "x"})
    guard.feed(ev.text_start("b"))
    guard.feed(ev.text_end("b"))
    assert guard.feed({"type": "TEXT_MESSAGE_CHUNK", "delta": "y"}) == [
        ev.text_content("a", "y")]
    guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f",
                "delta": '{"a":'})
    guard.feed(ev.tool_call_start("c2", "g"))
    guard.feed(ev.tool_call_end("c2"))
    guard.feed({"type": "TOOL_CALL_CHUNK", "delta": "1}"})
    assert guard.feed(ev.tool_call_end("c1")) == [
        ev.tool_call_start("c1", "f"), ev.tool_call_args("c1", '{"a":'),
        ev.tool_call_args("c1", "1}"), ev.tool_call_end("c1")]


def test_a_reasoning_chunk_without_a_delta_opens_its_message() -> None:
    guard = _started()
    assert guard.feed({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r"}) == [
        ev.reasoning_message_start("r")]


def test_a_tool_chunk_without_a_name_starts_nothing() -> None:
    guard = _started()
    assert guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "delta": "{}"}) == []
    assert guard.feed(ev.tool_call_end("c")) == []
    assert guard.output_bytes == 0


@pytest.mark.parametrize("bad", ["a\nb", "x" * 257])
def test_a_tool_call_start_with_an_unusable_id_holds_nothing(bad: str) -> None:
    guard = _started()
    assert guard.feed(ev.tool_call_start(bad, "f")) == []
    assert guard.output_bytes == 0


def test_a_result_that_is_not_json_becomes_text() -> None:
    guard = _started()
    guard.feed(ev.tool_call_start("c", "f"))
    guard.feed(ev.tool_call_end("c"))
    circular: dict[str, Any] = {}
    circular["self"] = circular
    assert guard.feed({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x",
                       "content": circular}) == [
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x",
         "content": "[a tool result that is not JSON]"}]


def test_a_result_with_python_values_is_written_with_their_text() -> None:
    guard = _started()
    guard.feed(ev.tool_call_start("c", "f"))
    guard.feed(ev.tool_call_end("c"))
    [result] = guard.feed({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x",
                           "content": {"when": frozenset({1})}})
    assert result["content"] == '{"when":"frozenset({1})"}'


# -- durable runs ------------------------------------------------------------------------


def test_prime_takes_owned_entries_and_goes_on_running() -> None:
    state = OpenState(
        steps=(("s1", "plan"), (None, "act")),
        texts=(("s1", "m1"), (None, "m2")),
        reasoning_messages=(("s1", "r1"), (None, "r2")),
        reasoning_spans=(("s1", "R1"), (None, "R2")),
        subagents=(("s1", None),),
        pending=("c",),
    )
    guard = LifecycleGuard("t", "r")
    guard.prime(state)
    assert guard.state is GuardState.RUNNING
    assert guard.open_state() == state
    # An unattributed continuation takes its owner.
    assert guard.feed(ev.text_content("m1", "x")) == [_of("s1", ev.text_content("m1", "x"))]
    assert guard.feed(ev.reasoning_message_content("r1", "y")) == [
        _of("s1", ev.reasoning_message_content("r1", "y"))]


def test_closers_end_subagents_with_an_error() -> None:
    state = OpenState(texts=(("s1", "m1"),), subagents=(("s1", None),), pending=("c",))
    out = closers(state)
    assert out == [
        _of("s1", ev.text_end("m1")),
        {"type": "SUBAGENT_ERROR", "subagentRunId": "s1",
         "message": "The run ended before the subagent finished."},
    ]


def test_close_steps_finishes_only_the_runs_own_steps_innermost_first() -> None:
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(steps=((None, "a"), ("s1", "a"), (None, "b")),
                          subagents=(("s1", None),)))
    assert guard.close_steps() == [ev.step_finished("b"), ev.step_finished("a")]
    assert guard.open_steps == [("s1", "a")]
    assert guard.close_steps() == []


def test_continue_from_goes_on_with_its_bytes_and_pending_calls() -> None:
    guard = LifecycleGuard("t", "r", limits=RunLimits(max_run_output_bytes=100))
    guard.continue_from(output_bytes=90, pending=["c"])
    assert guard.state is GuardState.RUNNING
    assert guard.output_bytes == 90
    assert guard.open_state() == OpenState(pending=("c",))
    result = {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x", "content": "ok"}
    assert guard.feed(dict(result)) == [result]  # no RUN_STARTED: it was emitted before
    assert guard.output_bytes == 92
    assert [e["code"] for e in guard.feed(ev.text_start("m"))] == [RUN_OUTPUT_TOO_LARGE]


# -- subagents ---------------------------------------------------------------------------


def test_a_subagents_chunks_and_content_are_attributed_to_it() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    out = guard.feed({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "a",
                      "subagentRunId": "s1"})
    out += guard.feed({"type": "TEXT_MESSAGE_CHUNK", "delta": "b", "subagentRunId": "s1"})
    out += guard.feed(_of("s1", ev.text_content("m2", "c")))
    out += guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "f",
                       "delta": "{", "subagentRunId": "s1"})
    out += guard.feed({"type": "TOOL_CALL_CHUNK", "delta": "}", "subagentRunId": "s1"})
    out += guard.feed(_of("s1", ev.tool_call_end("c")))
    assert out == [_of("s1", e) for e in [
        ev.text_start("m"), ev.text_content("m", "a"), ev.text_content("m", "b"),
        ev.text_start("m2"), ev.text_content("m2", "c"),
        ev.tool_call_start("c", "f"), ev.tool_call_args("c", "{"), ev.tool_call_args("c", "}"),
        ev.tool_call_end("c"),
    ]]
    result = {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x", "content": "1"}
    assert guard.feed(_of("s1", result)) == [_of("s1", result)]


def test_another_subagents_chunks_do_not_continue_a_message_or_call() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    guard.feed(_sub("STARTED", "s2"))
    guard.feed({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "a",
                "subagentRunId": "s1"})
    assert guard.feed({"type": "TEXT_MESSAGE_CHUNK", "delta": "b", "subagentRunId": "s2"}) == []
    guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "f",
                "delta": "{", "subagentRunId": "s1"})
    guard.feed({"type": "TOOL_CALL_CHUNK", "delta": '"x":1', "subagentRunId": "s2"})
    guard.feed({"type": "TOOL_CALL_CHUNK", "delta": "}", "subagentRunId": "s1"})
    assert [e.get("delta") for e in guard.feed(ev.tool_call_end("c"))] == [None, "{", "}", None]


def _primed() -> LifecycleGuard:
    """A guard that goes on from a point where subagents s1 and s2 have reasoning open."""
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(
        reasoning_messages=(("s1", "r"), (None, "own"), ("s1", "r2")),
        reasoning_spans=(("s1", "R"),),
        subagents=(("s1", None), ("s2", None)),
    ))
    return guard


def test_a_subagents_reasoning_is_continued_and_ended_only_in_its_name() -> None:
    guard = _primed()
    assert guard.feed(_of("s2", ev.reasoning_message_content("r", "x"))) == []
    assert guard.feed({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "x",
                       "subagentRunId": "s2"}) == []
    assert guard.feed(_of("s1", ev.reasoning_message_content("r", "y"))) == [
        _of("s1", ev.reasoning_message_content("r", "y"))]
    assert guard.feed(_of("s2", ev.reasoning_message_end("r"))) == []
    assert guard.feed(_of("s1", ev.reasoning_message_end("r"))) == [
        _of("s1", ev.reasoning_message_end("r"))]
    assert guard.feed(_of("s2", ev.reasoning_end("R"))) == []
    # The span's end closes its owner's messages, not the run's own.
    assert guard.feed(_of("s1", ev.reasoning_end("R"))) == [
        _of("s1", ev.reasoning_message_end("r2")), _of("s1", ev.reasoning_end("R"))]
    assert guard.open_state() == OpenState(reasoning_messages=((None, "own"),),
                                           subagents=(("s1", None), ("s2", None)))


def test_a_failed_run_closes_a_subagents_sequences_in_its_name() -> None:
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(steps=(("s1", "plan"),), texts=(("s1", "m"),),
                          reasoning_messages=(("s1", "r"),), reasoning_spans=(("s1", "R"),),
                          subagents=(("s1", None),)))
    assert guard.fail("boom", "E") == [
        _of("s1", ev.reasoning_message_end("r")), _of("s1", ev.reasoning_end("R")),
        _of("s1", ev.text_end("m")), _of("s1", ev.step_finished("plan")),
        {"type": "SUBAGENT_ERROR", "subagentRunId": "s1",
         "message": "The run ended before the subagent finished."},
        {"type": "RUN_ERROR", "message": "boom", "code": "E"},
    ]


def test_ending_a_subagent_closes_only_what_it_opened() -> None:
    owners = ("s1", "s2", None)
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(
        steps=tuple((owner, f"plan-{owner}") for owner in owners),
        texts=tuple((owner, f"m-{owner}") for owner in owners),
        reasoning_messages=tuple((owner, f"r-{owner}") for owner in owners),
        reasoning_spans=tuple((owner, f"R-{owner}") for owner in owners),
        subagents=(("s1", None), ("s2", None)),
    ))
    guard.feed(_of("s1", ev.tool_call_start("c1", "f")))  # held back
    guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "g",
                "delta": '{"a":', "subagentRunId": "s2"})
    assert guard.feed(_sub("FINISHED", "s1")) == [
        _of("s1", ev.reasoning_message_end("r-s1")), _of("s1", ev.reasoning_end("R-s1")),
        _of("s1", ev.text_end("m-s1")), _of("s1", ev.step_finished("plan-s1")),
        _sub("FINISHED", "s1"),
    ]
    assert guard.open_state() == OpenState(
        steps=(("s2", "plan-s2"), (None, "plan-None")),
        texts=(("s2", "m-s2"), (None, "m-None")),
        reasoning_messages=(("s2", "r-s2"), (None, "r-None")),
        reasoning_spans=(("s2", "R-s2"), (None, "R-None")),
        subagents=(("s2", None),),
    )
    assert guard.feed(ev.tool_call_end("c1")) == []  # dropped with its subagent
    guard.feed({"type": "TOOL_CALL_CHUNK", "delta": "1}", "subagentRunId": "s2"})
    assert [e.get("delta") for e in guard.feed(ev.tool_call_end("c2"))] == [
        None, '{"a":', "1}", None]


def test_ending_a_subagent_closes_its_reasoning_messages_outside_a_span() -> None:
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(reasoning_messages=(("s1", "r1"), ("s2", "r2")),
                          subagents=(("s1", None), ("s2", None))))
    assert guard.feed(_sub("FINISHED", "s1")) == [
        _of("s1", ev.reasoning_message_end("r1")), _sub("FINISHED", "s1")]


def test_ending_a_subagent_drops_its_chunked_call() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "f",
                "delta": "{", "subagentRunId": "s1"})
    guard.feed(_sub("FINISHED", "s1"))
    assert guard.feed({"type": "TOOL_CALL_CHUNK", "delta": "}"}) == []
    assert guard.feed({"type": "TOOL_CALL_CHUNK", "toolCallId": "d", "toolCallName": "g"}) == []
    assert guard.feed(ev.tool_call_end("d")) == [
        ev.tool_call_start("d", "g"), ev.tool_call_args("d", "{}"), ev.tool_call_end("d")]


def test_a_subagent_opens_its_own_reasoning() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    assert guard.feed(_of("s1", ev.reasoning_start("R"))) == [_of("s1", ev.reasoning_start("R"))]
    assert guard.feed({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "x",
                       "subagentRunId": "s1"}) == [
        _of("s1", ev.reasoning_message_start("r")),
        _of("s1", ev.reasoning_message_content("r", "x"))]
    assert guard.open_state().reasoning_messages == (("s1", "r"),)


def test_a_subagent_end_carries_only_valid_members() -> None:
    guard = _started(limits=RunLimits(max_json_depth=3))
    for run_id in ("s1", "s2", "s3"):
        guard.feed(_sub("STARTED", run_id))
    assert guard.feed(_sub("FINISHED", "s1", result=_nested(4))) == [_sub("FINISHED", "s1")]
    assert guard.feed(_sub("FINISHED", "s2", result=_nested(3))) == [
        _sub("FINISHED", "s2", result=_nested(3))]
    assert guard.feed(_sub("ERROR", "s3", message="m", code=5)) == [
        _sub("ERROR", "s3", message="m")]
    guard.feed(_sub("STARTED", "s4"))
    assert guard.feed(_sub("ERROR", "s4", message="m", code="E")) == [
        _sub("ERROR", "s4", message="m", code="E")]


@pytest.mark.parametrize(
    ("outcome", "kept"),
    [({"type": "success"}, True),
     ({"type": "suspended"}, True),
     ({"type": "suspended", "interruptIds": ["i1", "i2"]}, True),
     ({"type": "suspended", "interruptIds": []}, True),
     ({"type": "suspended", "interruptIds": ["i1", 2]}, False),
     ({"type": "suspended", "interruptIds": "i1"}, False),
     ({"type": "other"}, False),
     ({"interruptIds": ["i1"]}, False),
     ("success", False)],
)
def test_a_subagent_outcome_is_kept_only_in_an_ag_ui_shape(outcome: Any, kept: bool) -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    expected = _sub("FINISHED", "s1", outcome=outcome) if kept else _sub("FINISHED", "s1")
    assert guard.feed(_sub("FINISHED", "s1", outcome=outcome)) == [expected]


def test_a_subagent_start_keeps_string_links_and_drops_others() -> None:
    guard = _started()
    links = {"description": "d", "parentToolCallId": "c", "parentMessageId": "m"}
    assert guard.feed(_sub("STARTED", "s1", **links)) == [_sub("STARTED", "s1", **links)]
    assert guard.feed(_sub("STARTED", "s1", **links)) == []  # open already
    assert guard.feed(_sub("STARTED", "s2", description=1, parentToolCallId=2,
                           parentMessageId=3)) == [_sub("STARTED", "s2")]
    assert guard.open_state().subagents == (("s1", None), ("s2", None))


def test_a_subagents_call_keeps_a_link_to_its_own_or_an_unknown_message() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    guard.feed(_of("s1", ev.text_start("m1")))
    guard.feed(_of("s1", ev.tool_call_start("c1", "f", "m1")))
    guard.feed(_of("s1", ev.tool_call_start("c2", "f", "elsewhere")))
    assert guard.feed(ev.tool_call_end("c1"))[0] == _of("s1", ev.tool_call_start("c1", "f", "m1"))
    assert guard.feed(ev.tool_call_end("c2"))[0] == _of(
        "s1", ev.tool_call_start("c2", "f", "elsewhere"))


def test_a_result_for_a_call_of_an_ended_subagent_is_dropped() -> None:
    guard = _started()
    guard.feed(_sub("STARTED", "s1"))
    guard.feed(_of("s1", ev.tool_call_start("c", "f")))
    guard.feed(ev.tool_call_end("c"))
    guard.feed(_sub("FINISHED", "s1"))
    assert guard.feed({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "x",
                       "content": "late"}) == []


def test_a_subagent_run_is_valid_for_the_client() -> None:
    guard = _started()
    emitted = [ev.run_started("t", "r")]
    for event in (_sub("STARTED", "s1"), _of("s1", ev.text_content("m", "x")),
                  {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "d",
                   "subagentRunId": "s1"}):
        emitted += guard.feed(event)
    emitted += guard.finish()
    verify_events(emitted, thread_id="t", run_id="r")


@pytest.mark.parametrize("parent", [["s1"], {"id": "s1"}])
def test_an_unhashable_parent_subagent_id_is_dropped(parent: Any) -> None:
    guard = _started()
    assert guard.feed(_sub("STARTED", "s2", parentSubagentRunId=parent)) == []


@pytest.mark.parametrize(
    "event",
    [{"type": "REASONING_MESSAGE_CONTENT", "messageId": ["x"], "delta": "d"},
     {"type": "REASONING_MESSAGE_START", "messageId": {"id": "x"}},
     {"type": "REASONING_MESSAGE_END", "messageId": ["x"]},
     {"type": "REASONING_START", "messageId": ["x"]},
     {"type": "REASONING_END", "messageId": ["x"]},
     {"type": "REASONING_MESSAGE_CHUNK", "messageId": ["x"], "delta": "d"},
     {"type": "TEXT_MESSAGE_CONTENT", "messageId": ["x"], "delta": "d"},
     {"type": "TEXT_MESSAGE_END", "messageId": ["x"]},
     {"type": "TEXT_MESSAGE_CHUNK", "messageId": ["x"], "delta": "d"},
     {"type": "TOOL_CALL_START", "toolCallId": ["x"], "toolCallName": "f"},
     {"type": "TOOL_CALL_END", "toolCallId": ["x"]},
     {"type": "TOOL_CALL_CHUNK", "toolCallId": ["x"], "toolCallName": "f"},
     {"type": "TOOL_CALL_RESULT", "toolCallId": ["x"], "content": "x"},
     {"type": "STEP_STARTED", "stepName": ["x"]}],
)
def test_an_unhashable_id_is_dropped(event: dict[str, Any]) -> None:
    guard = _started()
    assert guard.feed(event) == []
    assert guard.nothing_open and guard.output_bytes == 0


def test_a_reasoning_message_id_stays_its_owners() -> None:
    """Reasoning ids (unlike text ids) may open again: an unattributed start is the
    owner's, like any continuation."""
    guard = LifecycleGuard("t", "r")
    guard.prime(OpenState(reasoning_messages=(("s1", "r"),), reasoning_spans=(("s1", "R"),),
                          subagents=(("s1", None),)))
    guard.feed(_of("s1", ev.reasoning_message_end("r")))
    guard.feed(_of("s1", ev.reasoning_end("R")))
    assert guard.feed(ev.reasoning_message_start("r")) == [
        _of("s1", ev.reasoning_message_start("r"))]
    assert guard.feed(ev.reasoning_start("R")) == [_of("s1", ev.reasoning_start("R"))]
    assert guard.open_state().reasoning_messages == (("s1", "r"),)
