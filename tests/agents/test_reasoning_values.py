"""Provider reasoning artefacts (thinking signatures, encrypted reasoning): streamed as
REASONING_ENCRYPTED_VALUE, kept with the thread, and sent back on the next turn to the model
that produced them, and to no other (over real HTTP, with a FunctionModel)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from ag_ui.core import ReasoningEncryptedValueEvent, ReasoningMessage
from pydantic_ai.messages import ModelMessage, ModelResponse, ThinkingPart
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, FunctionModel
from tests.helpers import parse_sse, run_body

from agui_verify import verify_events
from iobridge.agents.history import to_model_messages
from iobridge.agents.model import ModelAgent


def model(seen: list[list[ModelMessage]], name: str, signature: str | None = "sig-abc",
          thought: str | None = "pondering") -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        seen.append(list(messages))
        if signature is not None or thought:
            yield {0: DeltaThinkingPart(content=thought, signature=signature)}
        yield "Answer."

    return FunctionModel(stream_function=stream, model_name=name)


def thinking_parts(messages: list[ModelMessage]) -> list[ThinkingPart]:
    return [p for m in messages if isinstance(m, ModelResponse) for p in m.parts
            if isinstance(p, ThinkingPart)]


async def run(server: Any, agent_id: str, run_id: str, text: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        response = await client.post("/io-bridge/run", json=run_body(
            text, run_id=run_id, agentId=agent_id))
    events = parse_sse(response.text)
    verify_events(events, thread_id="t1", run_id=run_id)
    return events


async def stored(server: Any) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.get("/io-bridge/threads/t1/messages", params={"format": "agui"})
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


async def test_a_signature_is_streamed_stored_and_returned_to_its_model_only(serve: Any) -> None:
    seen_a: list[list[ModelMessage]] = []
    seen_b: list[list[ModelMessage]] = []
    a = ModelAgent(id="a", model=model(seen_a, "thinker-1"))
    b = ModelAgent(id="b", model=model(seen_b, "thinker-2", signature=None, thought=None))
    server = serve(agents=[a, b])

    first = await run(server, "a", "r1", "why?")
    [value] = [e for e in first if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    ReasoningEncryptedValueEvent.model_validate(value)
    reasoning_id = next(e for e in first if e["type"] == "REASONING_MESSAGE_START")["messageId"]
    assert value == {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message",
                     "entityId": reasoning_id, "encryptedValue": "sig-abc",
                     "metadata": {"iobridge": {"provider": "function", "model": "thinker-1"}}}
    # The value comes while its reasoning message is open, and before the run ends.
    kinds = [e["type"] for e in first]
    assert kinds.index("REASONING_ENCRYPTED_VALUE") < kinds.index("REASONING_MESSAGE_END")

    [reasoning] = [m for m in await stored(server) if m["role"] == "reasoning"]
    assert reasoning == {"id": reasoning_id, "role": "reasoning", "content": "pondering",
                         "encryptedValue": "sig-abc",
                         "metadata": {"iobridge": {"provider": "function", "model": "thinker-1"}}}
    ReasoningMessage.model_validate(reasoning)

    await run(server, "a", "r2", "and then?")
    [returned] = thinking_parts(seen_a[-1])
    assert (returned.content, returned.signature, returned.provider_name) == (
        "pondering", "sig-abc", "function")
    # Another model on the same thread gets neither the signature nor the reasoning text.
    await run(server, "b", "r3", "your turn")
    assert thinking_parts(seen_b[-1]) == []
    assert "pondering" not in repr(seen_b[-1])


async def test_opaque_reasoning_without_text_is_held_by_an_empty_reasoning_message(
    serve: Any
) -> None:
    seen: list[list[ModelMessage]] = []
    server = serve(agents=[ModelAgent(id="a", model=model(seen, "zdr", signature="enc-1",
                                                          thought=None))])
    events = await run(server, "a", "r1", "secret?")
    kinds = [e["type"] for e in events]
    assert kinds[1:6] == ["STEP_STARTED", "REASONING_START", "REASONING_MESSAGE_START",
                          "REASONING_ENCRYPTED_VALUE", "REASONING_MESSAGE_END"]
    [reasoning] = [m for m in await stored(server) if m["role"] == "reasoning"]
    assert reasoning["content"] == "" and reasoning["encryptedValue"] == "enc-1"
    await run(server, "a", "r2", "again")
    [returned] = thinking_parts(seen[-1])
    assert (returned.content, returned.signature) == ("", "enc-1")


def test_history_returns_an_artefact_only_to_the_model_named_in_its_metadata() -> None:
    producer = {"iobridge": {"provider": "anthropic", "model": "claude-x", "id": "th_1",
                             "details": {"redacted": False}}}
    messages = [
        {"id": "u", "role": "user", "content": "hi"},
        {"id": "r", "role": "reasoning", "content": "think", "encryptedValue": "sig",
         "metadata": producer},
        {"id": "a", "role": "assistant", "content": "hello"},
        {"id": "r2", "role": "reasoning", "content": "no artefact"},
    ]
    [part] = thinking_parts(to_model_messages(messages, provider="anthropic",
                                              model_name="claude-x"))
    assert part == ThinkingPart(content="think", signature="sig", provider_name="anthropic",
                                id="th_1", provider_details={"redacted": False})
    for provider, name in (("anthropic", "claude-y"), ("openai", "claude-x"), (None, None)):
        assert thinking_parts(to_model_messages(messages, provider=provider,
                                                model_name=name)) == []
