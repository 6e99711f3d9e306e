"""The client's SSE reader: framing of any server, comments, and the per-event byte limit."""

from __future__ import annotations

import pytest
from ag_ui.core import RawEvent, RunStartedEvent

from iobridge.client import IoBridgeError, parse_event
from iobridge.client.sse import EventTooLarge, SseFrame, SseReader


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_frames_with_any_line_end_split_anywhere(end: bytes) -> None:
    stream = end.join([b": ping", b"", b"id: 1", b"data: {\"a\":1}", b"", b"data: x",
                       b"data: y", b"event: ignored", b"", b""])
    reader = SseReader(1000)
    frames = [frame for i in range(len(stream)) for frame in reader.feed(stream[i : i + 1])]
    frames += reader.end()
    assert frames == [SseFrame("1", '{"a":1}'), SseFrame(None, "x\ny")]


def test_an_event_at_the_limit_passes_and_one_byte_more_is_refused() -> None:
    data = "x" * 99  # 99 characters + the line break of the data field = 100
    assert SseReader(100).feed(f"data: {data}\n\n".encode()) == [SseFrame(None, data)]
    with pytest.raises(EventTooLarge):
        SseReader(100).feed(f"data: {data}x\n\n".encode())


def test_an_unterminated_line_cannot_grow_past_the_limit() -> None:
    reader = SseReader(100)
    reader.feed(b"data: " + b"x" * 90)
    with pytest.raises(EventTooLarge):
        reader.feed(b"x" * 20)


def test_events_parse_as_ag_ui_models_and_unknown_types_as_raw() -> None:
    started = parse_event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id) == ("t", "r")
    unknown = parse_event('{"type":"FROM_THE_FUTURE","x":1}')
    assert isinstance(unknown, RawEvent)
    assert unknown.event == {"type": "FROM_THE_FUTURE", "x": 1}
    with pytest.raises(IoBridgeError) as error:
        parse_event("not json")
    assert error.value.code == "BAD_RESPONSE"
