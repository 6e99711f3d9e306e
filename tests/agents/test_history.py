"""What a model is given of a thread (``to_model_messages``) and of the request's context
(``context_instructions``): text, media it can take and placeholders for what it cannot,
tool calls paired with their results, and reasoning only for the model that produced it."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserPromptPart,
    VideoUrl,
)

from iobridge.agents.history import (
    context_instructions,
    producer_metadata,
    to_model_messages,
    tool_return_content,
)

B64 = base64.b64encode(b"\x89PNG").decode()


def _user_content(items: list[Any], provider: str | None = "openai") -> Any:
    [request] = to_model_messages([{"role": "user", "content": items}], provider=provider)
    [part] = request.parts
    assert isinstance(part, UserPromptPart)
    return part.content


def _shape(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Each message's kind and its parts' essentials (no timestamps)."""
    shaped = []
    for message in messages:
        parts: list[tuple[Any, ...]] = []
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                parts.append(("call", part.tool_name, part.args, part.tool_call_id))
            elif isinstance(part, ToolReturnPart):
                parts.append(("result", part.tool_name, part.content, part.tool_call_id,
                              part.outcome))
            elif isinstance(part, (TextPart, SystemPromptPart, UserPromptPart)):
                parts.append((type(part).__name__, part.content))
            else:
                parts.append((type(part).__name__,))
        shaped.append(("request" if isinstance(message, ModelRequest) else "response", parts))
    return shaped


def _call(call_id: str, name: str = "lookup", args: str | None = '{"q":1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_context_entries_become_one_instructions_paragraph() -> None:
    assert context_instructions([]) is None
    assert context_instructions([
        {"description": " User name ", "value": "Ann"},
        {"description": "  ", "value": "no description"},
        {"value": {"k": 1}},
        {"description": "Count", "value": 3},
    ]) == ("Context provided by the application:\n- User name: Ann\n- no description\n"
           "- {'k': 1}\n- Count: 3")


def test_media_the_model_can_take_become_its_native_content() -> None:
    items = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url", "value": "https://x/photo",
                                     "mimeType": "image/webp"}},
        {"type": "audio", "source": {"type": "url", "value": "https://x/a.wav"}},
        {"type": "video", "source": {"type": "data", "value": B64, "mimeType": "video/mp4"}},
        {"type": "document", "source": {"type": "file", "value": "file-1",
                                        "mimeType": "application/pdf"}},
        {"type": "image", "source": {"type": "file", "value": "file-2", "provider": "openai"}},
    ]
    content = _user_content(items)
    assert content == [
        "look",
        ImageUrl(url="https://x/photo", media_type="image/webp"),
        AudioUrl(url="https://x/a.wav"),
        BinaryContent(data=b"\x89PNG", media_type="video/mp4"),
        UploadedFile(file_id="file-1", provider_name="openai", media_type="application/pdf"),
        UploadedFile(file_id="file-2", provider_name="openai"),
    ]
    # pydantic-ai leaves the media type out of equality: the model is sent it all the same.
    assert [content[1].media_type, content[4].media_type] == ["image/webp", "application/pdf"]


@pytest.mark.parametrize(("item", "provider", "placeholder"), [
    ({"type": "image", "source": {"type": "file", "value": "f", "provider": "anthropic"}},
     "openai", "[image attachment not available to the model]"),
    ({"type": "document", "source": {"type": "file", "value": "f"}}, None,
     "[document attachment not available to the model]"),
    ({"type": "audio", "source": {"type": "data", "value": "not base64!", "mimeType": "a/b"}},
     "openai", "[audio attachment not available to the model]"),
    ({"type": "video", "source": {"type": "data", "value": B64}}, "openai",
     "[video attachment not available to the model]"),
    ({"type": "image", "source": {"type": "url", "value": ""}}, "openai",
     "[image attachment not available to the model]"),
    ({"type": "image", "source": "https://x/a.png"}, "openai",
     "[image attachment not available to the model]"),
    ({"type": "image", "source": {"type": "ftp", "value": "x"}}, "openai",
     "[image attachment not available to the model]"),
    ({"type": "binary", "mimeType": "image/png", "filename": "cat.png"}, "openai",
     "[attachment cat.png not available to the model]"),
    ({"type": "binary", "mimeType": "image/png", "id": "b-1"}, "openai",
     "[attachment b-1 not available to the model]"),
    ({"type": "binary"}, "openai", "[attachment file not available to the model]"),
    ({"type": "sticker"}, "openai", "[unsupported content: sticker]"),
    ({"text": "no type"}, "openai", "[unsupported content]"),
    ("just a string", "openai", "[unsupported content]"),
], ids=["other-provider-file", "file-without-provider", "bad-base64", "data-without-mime",
        "empty-url", "source-not-an-object", "unknown-source", "binary-filename", "binary-id",
        "binary-bare", "unknown-type", "no-type", "not-an-object"])
