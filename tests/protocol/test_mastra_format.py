"""AG-UI → Mastra message format v2: the exact shape io.Assist renders."""

from __future__ import annotations

from typing import Any

from iobridge.protocol.message_formats import to_mastra

T0, T1, T2, T3 = (f"2026-01-01T12:00:0{i}.000Z" for i in range(4))


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def envelope(mid: str, role: str, at: str, parts: list[Any], text: str | None) -> dict[str, Any]:
    content: dict[str, Any] = {"format": 2, "parts": parts}
    if text is not None:
        content["content"] = text
    return {"id": mid, "role": role, "createdAt": at, "threadId": "th", "resourceId": "alice",
            "type": "v2", "content": content}


def invocation(state: str, call_id: str, name: str, args: Any, **result: Any) -> dict[str, Any]:
    return {"type": "tool-invocation",
            "toolInvocation": {"state": state, "toolCallId": call_id, "toolName": name,
                               "args": args, **result}}


def test_a_whole_conversation_folds_into_mastra_v2() -> None:
    stored: list[tuple[dict[str, Any], str]] = [
        ({"id": "s1", "role": "system", "content": "Be brief."}, T0),
        ({"id": "u1", "role": "user", "content": "weather in Oslo and 2+2?"}, T0),
        ({"id": "r1", "role": "reasoning", "content": "Two tools at once."}, T1),
        ({"id": "a1", "role": "assistant", "content": "Calling.",
          "toolCalls": [call("c1", "get_weather", '{"city":"Oslo"}'),
                        call("c2", "calculate", '{"expression":"2+2"}')]}, T1),
        ({"id": "m1", "role": "tool", "toolCallId": "c2", "content": '{"value":4}'}, T1),
        ({"id": "m2", "role": "tool", "toolCallId": "c1", "content": "sunny"}, T2),
        ({"id": "x1", "role": "activity", "activityType": "progress", "content": {"p": 1}}, T2),
        ({"id": "a2", "role": "assistant", "content": "Sunny; 4.",
          "toolCalls": [call("c3", "current_time", "")]}, T2),
        ({"id": "m3", "role": "tool", "toolCallId": "c3", "content": '{"error":"clock broke"}',
          "error": '{"error":"clock broke"}'}, T2),
        ({"id": "a3", "role": "assistant", "toolCalls": [call("c4", "show_notice", "{}")]}, T3),
        ({"id": "u2", "role": "user",
          "content": [{"type": "text", "text": "see "},
                      {"type": "binary", "mimeType": "image/png", "url": "https://x/y.png"}]}, T3),
    ]

    got = to_mastra(stored, thread_id="th", resource_id="alice")

    assert got == [
        envelope("s1", "system", T0, [{"type": "text", "text": "Be brief."}], "Be brief."),
        envelope("u1", "user", T0, [{"type": "text", "text": "weather in Oslo and 2+2?"}],
                 "weather in Oslo and 2+2?"),
        envelope("a1", "assistant", T1, [
            {"type": "reasoning", "reasoning": "Two tools at once.",
             "details": [{"type": "text", "text": "Two tools at once."}]},
            {"type": "text", "text": "Calling."},
            invocation("result", "c1", "get_weather", {"city": "Oslo"}, result="sunny"),
            invocation("result", "c2", "calculate", {"expression": "2+2"}, result={"value": 4}),
            {"type": "step-start"},
            {"type": "text", "text": "Sunny; 4."},
            invocation("result", "c3", "current_time", {}, result={"error": "clock broke"},
                       isError=True),
            {"type": "step-start"},
            invocation("call", "c4", "show_notice", {}),
        ], "Calling.Sunny; 4."),
        envelope("u2", "user", T3, [{"type": "text", "text": "see "},
                                    {"type": "file", "mimeType": "image/png",
                                     "mediaType": "image/png", "data": "https://x/y.png",
                                     "url": "https://x/y.png"}], "see "),
    ]


PNG = "iVBORw0KGgo="


def test_media_parts_become_the_file_parts_mastra_stores() -> None:
    """Exact shapes: Mastra's v2 store keeps images and files alike as ``{type: "file",
    mimeType, data}`` (AI SDK v4); ``mediaType``/``url`` are the v5 names it also reads."""
    content = [
        {"type": "text", "text": "what is in these?"},
        {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}},
        {"type": "image", "source": {"type": "url", "value": "https://cdn.test/cat.jpg"}},
        {"type": "document", "source": {"type": "data", "value": "JVBERi0xLjcK",
                                        "mimeType": "application/pdf"},
         "metadata": {"filename": "report.pdf", "pages": 3}},
        {"type": "audio", "source": {"type": "url", "value": "https://cdn.test/note",
                                     "mimeType": "audio/wav"}},
        {"type": "video", "source": {"type": "file", "value": "file-123", "provider": "openai",
                                     "mimeType": "video/mp4"}},
        {"type": "document", "source": {"type": "file", "value": "gs://b/k"}},
        {"type": "binary", "mimeType": "image/gif", "data": "R0lGOD==", "filename": "a.gif"},
        {"type": "binary", "mimeType": "text/plain", "id": "upload-7"},
        {"type": "image", "source": {"type": "url", "value": ""}},
        {"type": "sticker", "ref": 1},
    ]
    [message] = to_mastra([({"id": "u1", "role": "user", "content": content}, T0)],
                          thread_id="th", resource_id="alice")
    assert message == envelope("u1", "user", T0, [
        {"type": "text", "text": "what is in these?"},
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": f"data:image/png;base64,{PNG}"},
        {"type": "file", "mimeType": "image/jpeg", "mediaType": "image/jpeg",
         "data": "https://cdn.test/cat.jpg", "url": "https://cdn.test/cat.jpg"},
        {"type": "file", "mimeType": "application/pdf", "mediaType": "application/pdf",
         "data": "data:application/pdf;base64,JVBERi0xLjcK", "filename": "report.pdf"},
        {"type": "file", "mimeType": "audio/wav", "mediaType": "audio/wav",
         "data": "https://cdn.test/note", "url": "https://cdn.test/note"},
        {"type": "file", "mimeType": "video/mp4", "mediaType": "video/mp4", "data": "file-123"},
        {"type": "file", "mimeType": "application/octet-stream",
         "mediaType": "application/octet-stream", "data": "gs://b/k"},
        {"type": "file", "mimeType": "image/gif", "mediaType": "image/gif",
         "data": "data:image/gif;base64,R0lGOD==", "filename": "a.gif"},
        {"type": "file", "mimeType": "text/plain", "mediaType": "text/plain",
         "data": "upload-7"},
    ], "what is in these?")


