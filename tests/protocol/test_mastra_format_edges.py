"""AG-UI → Mastra v2 at its edges: text of part lists, MIME guesses, missing fields, which message
names and dates a folded group, and where step-starts go."""

from __future__ import annotations

from typing import Any

from iobridge.protocol.message_formats import to_mastra

T0, T1, T2 = (f"2026-01-01T12:00:0{i}.000Z" for i in range(3))


def fold(*stored: tuple[dict[str, Any], str]) -> list[dict[str, Any]]:
    return to_mastra(list(stored), thread_id="th", resource_id="alice")


def call(call_id: str, name: str = "f", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_text_of_a_part_list_is_its_text_parts_only() -> None:
    content = [
        {"type": "text", "text": "a"},
        "stray",
        {"type": "image", "source": {"type": "url", "value": "https://x/i.png"}},
        {"text": "no type"},
        {"type": "sticker", "text": "not text"},
        {"type": "text", "text": 5},
        {"type": "text", "text": "b"},
    ]
    got = fold(({"id": "s1", "role": "system", "content": content}, T0),
               ({"id": "r1", "role": "reasoning", "content": content}, T0),
               ({"id": "a1", "role": "assistant", "content": content}, T0))
    assert got[0]["content"] == {"format": 2, "parts": [{"type": "text", "text": "ab"}],
                                 "content": "ab"}
    assert got[1]["content"]["parts"] == [
        {"type": "reasoning", "reasoning": "ab", "details": [{"type": "text", "text": "ab"}]},
        {"type": "text", "text": "ab"},
    ]
    assert fold(({"id": "s1", "role": "system", "content": {"x": 1}}, T0))[0]["content"] == {
        "format": 2, "parts": [{"type": "text", "text": ""}]}


def test_a_developer_message_is_a_system_message() -> None:
    [message] = fold(({"id": "d1", "role": "developer", "content": "Use metric."}, T0))
    assert (message["id"], message["role"]) == ("d1", "system")
    assert message["content"]["parts"] == [{"type": "text", "text": "Use metric."}]


def test_a_user_messages_parts_skip_what_is_not_text_or_media() -> None:
    content = [
        "stray",
        {"type": "text", "text": "a"},
        {"type": "sticker", "text": "not text"},
        {"type": "text", "text": None},
        {"type": "text", "text": "b"},
    ]
    [message] = fold(({"id": "u1", "role": "user", "content": content}, T0))
    assert message["content"] == {"format": 2, "parts": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "content": "ab"}


def test_a_user_message_without_text_has_no_parts() -> None:
    for content in ("", None, 7):
        [message] = fold(({"id": "u1", "role": "user", "content": content}, T0))
        assert message["content"] == {"format": 2, "parts": []}


def test_a_message_without_an_id_has_an_empty_one() -> None:
    got = fold(({"role": "user", "content": "hi"}, T0), ({"role": "system", "content": "s"}, T0))
    assert [m["id"] for m in got] == ["", ""]


def test_an_empty_mime_type_is_guessed_only_for_urls() -> None:
    content = [
        {"type": "image", "source": {"type": "url", "value": "https://x/a.png", "mimeType": ""}},
        {"type": "document", "source": {"type": "file", "value": "report.pdf"}},
        {"type": "document", "source": {"type": "data", "value": "JVBE.pdf", "mimeType": ""}},
    ]
    [message] = fold(({"id": "u1", "role": "user", "content": content}, T0))
    assert message["content"]["parts"] == [
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": "https://x/a.png", "url": "https://x/a.png"},
        {"type": "file", "mimeType": "application/octet-stream",
         "mediaType": "application/octet-stream", "data": "report.pdf"},
        {"type": "file", "mimeType": "application/octet-stream",
         "mediaType": "application/octet-stream",
         "data": "data:application/octet-stream;base64,JVBE.pdf"},
    ]


def test_a_call_without_a_function_or_an_id() -> None:
    stored = ({"id": "a1", "role": "assistant",
               "toolCalls": [{"type": "function", "function": "nope"}, {"id": "c2"}]}, T0)
    [message] = fold(stored)
    assert message["content"]["parts"] == [
        {"type": "tool-invocation",
         "toolInvocation": {"state": "call", "toolCallId": "", "toolName": "", "args": {}}},
        {"type": "tool-invocation",
         "toolInvocation": {"state": "call", "toolCallId": "c2", "toolName": "", "args": {}}},
    ]


def result_of(tool: dict[str, Any]) -> dict[str, Any]:
    [message] = fold(({"id": "a1", "role": "assistant", "toolCalls": [call("c1")]}, T0),
                     ({"id": "m1", "role": "tool", "toolCallId": "c1", **tool}, T0))
    invocation: dict[str, Any] = message["content"]["parts"][0]["toolInvocation"]
    return invocation


def test_a_tool_message_without_content_has_an_empty_result() -> None:
    assert result_of({})["result"] == ""
    assert result_of({"error": "boom"})["result"] == {"error": "boom"}


def test_an_error_whose_content_only_mentions_error_is_wrapped() -> None:
    """``"error" in value`` must not be a substring test on text."""
    got = result_of({"content": "an error happened", "error": "boom"})
    assert (got["result"], got["isError"]) == ({"error": "boom"}, True)
    got = result_of({"content": "7", "error": "boom"})
    assert (got["result"], got["isError"]) == ({"error": "boom"}, True)
    got = result_of({"content": '["error"]', "error": "boom"})
    assert (got["result"], got["isError"]) == ({"error": "boom"}, True)


def test_results_nest_up_to_the_highest_depth_setting() -> None:
    deepest = "[" * 128 + "]" * 128
    value = result_of({"content": deepest})["result"]
    depth = 0
    while isinstance(value, list):
        value, depth = (value[0] if value else None), depth + 1
    assert depth == 128
    too_deep = "[" * 129 + "]" * 129
    assert result_of({"content": too_deep})["result"] == too_deep


def test_only_tool_messages_answer_calls() -> None:
    got = fold(({"id": "u1", "role": "user", "content": "hi", "toolCallId": "c1"}, T0),
               ({"id": "a1", "role": "assistant", "toolCalls": [call("c1")]}, T1))
    assert got[1]["content"]["parts"] == [
        {"type": "tool-invocation",
         "toolInvocation": {"state": "call", "toolCallId": "c1", "toolName": "f", "args": {}}}
    ]


def test_a_group_is_named_by_its_first_assistant_message() -> None:
    got = fold(({"id": "a1", "role": "assistant", "toolCalls": [call("c1")]}, T0),
               ({"id": "m1", "role": "tool", "toolCallId": "c1", "content": "1"}, T1),
               ({"id": "a2", "role": "assistant", "content": "done"}, T2))
    assert [(m["id"], m["createdAt"]) for m in got] == [("a1", T0)]


def test_a_group_opened_by_reasoning_or_an_orphan_result_is_dated_by_it() -> None:
    got = fold(({"id": "r1", "role": "reasoning", "content": "hmm"}, T0),
               ({"id": "u1", "role": "user", "content": "hi"}, T1),
               ({"id": "m1", "role": "tool", "toolCallId": "gone", "content": "1"}, T2))
    assert [(m["id"], m["role"], m["createdAt"]) for m in got] == [
        ("r1", "assistant", T0), ("u1", "user", T1), ("m1", "assistant", T2)]


def test_an_orphan_result_after_a_call_does_not_start_a_step() -> None:
    [message] = fold(({"id": "a1", "role": "assistant", "toolCalls": [call("c1")]}, T0),
                     ({"id": "m0", "role": "tool", "toolCallId": "gone", "content": "1"}, T0),
                     ({"id": "a2", "role": "assistant", "content": "ok"}, T1))
    assert [p["type"] for p in message["content"]["parts"]] == [
        "tool-invocation", "tool-invocation", "step-start", "text"]
    assert message["content"]["parts"][1]["toolInvocation"]["toolCallId"] == "gone"