def test_what_the_model_cannot_take_becomes_a_placeholder_naming_it(
    item: Any, provider: str | None, placeholder: str
) -> None:
    assert _user_content([item], provider) == [placeholder]


def test_a_text_part_without_text_is_empty_text() -> None:
    assert _user_content([{"type": "text", "text": 5}, {"type": "text"}]) == ["", ""]


@pytest.mark.parametrize(("mime", "expected"), [
    ("image/png", ImageUrl(url="https://x/f", media_type="image/png")),
    ("audio/wav", AudioUrl(url="https://x/f", media_type="audio/wav")),
    ("video/mp4", VideoUrl(url="https://x/f", media_type="video/mp4")),
    ("application/pdf", DocumentUrl(url="https://x/f", media_type="application/pdf")),
    ("text/image/x", DocumentUrl(url="https://x/f", media_type="text/image/x")),
])
def test_a_deprecated_binary_url_part_is_typed_by_its_mime_type(mime: str, expected: Any) -> None:
    [part] = _user_content([{"type": "binary", "mimeType": mime, "url": "https://x/f"}])
    assert part == expected and part.media_type == mime


def test_a_deprecated_binary_part_without_a_mime_type_is_a_document() -> None:
    assert _user_content([{"type": "binary", "url": "https://x/f"}]) == [
        DocumentUrl(url="https://x/f")]


def test_a_deprecated_binary_data_part_is_inline_data_of_its_mime_type() -> None:
    assert _user_content([{"type": "binary", "mimeType": "image/png", "data": B64}]) == [
        BinaryContent(data=b"\x89PNG", media_type="image/png")]


def test_a_tool_result_keeps_its_text_or_its_parts_when_it_has_media() -> None:
    assert tool_return_content("plain", "openai") == "plain"
    assert tool_return_content([{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                {"type": "text"}, "stray"], "openai") == "a\nb"
    assert tool_return_content(None, "openai") == ""
    assert tool_return_content(42, "openai") == "42"
    assert tool_return_content([
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "file", "value": "f-1"}},
        {"type": "sticker"},
    ], "openai") == ["see", UploadedFile(file_id="f-1", provider_name="openai")]
    assert tool_return_content([{"type": "sticker"}], "openai") == ""


def test_roles_become_requests_and_responses_with_consecutive_parts_grouped() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Dev."}]},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
        {"role": "assistant", "content": None},
        {"role": "activity", "content": "ignored"},
        {"role": "user", "content": None},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("request", [("SystemPromptPart", "Be brief."), ("SystemPromptPart", "Dev."),
                     ("UserPromptPart", "Hi")]),
        ("response", [("TextPart", "Hello")]),
        ("request", [("UserPromptPart", "")]),
    ]


def test_tool_calls_pair_with_their_results_and_unpaired_ones_are_dropped() -> None:
    """A failed result carries its text, or the error when it has none."""
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "toolCalls": [_call("c1"), _call("c2", "fetch", None),
                                            _call("orphan"), "not a call", {"id": 7}]},
        {"role": "tool", "toolCallId": "c1", "content": "one"},
        {"role": "tool", "toolCallId": "c2", "content": "", "error": "boom"},
        {"role": "tool", "toolCallId": "stray", "content": "lost"},
        {"role": "tool", "toolCallId": 9, "content": "lost"},
        {"role": "assistant", "toolCalls": [_call("c3")]},
        {"role": "tool", "toolCallId": "c3", "content": "why", "error": "bad"},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("request", [("UserPromptPart", "go")]),
        ("response", [("call", "lookup", '{"q":1}', "c1"), ("call", "fetch", "{}", "c2")]),
        ("request", [("result", "lookup", "one", "c1", "success"),
                     ("result", "fetch", "boom", "c2", "failed")]),
        ("response", [("call", "lookup", '{"q":1}', "c3")]),
        ("request", [("result", "lookup", "why", "c3", "failed")]),
    ]


def test_an_id_used_twice_reaches_the_model_renamed_and_results_pair_with_the_latest_call() -> None:
    messages = [
        {"role": "assistant", "toolCalls": [_call("c1", "a")]},
        {"role": "tool", "toolCallId": "c1", "content": "ra"},
        {"role": "assistant", "toolCalls": [_call("c1", "b"), _call("c1-2", "x"),
                                            _call("c1", "c")]},
        {"role": "tool", "toolCallId": "c1", "content": "rb"},
        {"role": "tool", "toolCallId": "c1", "content": "rc"},
        {"role": "tool", "toolCallId": "c1-2", "content": "rx"},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("response", [("call", "a", '{"q":1}', "c1")]),
        ("request", [("result", "a", "ra", "c1", "success")]),
        ("response", [("call", "b", '{"q":1}', "c1-3"), ("call", "x", '{"q":1}', "c1-2"),
                      ("call", "c", '{"q":1}', "c1-4")]),
        ("request", [("result", "b", "rb", "c1-3", "success"),
                     ("result", "c", "rc", "c1-4", "success"),
                     ("result", "x", "rx", "c1-2", "success")]),
    ]


