"""SSE framing: LF only, one ``id`` and one ``data`` line per event, pings are comments."""

from __future__ import annotations

import pytest

from agui_verify import StreamError, parse_sse
from iobridge.protocol.events import encode_event, text_content
from iobridge.protocol.sse import PING, sse_frames


def test_one_frame_is_id_then_one_data_line_then_a_blank_line() -> None:
    data = encode_event(text_content("m", "a\nb\r\nc"))
    frame = sse_frames([(7, data)])
    assert frame == b"id: 7\ndata: " + data + b"\n\n"
    assert b"\r" not in frame and frame.count(b"\n") == 3


def test_a_batch_is_the_concatenation_of_single_frames() -> None:
    entries = [(1, b'{"type":"A"}'), (2, b'{"type":"B"}')]
    assert sse_frames(entries) == sse_frames(entries[:1]) + sse_frames(entries[1:])
    assert sse_frames([]) == b""


def test_frames_and_pings_parse_back_with_increasing_ids() -> None:
    events = [text_content("m", "x\n\ny"), {"type": "CUSTOM", "name": "é😀", "value": None}]
    body = PING + sse_frames([(i, encode_event(e)) for i, e in enumerate(events, 1)]) + PING
    assert PING == b": ping\n\n"
    assert parse_sse(body) == events


@pytest.mark.parametrize(
    "body",
    [b"id: 1\r\ndata: {}\r\n\r\n", b"id: 2\ndata: {}\n\n", b"id: 1\ndata: {}\n",
     b"data: {}\n\n", b"id: 1\ndata: {}\ndata: {}\n\n", b"id: 1\ndata: []\n\n"],
    ids=["crlf", "id-not-1", "unterminated", "no-id", "two-data-lines", "not-an-object"],
)
def test_the_framing_checker_rejects_bad_framing(body: bytes) -> None:
    with pytest.raises(StreamError):
        parse_sse(body)
