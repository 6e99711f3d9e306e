"""``sse_frames`` with open-state tags, and the decoder's state between events and chunks."""

from __future__ import annotations

import pytest

from iobridge.protocol.sse import SSEDecoder, SSEError, SSEEvent, sse_frames

BOM = b"\xef\xbb\xbf"


def test_one_tag_for_the_whole_batch_follows_each_number() -> None:
    entries = [(1, b'{"a":1}'), (2, b'{"b":2}')]
    assert sse_frames(entries, [b"~x", b"~x"]) == (
        b'id: 1~x\ndata: {"a":1}\n\nid: 2~x\ndata: {"b":2}\n\n')


def test_a_single_tagged_event() -> None:
    assert sse_frames([(9, b"{}")], [b"~o"]) == b"id: 9~o\ndata: {}\n\n"


def test_a_percent_sign_in_a_shared_tag_is_written_as_is() -> None:
    entries = [(3, b"{}"), (4, b"[]")]
    assert sse_frames(entries, [b"~50%d", b"~50%d"]) == (
        b"id: 3~50%d\ndata: {}\n\nid: 4~50%d\ndata: []\n\n")


def test_tags_that_change_within_a_batch_each_follow_their_event() -> None:
    entries = [(1, b"{}"), (2, b"{}"), (3, b"{}")]
    assert sse_frames(entries, [b"", b"~a", b"~a"]) == (
        b"id: 1\ndata: {}\n\nid: 2~a\ndata: {}\n\nid: 3~a\ndata: {}\n\n")
    assert sse_frames(entries[:2], [b"~a%", b""]) == b"id: 1~a%\ndata: {}\n\nid: 2\ndata: {}\n\n"


def test_changing_tags_must_be_one_per_event() -> None:
    with pytest.raises(ValueError):
        sse_frames([(1, b"{}"), (2, b"{}"), (3, b"{}")], [b"", b"~a"])


def test_a_data_line_exactly_at_the_bound_after_an_earlier_event() -> None:
    """The size of an event starts from zero again once the previous one is dispatched."""
    decoder = SSEDecoder(max_event_bytes=4)
    assert decoder.feed(b"data: abcd\n\n") == [SSEEvent("abcd")]
    assert decoder.feed(b"data: efgh\n\n") == [SSEEvent("efgh")]
    with pytest.raises(SSEError) as info:
        decoder.feed(b"data: ijklm\n\n")
    assert str(info.value) == "an SSE event is larger than 4 bytes"


def test_an_event_name_does_not_carry_over_to_the_next_event() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    events = decoder.feed(b"event: custom\ndata: a\n\ndata: b\n\n")
    assert events == [SSEEvent("a", "custom"), SSEEvent("b", "message")]


def test_data_that_is_not_utf8_is_an_error() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    with pytest.raises(SSEError) as info:
        decoder.feed(b"data: \xff\xfe\n\n")
    assert str(info.value) == "an SSE event is not UTF-8"


def test_a_bom_split_after_its_first_byte_is_still_skipped() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    assert decoder.feed(BOM[:1]) == []
    assert decoder.feed(BOM[1:] + b"data: x\n\n") == [SSEEvent("x")]


def test_a_bom_after_a_three_byte_first_chunk_is_not_skipped() -> None:
    """Only the stream's first three bytes may be a BOM: later it is part of a field name."""
    decoder = SSEDecoder(max_event_bytes=100)
    assert decoder.feed(b":\n\n") == []
    assert decoder.feed(BOM + b"data: x\n\ndata: y\n\n") == [SSEEvent("y")]


def test_a_bom_in_a_later_chunk_is_not_skipped() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    assert decoder.feed(b"data: a\n\n") == [SSEEvent("a")]
    assert decoder.feed(BOM + b"data: b\n\n") == []
