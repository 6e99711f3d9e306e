"""``Transcript``: the messages a run's events fold into, as a client would store them."""

from __future__ import annotations

from typing import Any

from iobridge.protocol.transcript import Transcript


def fold(*events: dict[str, Any], complete: bool = True) -> Transcript:
    transcript = Transcript()
    for event in events:
        transcript.apply(event)
    transcript.seal(complete=complete)
    return transcript


def text(kind: str, mid: str = "m", **extra: Any) -> dict[str, Any]:
    return {"type": f"TEXT_MESSAGE_{kind}", "messageId": mid, **extra}


def call(kind: str, cid: str = "c", **extra: Any) -> dict[str, Any]:
    return {"type": f"TOOL_CALL_{kind}", "toolCallId": cid, **extra}


def reasoning(kind: str, mid: str = "r", **extra: Any) -> dict[str, Any]:
    return {"type": f"REASONING_MESSAGE_{kind}", "messageId": mid, **extra}


def test_text_reasoning_tool_calls_and_results_in_order_of_appearance() -> None:
    transcript = fold(
        reasoning("START", role="reasoning"), reasoning("CONTENT", delta="think"),
        reasoning("CONTENT", delta="ing"), reasoning("END"),
        text("START", role="assistant"), text("CONTENT", delta="Hel"),
        text("CONTENT", delta="lo"), text("END"),
        call("START", toolCallName="f", parentMessageId="m"), call("ARGS", delta='{"a"'),
        call("ARGS", delta=": 1}"), call("END"),
        call("START", "c2", toolCallName="g"),
        {"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c", "content": "ok"},
        {"type": "STEP_STARTED", "stepName": "ignored"},
    )
    assert transcript.messages == [
        {"id": "r", "role": "reasoning", "content": "thinking"},
        {"id": "m", "role": "assistant", "content": "Hello", "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"id": "c2", "role": "assistant", "toolCalls": [
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}}]},
        {"id": "t1", "role": "tool", "toolCallId": "c", "content": "ok"},
    ]
    assert transcript.unanswered_calls() == ["c2"]


def test_an_empty_reasoning_message_keeps_empty_content_and_text_without_content_has_none() -> None:
    transcript = fold(reasoning("START"), reasoning("END"), text("START"), text("END"))
    assert transcript.messages == [{"id": "r", "role": "reasoning", "content": ""},
                                   {"id": "m", "role": "assistant"}]


def test_tool_result_errors_are_marked_on_the_latest_result_of_that_call() -> None:
    transcript = Transcript()
    transcript.apply(call("START", toolCallName="f"))
    transcript.apply({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c",
                      "content": "first"})
    transcript.apply({"type": "TOOL_CALL_RESULT", "messageId": "t2", "toolCallId": "c",
                      "content": "second"})
    transcript.apply({"type": "TOOL_CALL_RESULT", "messageId": "t3", "toolCallId": "other",
                      "content": "x"})
    transcript.mark_error("c", None)
    assert all("error" not in m for m in transcript.messages)
    transcript.mark_error("c", "bad arguments")
    transcript.mark_error("nobody", "ignored")
    errors = {m["id"]: m.get("error") for m in transcript.messages if m["role"] == "tool"}
    assert errors == {"t1": None, "t2": "bad arguments", "t3": None}
    assert transcript.unanswered_calls() == []


def test_an_error_result_answers_an_unanswered_call() -> None:
    transcript = Transcript()
    transcript.apply(call("START", toolCallName="f"))
    transcript.add_error_result("t9", "c", 'run "cancelled"')
    assert transcript.messages[-1] == {"id": "t9", "role": "tool", "toolCallId": "c",
                                       "content": '{"error":"run \\"cancelled\\""}',
                                       "error": 'run "cancelled"'}
    assert transcript.unanswered_calls() == []


def test_a_failed_run_drops_open_messages_but_keeps_open_calls_without_their_text() -> None:
    transcript = fold(
        text("START", "done"), text("CONTENT", "done", delta="kept"), text("END", "done"),
        text("START", "half"), text("CONTENT", "half", delta="cut"),
        text("START", "caller"), text("CONTENT", "caller", delta="lost"),
        call("START", toolCallName="f", parentMessageId="caller"),
        reasoning("START"), reasoning("CONTENT", delta="hm"),
        complete=False,
    )
    assert transcript.messages == [
        {"id": "done", "role": "assistant", "content": "kept"},
        {"id": "caller", "role": "assistant", "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]},
    ]


def test_a_completed_run_keeps_messages_left_open() -> None:
    transcript = fold(text("START"), text("CONTENT", delta="x"), complete=True)
    assert transcript.messages == [{"id": "m", "role": "assistant", "content": "x"}]


def test_nothing_is_folded_or_dropped_after_seal() -> None:
    transcript = fold(text("START"), text("CONTENT", delta="x"), complete=True)
    transcript.apply(text("CONTENT", delta="late"))
    transcript.apply(text("START", "m2"))
    transcript.seal(complete=False)
    assert transcript.messages == [{"id": "m", "role": "assistant", "content": "x"}]