def test_an_image_only_message_has_no_text_content() -> None:
    image = {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}}
    [message] = to_mastra([({"id": "u1", "role": "user", "content": [image]}, T0)],
                          thread_id="th", resource_id="alice")
    assert message["content"] == {"format": 2, "parts": [
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": f"data:image/png;base64,{PNG}"}]}


def test_a_tool_result_of_content_parts_is_the_invocation_result() -> None:
    parts = [{"type": "text", "text": "here"},
             {"type": "image", "source": {"type": "url", "value": "https://x/s.png"}}]
    stored: list[tuple[dict[str, Any], str]] = [
        ({"id": "a1", "role": "assistant", "toolCalls": [call("c1", "shot", "{}")]}, T0),
        ({"id": "m1", "role": "tool", "toolCallId": "c1", "content": parts}, T0),
    ]
    [message] = to_mastra(stored, thread_id="th", resource_id="alice")
    assert message["content"]["parts"] == [invocation("result", "c1", "shot", {}, result=parts)]


def test_a_plain_text_error_becomes_an_error_object() -> None:
    stored: list[tuple[dict[str, Any], str]] = [
        ({"id": "a1", "role": "assistant", "toolCalls": [call("c1", "pick", '{"n":1}')]}, T0),
        ({"id": "m1", "role": "tool", "toolCallId": "c1", "content": "user declined",
          "error": "user declined"}, T0),
    ]
    [message] = to_mastra(stored, thread_id="th", resource_id="alice")
    assert message["content"]["parts"] == [
        invocation("result", "c1", "pick", {"n": 1}, result={"error": "user declined"},
                   isError=True)
    ]


def test_orphans_repeats_and_reasoning_only_groups() -> None:
    stored: list[tuple[dict[str, Any], str]] = [
        ({"id": "m0", "role": "tool", "toolCallId": "gone", "content": "7"}, T0),
        ({"id": "u1", "role": "user", "content": "hi"}, T1),
        ({"id": "r1", "role": "reasoning", "content": "hmm"}, T1),
        ({"id": "u2", "role": "user", "content": "again"}, T2),
        ({"id": "a1", "role": "assistant", "toolCalls": [call("c1", "f", "not json")]}, T2),
        ({"id": "m1", "role": "tool", "toolCallId": "c1", "content": "first"}, T2),
        ({"id": "m2", "role": "tool", "toolCallId": "c1", "content": "second"}, T3),
        ({"id": "z1", "role": "mystery", "content": "?"}, T3),
    ]
    got = to_mastra(stored, thread_id="th", resource_id="alice")
    assert [(m["id"], m["role"]) for m in got] == [
        ("m0", "assistant"), ("u1", "user"), ("r1", "assistant"), ("u2", "user"),
        ("a1", "assistant"),
    ]
    assert got[0]["content"]["parts"] == [invocation("result", "gone", "", {}, result=7)]
    assert got[2]["content"] == {"format": 2, "parts": [
        {"type": "reasoning", "reasoning": "hmm", "details": [{"type": "text", "text": "hmm"}]}
    ]}
    assert got[4]["content"]["parts"] == [
        invocation("result", "c1", "f", "not json", result="first")
    ]


def test_empty_history() -> None:
    assert to_mastra([], thread_id="th", resource_id="alice") == []


def test_one_step_start_per_step_whatever_parts_open_it() -> None:
    """Tool call → result → reasoning → text: the reasoning opens the new step and the text
    continues it (one step-start, not one before each part)."""
    stored: list[tuple[dict[str, Any], str]] = [
        ({"id": "a1", "role": "assistant", "toolCalls": [call("c1", "pick", "{}")]}, T0),
        ({"id": "m1", "role": "tool", "toolCallId": "c1", "content": "7"}, T0),
        ({"id": "r1", "role": "reasoning", "content": "Seven, then."}, T1),
        ({"id": "a2", "role": "assistant", "content": "It is 7."}, T1),
    ]
    [message] = to_mastra(stored, thread_id="th", resource_id="alice")
    assert message["content"]["parts"] == [
        invocation("result", "c1", "pick", {}, result=7),
        {"type": "step-start"},
        {"type": "reasoning", "reasoning": "Seven, then.",
         "details": [{"type": "text", "text": "Seven, then."}]},
        {"type": "text", "text": "It is 7."},
    ]
