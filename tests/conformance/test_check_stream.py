"""The sans-IO parts of ``iobridge check``: SSE decoding, the stream rules, the reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from iobridge.conformance.check.http_checks import HttpTarget
from iobridge.conformance.check.report import (
    MAX_EVENT_CHARS,
    Outcome,
    Report,
    Result,
    to_json,
    to_junit,
)
from iobridge.conformance.check.stream import (
    GUARANTEES,
    Capture,
    SseDecoder,
    framing_violation,
    lifecycle_violations,
    null_violation,
)

START = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
FINISH = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def text(mid: str = "m", delta: str = "hi") -> list[dict[str, Any]]:
    return [{"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": delta},
            {"type": "TEXT_MESSAGE_END", "messageId": mid}]


def call(cid: str = "c", args: str = "{}", end: bool = True) -> list[dict[str, Any]]:
    events = [{"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "x"},
              {"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": args}]
    return events + ([{"type": "TOOL_CALL_END", "toolCallId": cid}] if end else [])


def test_a_valid_stream_breaks_no_guarantee() -> None:
    assert lifecycle_violations([START, *text(), *call(), FINISH]) == {}


@pytest.mark.parametrize(
    ("events", "rule", "index"),
    [
        ([*text(), FINISH], "L1.run-started-first", 0),
        ([START, *text()], "L1.terminal-last", 3),
        ([START, FINISH, *text()], "L1.nothing-after-terminal", 2),
        ([START, *text()[:2], FINISH], "L1.text-closed", 3),
        ([START, *call(end=False), FINISH], "L1.tool-call-closed", 3),
        ([START, *text(delta=""), FINISH], "L1.text-delta-non-empty", 2),
        ([START, *call(args='{"a": '), FINISH], "L1.tool-args-json", 3),
    ],
)
def test_each_guarantee_reports_its_first_offending_event(
    events: list[dict[str, Any]], rule: str, index: int
) -> None:
    found = lifecycle_violations(events)
    assert rule in found
    assert found[rule].index == index
    assert found[rule].event == events[index]


def test_the_guarantees_are_the_seven_of_the_spec() -> None:
    assert len(GUARANTEES) == 7
    assert len({rule for rule, _ in GUARANTEES}) == 7


def test_an_open_call_at_the_end_of_a_stream_without_terminal() -> None:
    found = lifecycle_violations([START, *call(end=False)])
    assert "ended with tool call c open" in found["L1.tool-call-closed"].detail


def test_decoder_joins_data_lines_skips_comments_and_reports_non_json() -> None:
    capture = Capture("t")
    decoder = SseDecoder(capture)
    out = decoder.feed(b': ping\n\nid: 1\ndata: {"type":\ndata: "RUN_STARTED"}\n\ndata: nope')
    assert out == [{"type": "RUN_STARTED"}]
    assert decoder.feed(b"\n\n") == []
    assert capture.undecodable == [(1, "nope")]


def test_crlf_is_decoded_but_reported_with_the_frame() -> None:
    raw = b'data: {"type":"RUN_STARTED"}\n\ndata: {"type":"RUN_FINISHED"}\r\n\r\n'
    capture = Capture("t")
    assert [e["type"] for e in SseDecoder(capture).feed(raw)] == ["RUN_STARTED", "RUN_FINISHED"]
    found = framing_violation(raw)
    assert found is not None and found.index == 1
    assert found.event.startswith('\ndata: {"type":"RUN_FINISHED"}\r\n')
    assert framing_violation(raw.replace(b"\r", b"")) is None


def test_nulls_are_found_in_members_and_snapshot_messages_not_in_free_form_values() -> None:
    assert null_violation([{"type": "TOOL_CALL_RESULT", "content": "x",
                            "result": {"a": None}}]) is None
    found = null_violation([START, {"type": "TEXT_MESSAGE_START", "messageId": "m",
                                    "name": None}])
    assert found is not None and found.index == 1 and "/name" in found.detail
    snapshot = {"type": "MESSAGES_SNAPSHOT", "messages": [
        {"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "type": None}]}]}
    found = null_violation([snapshot])
    assert found is not None and "/messages/0/toolCalls/0/type" in found.detail


def test_reports_clip_events_and_render_junit() -> None:
    report = Report("http://x")
    big = {"type": "RAW", "event": "x" * (3 * MAX_EVENT_CHARS)}
    report.add(Result("L1.a", "L1", "spec", "title", Outcome.FAILED, "why", big))
    report.add(Result("L2.b", "L2", "spec", "title", Outcome.SKIPPED, "no tool"))
    data = to_json(report)
    assert data["ok"] is False and data["counts"] == {"passed": 0, "failed": 1, "skipped": 1}
    assert len(data["results"][0]["event"]) == MAX_EVENT_CHARS + 1
    root = ET.fromstring(to_junit(report))
    (failure,) = root.iter("failure")
    assert failure.get("message") == "[spec] why"
    assert json.loads(failure.text or "")[:10] == '{"type": "'
    (skipped,) = root.iter("skipped")
    assert skipped.get("message") == "no tool"


@pytest.mark.parametrize(
    ("url", "prefix", "base"),
    [
        ("http://h:1", "/io-bridge", "http://h:1/io-bridge"),
        ("http://h:1/io-bridge/", "/io-bridge", "http://h:1/io-bridge"),
        ("http://h:1", "", "http://h:1"),
        ("http://h:1", "/", "http://h:1"),
        ("http://h:1/", "api/v1/", "http://h:1/api/v1"),
    ],
)
def test_the_prefix_is_added_once(url: str, prefix: str, base: str) -> None:
    assert HttpTarget(url=url, prefix=prefix).base == base


def test_decoder_reassembles_frames_split_anywhere_even_inside_crlf() -> None:
    raw = b'data: {"type":"RUN_STARTED"}\r\n\r\ndata: {"type":"RUN_FINISHED"}\r\n\r\n'
    for size in (1, 2, 3, 7):
        capture = Capture("t")
        decoder = SseDecoder(capture)
        got = [e for i in range(0, len(raw), size) for e in decoder.feed(raw[i : i + size])]
        assert [e["type"] for e in got] == ["RUN_STARTED", "RUN_FINISHED"], size
        assert capture.undecodable == []
