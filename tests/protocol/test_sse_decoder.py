"""``SSEDecoder``: the WHATWG parsing rules an upstream AG-UI stream may use, and its bound."""

from __future__ import annotations

import pytest

from iobridge.protocol.sse import LINE_ALLOWANCE, SSEDecoder, SSEError, SSEEvent


def decode(*chunks: bytes, limit: int = 1000) -> list[SSEEvent]:
    decoder = SSEDecoder(max_event_bytes=limit)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_lf_crlf_and_cr_line_ends_and_multi_line_data() -> None:
    events = decode(b"data: one\n\ndata: two\r\n\r\ndata: a\rdata: b\r\rdata: c\n\n")
    assert [e.data for e in events] == ["one", "two", "a\nb", "c"]


def test_a_crlf_split_between_chunks_is_one_line_end() -> None:
    # The CR ends the first chunk: had it been taken as a line end on its own, the LF of the
    # next chunk would be an empty line and dispatch the event one line early.
    events = decode(b"data: x\r", b"\ndata: y\r\n", b"\r\n")
    assert [e.data for e in events] == ["x\ny"]


def test_events_split_anywhere_come_out_whole() -> None:
    body = b'data: {"type":"A"}\n\n: comment\n\nevent: custom\ndata:no-space\n\n'
    for size in range(1, len(body)):
        chunks = [body[i:i + size] for i in range(0, len(body), size)]
        assert decode(*chunks) == [SSEEvent('{"type":"A"}'), SSEEvent("no-space", "custom")]


def test_comments_ids_retry_and_unknown_fields_are_ignored() -> None:
    events = decode(b": ping\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n")
    assert events == [SSEEvent("x")]


def test_a_bom_at_the_start_is_skipped() -> None:
    assert decode(b"\xef\xbb", b"\xbfdata: x\n\n") == [SSEEvent("x")]


def test_an_unterminated_event_is_not_dispatched() -> None:
    assert decode(b"data: x\n") == []
    assert decode(b"data: x") == []


def test_event_data_at_the_limit_passes_and_one_byte_more_fails() -> None:
    assert decode(b"data: " + b"x" * 100 + b"\n\n", limit=100) == [SSEEvent("x" * 100)]
    # Two lines: 49 + LF + 50 = 100 bytes of data.
    assert decode(b"data: " + b"a" * 49 + b"\ndata: " + b"b" * 50 + b"\n\n", limit=100)[0].data \
        == "a" * 49 + "\n" + "b" * 50
    with pytest.raises(SSEError, match="larger than 100 bytes"):
        decode(b"data: " + b"x" * 101 + b"\n\n", limit=100)
    with pytest.raises(SSEError):
        decode(b"data: " + b"a" * 50 + b"\ndata: " + b"b" * 50 + b"\n\n", limit=100)


def test_a_line_without_end_is_bounded() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    decoder.feed(b"x" * (100 + LINE_ALLOWANCE))  # at the bound: waits for its line end
    with pytest.raises(SSEError, match="line is longer"):
        decoder.feed(b"x")


def test_data_that_is_not_utf8_is_an_error() -> None:
    with pytest.raises(SSEError, match="UTF-8"):
        decode(b"data: \xff\xfe\n\n")
