"""Content parts at their edges: every problem of a list is named, what each kind of part weighs,
the 0.x binary part's modality, and the exact size errors (of a run's message, of a tool result)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.media import (
    MEDIA_TOO_LARGE,
    UNSUPPORTED_MEDIA,
    MediaLimits,
    check_media,
    check_result_media,
    content_problems,
    media_kind,
    part_bytes,
)


def image(size: int) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "data", "mimeType": "image/png",
                                        "value": base64.b64encode(b"x" * size).decode()}}


def user(*parts: Any) -> dict[str, Any]:
    return {"id": "u", "role": "user", "content": list(parts)}


def test_every_problem_of_a_list_is_named_in_order() -> None:
    content = [
        "plain",
        {"type": "sticker", "ref": 1},
        {"type": "image"},
        {"type": "text"},
        {"type": "image", "source": {"type": "data", "value": "%%", "mimeType": "image/png"}},
        {"type": "audio", "source": {"type": "data", "value": "#", "mimeType": "audio/wav"}},
    ]
    assert content_problems(content, ["c"]) == [
        {"loc": ["c", 0], "message": "a content part must be an object"},
        {"loc": ["c", 2, "source"], "message": "Field required"},
        {"loc": ["c", 3, "text"], "message": "Field required"},
        {"loc": ["c", 4, "source", "value"],
         "message": "inline data must be base64 (RFC 4648, padded)"},
        {"loc": ["c", 5, "source", "value"],
         "message": "inline data must be base64 (RFC 4648, padded)"},
    ]


@pytest.mark.parametrize("value", ["aG k=", "aGk=\n", "aGk=aGk="])
def test_inline_data_is_strict_base64(value: str) -> None:
    """A lax decoder drops spaces and reads past the padding; the stored part must not need it."""
    part = {"type": "image", "source": {"type": "data", "value": value, "mimeType": "image/png"}}
    assert content_problems([part], []) == [
        {"loc": [0, "source", "value"], "message": "inline data must be base64 (RFC 4648, padded)"}
    ]


def test_a_video_part_needs_video() -> None:
    part = {"type": "video", "source": {"type": "url", "value": "https://x.test/v.mp4"}}
    assert media_kind(part) == "video"
    with pytest.raises(InputError) as info:
        check_media([user(part)], MediaLimits(), lambda: {"video": False}, agent_id="a")
    assert info.value.code == UNSUPPORTED_MEDIA
    assert info.value.details["media"] == "video"


def test_a_document_without_a_source_is_a_file() -> None:
    assert media_kind({"type": "document"}) == "file"
    assert media_kind({"type": "document", "source": "https://x.test/a.pdf"}) == "file"


def test_only_the_mime_types_first_parameter_is_cut() -> None:
    part = {"type": "document", "source": {"type": "url", "value": "u",
                                           "mimeType": "application/pdf; a=1; b=2"}}
    assert media_kind(part) == "pdf"
    assert media_kind({"type": "binary", "mimeType": " Application/PDF ;a=1;b=2"}) == "pdf"


@pytest.mark.parametrize(("mime", "kind"), [
    ("image/png", "image"), ("IMAGE/JPEG; q=1", "image"), ("audio/wav", "audio"),
    ("video/mp4", "video"), ("audio", "audio"), ("application/pdf", "pdf"),
    ("application/zip", "file"), ("text/plain", "file"), (None, "file"), (7, "file"),
])
def test_a_binary_parts_modality_is_its_mime_types_major_type(mime: Any, kind: str) -> None:
    assert media_kind({"type": "binary", "mimeType": mime}) == kind


def test_what_a_binary_part_weighs() -> None:
    ten = base64.b64encode(b"0123456789").decode()
    assert part_bytes({"type": "binary", "mimeType": "image/png", "data": ten}) == 10
    assert part_bytes({"type": "binary", "mimeType": "image/png", "url": "https://x.test/a"}) == 16
    assert part_bytes({"type": "binary", "mimeType": "image/png", "data": ten,
                       "url": "https://x.test/a"}) == 26
    assert part_bytes({"type": "binary", "mimeType": "image/png", "data": 5, "url": 6}) == 0
    assert part_bytes({"type": "binary", "mimeType": "image/png"}) == 0


def test_parts_without_a_weighable_value_weigh_nothing() -> None:
    assert part_bytes({"type": "image", "source": {"type": "url"}}) == 0
    assert part_bytes({"type": "image", "source": {"type": "data", "value": 12}}) == 0
    assert part_bytes({"type": "image"}) == 0
    assert part_bytes({"type": "text", "text": "hello"}) == 0
    # Only the 0.x binary part carries its value outside a source.
    assert part_bytes({"type": "sticker", "url": "https://x.test/a", "data": "QUJD"}) == 0


def test_unpadded_or_overpadded_data_is_weighed_by_whole_quads() -> None:
    assert part_bytes({"type": "image", "source": {"type": "data", "value": "QUJDR"}}) == 3
    # At most two padding characters are taken off a quad.
    assert part_bytes({"type": "image", "source": {"type": "data", "value": "QUJD===="}}) == 4


def test_a_part_over_the_limit_is_named_in_the_message() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=100)
    with pytest.raises(PayloadTooLarge) as info:
        check_media([user(), user({"type": "text", "text": "a"}, image(11))], limits, dict,
                    agent_id="a")
    assert info.value.code == MEDIA_TOO_LARGE
    assert info.value.message == (
        "messages[1].content[1] carries 11 bytes of image; one part may carry at most 10"
    )


def test_a_message_over_the_limit_is_named_in_the_message() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=15)
    with pytest.raises(PayloadTooLarge) as info:
        check_media([user(image(8), image(8))], limits, dict, agent_id="a")
    assert info.value.code == MEDIA_TOO_LARGE and info.value.status == 413
    assert info.value.message == (
        "messages[0] carries 16 bytes of media; one message may carry at most 15"
    )
    assert info.value.details == {"loc": ["messages", 0], "bytes": 16, "limit": 15}


def test_messages_after_one_without_media_are_still_checked() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=10)
    messages = [
        {"id": "s", "role": "system", "content": "be brief"},
        {"id": "a", "role": "assistant", "content": "hi"},
        user(image(11)),
    ]
    with pytest.raises(PayloadTooLarge) as info:
        check_media(messages, limits, dict, agent_id="a")
    assert info.value.details["loc"] == ["messages", 2, "content", 0]


def test_media_in_other_roles_is_not_measured() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=10)
    for role in ("assistant", "system", "developer"):
        check_media([{"id": "m", "role": role, "content": [image(11)]}], limits, dict,
                    agent_id="a")


def test_a_user_message_after_a_tool_result_with_media_is_still_judged() -> None:
    tool = {"id": "t", "role": "tool", "toolCallId": "c", "content": [image(1)]}
    with pytest.raises(InputError) as info:
        check_media([tool, user(image(1))], MediaLimits(), lambda: {"image": False},
                    agent_id="a")
    assert info.value.details["loc"] == ["messages", 1, "content", 0]


def test_a_tool_results_media_within_the_limits_pass() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=20)
    check_result_media(["note", {"type": "text", "text": "x" * 50}, image(10), image(10)], limits)


def test_a_tool_results_part_over_the_limit_is_413() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=100)
    with pytest.raises(PayloadTooLarge) as info:
        check_result_media(["note", {"type": "text", "text": "x" * 50}, image(11)], limits)
    assert info.value.code == MEDIA_TOO_LARGE and info.value.status == 413
    assert info.value.message == (
        "the result.content[2] carries 11 bytes of image; one part may carry at most 10"
    )
    assert info.value.details == {"loc": ["content", 2], "bytes": 11, "limit": 10}


def test_a_tool_results_media_over_the_message_limit_is_413() -> None:
    limits = MediaLimits(max_part_bytes=10, max_message_bytes=19)
    with pytest.raises(PayloadTooLarge) as info:
        check_result_media([image(10), {"type": "text", "text": "x"}, image(10)], limits)
    assert info.value.code == MEDIA_TOO_LARGE
    assert info.value.message == (
        "the result carries 20 bytes of media; one message may carry at most 19"
    )
    assert info.value.details == {"loc": [], "bytes": 20, "limit": 19}
