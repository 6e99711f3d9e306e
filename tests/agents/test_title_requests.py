"""What a model agent's title request sends (the transcript, bounded) and how its answer is
cleaned into a title, against the local OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

import pytest
from fake_openai import FakeOpenAI, text

from iobridge.agents.model import TITLE_CONTEXT_CHARS, ModelAgent, _clean_title
from iobridge.agents.providers import build_model


def title_agent(base_url: str) -> ModelAgent:
    return ModelAgent(id="t", model=build_model("openai:fake", base_url=base_url, environ={}))


async def transcript_sent(fake_openai: FakeOpenAI, messages: list[dict[str, Any]]) -> str:
    """The conversation the title request carries (its one user message)."""
    fake_openai.push(text("A title"))
    assert await title_agent(fake_openai.base_url).title(messages) == "A title"
    [request] = fake_openai.requests
    [user] = [m for m in request["messages"] if m["role"] == "user"]
    content: str = user["content"]
    return content


async def test_the_transcript_holds_only_user_and_assistant_text(
    fake_openai: FakeOpenAI,
) -> None:
    transcript = await transcript_sent(fake_openai, [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Plan"},
                                     {"type": "image", "url": "x"}, "odd",
                                     {"type": "text", "text": "a  trip"}]},
        {"role": "assistant", "content": None, "toolCalls": [{"id": "c"}]},
        {"role": "tool", "content": "result", "toolCallId": "c"},
        {"role": "assistant", "content": "  "},
        {"role": "assistant", "content": "Where\nto?"},
    ])
    assert transcript == "User: Plan a trip\nAssistant: Where to?"


async def test_a_conversation_without_text_gets_no_title_request(
    fake_openai: FakeOpenAI,
) -> None:
    agent = title_agent(fake_openai.base_url)
    assert await agent.title([{"role": "tool", "content": "x"},
                              {"role": "user", "content": ""}]) is None
    assert fake_openai.requests == []


async def test_the_transcript_stops_at_its_size_limit(fake_openai: FakeOpenAI) -> None:
    first = "a" * 1500
    second = "b" * 1500
    transcript = await transcript_sent(fake_openai, [
        {"role": "user", "content": first},
        {"role": "assistant", "content": second},
        {"role": "user", "content": "never sent"},
    ])
    kept = f"User: {first}\n" + f"Assistant: {second}"[: TITLE_CONTEXT_CHARS - 1506]
    assert transcript == kept
    assert len(transcript) == TITLE_CONTEXT_CHARS + 1  # the limit, and one line break


@pytest.mark.parametrize(
    ("raw", "title"),
    [("", None), ("  \n \n", None), ("XL sizes X", "XL sizes X"), ("Box X.", "Box X"),
     ("a" * 79 + " tail", "a" * 79), ("**Trip**", "Trip")],
)
def test_a_title_answer_is_cleaned_to_one_line(raw: str, title: str | None) -> None:
    assert _clean_title(raw) == title
