"""Content parts: shapes (checked against the ag_ui.core models), sizes at their limits, and the
media an agent declares it takes."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ag_ui.core import UserMessage

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.media import (
    MEDIA_TOO_LARGE,
    UNSUPPORTED_MEDIA,
    MediaLimits,
    check_media,
    content_problems,
    media_kind,
    part_bytes,
)
from iobridge.protocol.run_input import parse_run_input


def data(kind: str, payload: bytes, mime: str) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "data", "value": base64.b64encode(payload).decode(),
                                     "mimeType": mime}}


def url(kind: str, value: str, mime: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"type": "url", "value": value}
    if mime:
        source["mimeType"] = mime
    return {"type": kind, "source": source}


IMAGE = data("image", b"\x89PNG\r\n\x1a\n" + b"\0" * 8, "image/png")
PDF = data("document", b"%PDF-1.7\n", "application/pdf")
AUDIO = data("audio", b"RIFF\0\0\0\0WAVE", "audio/wav")
HANDLE = {"type": "document", "source": {"type": "file", "value": "file-abc123",
                                         "provider": "openai"}}


def user(*parts: dict[str, Any], id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": [{"type": "text", "text": "look"}, *parts]}


@pytest.mark.parametrize("part", [
    IMAGE, PDF, AUDIO, HANDLE, url("image", "https://x.test/a.png"),
    url("video", "https://x.test/v.mp4", "video/mp4"), {"type": "text", "text": "hi", "id": "p1"},
    {"type": "image", "source": IMAGE["source"], "metadata": {"alt": "a cat"}},
    # Kept as they are: a newer part type, and the 0.x binary part.
    {"type": "sticker", "ref": 7},
    {"type": "binary", "mimeType": "image/png", "url": "https://x.test/b.png"},
])
def test_well_formed_parts_pass_and_validate_as_ag_ui_messages(part: dict[str, Any]) -> None:
    assert content_problems([part], ["content"]) == []
    parsed = parse_run_input({"threadId": "t", "runId": "r", "messages": [user(part)]})
    assert parsed.messages[0]["content"][1] == part  # stored exactly as sent
    if part["type"] in ("text", "image", "audio", "video", "document"):
        UserMessage.model_validate(parsed.messages[0])


@pytest.mark.parametrize(("part", "loc", "says"), [
    ({"type": "image"}, [0, "source"], "required"),
    ({"type": "image", "source": {"type": "data", "value": "aGk="}}, [0, "source", "data",
                                                                      "mimeType"], "required"),
    ({"type": "audio", "source": {"type": "ftp", "value": "x"}}, [0, "source"], "tag"),
    ({"type": "image", "source": {"type": "data", "value": "not base64!", "mimeType": "image/png"}},
     [0, "source", "value"], "base64"),
    ({"type": "image", "source": {"type": "data", "value": "data:image/png;base64,aGk=",
                                  "mimeType": "image/png"}}, [0, "source", "value"], "base64"),
    ({"type": "text"}, [0, "text"], "required"),
])
def test_malformed_parts_are_named(part: Any, loc: list[Any], says: str) -> None:
    problems = content_problems([part], [])
    assert problems and problems[0]["loc"] == loc, problems
    assert says in problems[0]["message"].lower()
    with pytest.raises(InputError) as info:
        parse_run_input({"threadId": "t", "runId": "r", "messages": [user(part)]})
    assert info.value.details[0]["loc"] == ["messages", 0, "content", 1, *loc[1:]]


def test_a_part_that_is_not_an_object_is_named() -> None:
    assert content_problems(["just text"], ["c"]) == [
        {"loc": ["c", 0], "message": "a content part must be an object"}
    ]


def test_a_tool_message_with_content_parts_is_checked_too() -> None:
    body = {"threadId": "t", "runId": "r", "messages": [
        {"id": "a", "role": "assistant", "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
        {"id": "t", "role": "tool", "toolCallId": "c", "content": [IMAGE]},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": [{"type": "image"}]},
    ]}
    with pytest.raises(InputError) as info:
        parse_run_input(body)
    assert [p["loc"][:4] for p in info.value.details] == [["messages", 2, "content", 0]]


def test_media_kinds() -> None:
    assert [media_kind(p) for p in (IMAGE, PDF, AUDIO, HANDLE)] == ["image", "pdf", "audio",
                                                                     "file"]
    assert media_kind(data("document", b"x", "Application/PDF; v=1")) == "pdf"
    assert media_kind({"type": "binary", "mimeType": "video/mp4"}) == "video"
    assert media_kind({"type": "binary", "mimeType": "application/pdf"}) == "pdf"
    assert media_kind({"type": "text", "text": "x"}) is None
    assert media_kind({"type": "sticker"}) is None


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 1000, 1001, 1002])
def test_inline_data_weighs_its_decoded_bytes(size: int) -> None:
    assert part_bytes(data("image", b"x" * size, "image/png")) == size
    assert part_bytes(url("image", "https://x.test/" + "a" * size)) == len("https://x.test/") + size


def test_a_part_at_the_limit_passes_and_one_byte_more_is_413() -> None:
    limits = MediaLimits(max_part_bytes=100, max_message_bytes=1000)
    check_media([user(data("image", b"x" * 100, "image/png"))], limits, dict, agent_id="a")
    with pytest.raises(PayloadTooLarge) as info:
        check_media([user(data("image", b"x" * 101, "image/png"), id="u9")], limits, dict,
                    agent_id="a")
    assert info.value.status == 413 and info.value.code == MEDIA_TOO_LARGE
    assert info.value.details == {"loc": ["messages", 0, "content", 1], "bytes": 101,
                                  "limit": 100}


def test_a_message_at_the_limit_passes_and_one_byte_more_is_413() -> None:
    limits = MediaLimits(max_part_bytes=100, max_message_bytes=150)
    fits = [user(data("image", b"x" * 100, "image/png"), url("image", "h" * 50))]
    check_media(fits, limits, dict, agent_id="a")
    over = [user(), user(data("image", b"x" * 100, "image/png"), url("image", "h" * 51))]
    with pytest.raises(PayloadTooLarge) as info:
        check_media(over, limits, dict, agent_id="a")
    assert info.value.details == {"loc": ["messages", 1], "bytes": 151, "limit": 150}


def test_tool_results_count_against_the_limits_but_not_the_modalities() -> None:
    limits = MediaLimits(max_part_bytes=16, max_message_bytes=16)
    tool = {"id": "t", "role": "tool", "toolCallId": "c", "content": [IMAGE]}
    assert part_bytes(IMAGE) == 16
    check_media([tool], limits, lambda: {"image": False}, agent_id="a")
    big = {**tool, "content": [data("image", b"x" * 17, "image/png")]}
    with pytest.raises(PayloadTooLarge):
        check_media([big], limits, lambda: {"image": False}, agent_id="a")


def test_media_the_agent_declares_it_does_not_take_is_400_naming_what_it_takes() -> None:
    accepts = {"image": True, "audio": False, "video": False, "pdf": True, "file": False}
    with pytest.raises(InputError) as info:
        check_media([user(IMAGE, PDF, AUDIO)], MediaLimits(), lambda: accepts, agent_id="chat")
    assert info.value.code == UNSUPPORTED_MEDIA and info.value.status == 400
    assert info.value.message == (
        "agent 'chat' does not accept audio input (messages[0].content[3]); it accepts: "
        "image, pdf"
    )
    assert info.value.details == {"loc": ["messages", 0, "content", 3], "media": "audio",
                                  "accepted": ["image", "pdf"]}
    with pytest.raises(InputError, match="it accepts: text only"):
        check_media([user(IMAGE)], MediaLimits(), lambda: dict.fromkeys(accepts, False),
                    agent_id="demo")


def test_undeclared_media_passes_and_the_declaration_is_only_read_for_user_media() -> None:
    check_media([user(AUDIO, HANDLE)], MediaLimits(), dict, agent_id="up")
    asked: list[int] = []

    def declaration() -> dict[str, bool]:
        asked.append(1)
        return {}

    check_media([user(), {"id": "a", "role": "assistant", "content": "hi"}], MediaLimits(),
                declaration, agent_id="a")
    assert asked == []