def test_an_unanswered_later_call_leaves_the_earlier_call_of_its_id_paired() -> None:
    messages = [
        {"role": "assistant", "toolCalls": [_call("c1", "a")]},
        {"role": "assistant", "toolCalls": [_call("c1", "b")]},
        {"role": "tool", "toolCallId": "c1", "content": "rb"},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("response", [("call", "b", '{"q":1}', "c1-2")]),
        ("request", [("result", "b", "rb", "c1-2", "success")]),
    ]


def _reasoning(**producer: Any) -> dict[str, Any]:
    return {"role": "reasoning", "content": [{"type": "text", "text": "thought"}],
            "encryptedValue": "sig", "metadata": producer_metadata(**producer)}


def test_reasoning_reaches_only_the_model_that_produced_it() -> None:
    mine = _reasoning(provider="openai", model="gpt", id="rs-1", details={"k": "v"},
                      unused=None)
    assert mine["metadata"] == {"iobridge": {"provider": "openai", "model": "gpt",
                                             "id": "rs-1", "details": {"k": "v"}}}
    [response] = to_model_messages([mine], provider="openai", model_name="gpt")
    [part] = response.parts
    assert part == ThinkingPart(content="thought", signature="sig", provider_name="openai",
                                id="rs-1", provider_details={"k": "v"})
    bare = _reasoning(provider="openai", model="gpt", id=5, details="x")
    [response] = to_model_messages([bare], provider="openai", model_name="gpt")
    assert response.parts == [ThinkingPart(content="thought", signature="sig",
                                           provider_name="openai")]
    others: list[tuple[Mapping[str, Any], str | None, str | None]] = [
        (mine, "openai", "gpt-mini"),
        (mine, "anthropic", "gpt"),
        (mine, None, "gpt"),
        ({**mine, "encryptedValue": None}, "openai", "gpt"),
        ({**mine, "metadata": {"other": {}}}, "openai", "gpt"),
        ({**mine, "metadata": None}, "openai", "gpt"),
    ]
    for message, provider, model in others:
        assert to_model_messages([message], provider=provider, model_name=model) == []


def test_a_blank_or_non_string_mime_type_is_no_mime_type() -> None:
    assert _user_content([
        {"type": "image", "source": {"type": "url", "value": "https://x/a", "mimeType": ""}},
        {"type": "audio", "source": {"type": "url", "value": "https://x/b", "mimeType": 5}},
        {"type": "video", "source": {"type": "data", "value": B64, "mimeType": ""}},
    ]) == [ImageUrl(url="https://x/a"), AudioUrl(url="https://x/b"),
           "[video attachment not available to the model]"]


def test_calls_without_a_string_id_are_skipped_and_the_others_kept() -> None:
    messages = [
        {"role": "assistant", "toolCalls": [{"id": 7}, _call("c5")]},
        {"role": "tool", "toolCallId": ["c5"], "content": "unhashable id"},
        {"role": "tool", "toolCallId": "c5", "content": "five"},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("response", [("call", "lookup", '{"q":1}', "c5")]),
        ("request", [("result", "lookup", "five", "c5", "success")]),
    ]


def test_a_deprecated_binary_part_with_a_non_string_mime_type_is_a_document() -> None:
    assert _user_content([{"type": "binary", "mimeType": 5, "url": "https://x/f"}]) == [
        DocumentUrl(url="https://x/f")]


def test_a_context_entry_without_a_value_is_given_with_an_empty_one() -> None:
    assert context_instructions([{"description": "Empty"}]) == (
        "Context provided by the application:\n- Empty: ")


def test_a_call_without_a_function_name_or_arguments_is_given_as_such() -> None:
    messages = [
        {"role": "assistant", "toolCalls": [{"id": "c9", "function": {}}]},
        {"role": "tool", "toolCallId": "c9", "content": "ok"},
    ]
    assert _shape(to_model_messages(messages)) == [
        ("response", [("call", "", "{}", "c9")]),
        ("request", [("result", "", "ok", "c9", "success")]),
    ]


def test_a_tool_result_s_provider_file_reaches_the_run_s_provider() -> None:
    messages = [
        {"role": "assistant", "toolCalls": [_call("c1")]},
        {"role": "tool", "toolCallId": "c1", "content": [
            {"type": "image", "source": {"type": "file", "value": "f-9"}}]},
    ]
    [_, request] = to_model_messages(messages, provider="openai")
    [part] = request.parts
    assert isinstance(part, ToolReturnPart)
    assert part.content == [UploadedFile(file_id="f-9", provider_name="openai")]
