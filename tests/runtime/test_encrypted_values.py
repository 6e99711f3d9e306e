"""Where an agent's opaque reasoning artefact (``ReasoningEncryptedValue``) lands, in
process: on the tool call it names, on the open reasoning message, else on the last one, else
on an empty reasoning message opened for it (closing the open text first)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from tests.helpers import run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import (
    AgentOutput,
    ReasoningDelta,
    ReasoningEncryptedValue,
    ReasoningEnd,
    TextEnd,
)
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings

META = {"iobridge": {"provider": "p", "model": "m"}}


async def events(outputs: Callable[[], list[AgentOutput]]) -> list[dict[str, Any]]:
    """The run's events (RUN_STARTED and the terminal event left out)."""

    async def agent(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for output in outputs():
            yield output

    async with Backend(Settings(database_url="memory://"),
                       agents=[FunctionAgent(agent, id="values")]) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("go", agentId="values"))
        await asyncio.wait_for(asyncio.shield(run.task), 10)
        decoded = [orjson.loads(data) for _, data in run.log.entries()]
    assert decoded[-1]["type"] == "RUN_FINISHED"
    return decoded[1:-1]


def value_event(kind: str, entity: str, value: str, metadata: Any = None) -> dict[str, Any]:
    event = {"type": "REASONING_ENCRYPTED_VALUE", "subtype": kind, "entityId": entity,
             "encryptedValue": value}
    if metadata is not None:
        event["metadata"] = metadata
    return event


async def test_a_value_naming_a_tool_call_goes_on_that_call_and_opens_nothing() -> None:
    seen = await events(lambda: [ReasoningEncryptedValue(value="v1", tool_call_id="call-1",
                                                         metadata=META)])
    assert seen == [value_event("tool-call", "call-1", "v1", META)]


async def test_a_value_with_no_reasoning_before_it_gets_an_empty_reasoning_message() -> None:
    seen = await events(lambda: ["Hello", ReasoningEncryptedValue(value="v1")])
    kinds = [e["type"] for e in seen]
    assert kinds == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                     "REASONING_START", "REASONING_MESSAGE_START",
                     "REASONING_ENCRYPTED_VALUE", "REASONING_MESSAGE_END", "REASONING_END"]
    span, message = seen[3]["messageId"], seen[4]["messageId"]
    assert span != message and message != seen[0]["messageId"]
    assert seen[5] == value_event("message", message, "v1")


async def test_a_value_goes_on_the_open_reasoning_message_else_the_last_one() -> None:
    seen = await events(lambda: [
        ReasoningDelta(delta="thinking"), ReasoningEncryptedValue(value="open"),
        ReasoningEnd(), "Answer", TextEnd(), ReasoningEncryptedValue(value="late",
                                                                     metadata=META)])
    kinds = [e["type"] for e in seen]
    assert kinds.count("REASONING_MESSAGE_START") == 1 and kinds.count("REASONING_START") == 1
    message = next(e["messageId"] for e in seen if e["type"] == "REASONING_MESSAGE_START")
    values = [e for e in seen if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    assert values == [value_event("message", message, "open"),
                      value_event("message", message, "late", META)]
    # The first while its message is open, the second after the answer.
    assert kinds.index("REASONING_ENCRYPTED_VALUE") < kinds.index("REASONING_MESSAGE_END")
    assert kinds[-1] == "REASONING_ENCRYPTED_VALUE"


async def test_while_a_second_reasoning_message_is_open_a_value_goes_on_it() -> None:
    seen = await events(lambda: [
        ReasoningDelta(delta="one"), ReasoningEnd(), ReasoningDelta(delta="two"),
        ReasoningEncryptedValue(value="v2"), ReasoningEnd()])
    first, second = [e["messageId"] for e in seen if e["type"] == "REASONING_MESSAGE_START"]
    assert first != second
    assert [e for e in seen if e["type"] == "REASONING_ENCRYPTED_VALUE"] == [
        value_event("message", second, "v2")]
