"""The demo agent's runs through a Backend (in process): what it says about its server tools'
results and errors, the results of frontend tools a client sends back in the next run, and
the approval it asks for with an interrupt and what it says of each answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    async with Backend(Settings(database_url="memory://")) as opened:
        yield opened


async def _run(backend: Backend, body: dict[str, Any]) -> list[dict[str, Any]]:
    run = await backend.start_run(ANONYMOUS, {"forwardedProps": {}, **body})
    await run.task
    return [json.loads(data) for _, data in run.log.entries(0)]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _user(thread: str, run: str, text: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run,
            "messages": [{"id": f"u-{run}", "role": "user", "content": text}]}


async def test_it_reports_each_server_tool_result_in_words(backend: Backend) -> None:
    events = await _run(backend, _user("t1", "r1", "compute 6 * 7 please"))
    assert _text(events).endswith("6 * 7 = 42.")
    timed = _text(await _run(backend, _user("t2", "r2", "what time is it")))
    assert timed.startswith("Calling current_time.")
    assert timed.endswith("(UTC).") and "The current time is 20" in timed


async def test_a_server_tool_error_is_reported_with_its_reason(backend: Backend) -> None:
    text = _text(await _run(backend, _user("t", "r", "calculate 1 / 0")))
    assert text.endswith("The tool calculate reported an error: division by zero.")


async def test_the_next_run_reports_the_frontend_results_the_client_sent(
    backend: Backend,
) -> None:
    """The client ran two frontend tools and sends their results (one as text parts, one
    empty): each is reported, in order."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    other = {"id": "c2", "type": "function", "function": {"name": "show_notice",
                                                           "arguments": "{}"}}
    messages = [
        {"id": "u", "role": "user", "content": "get_weather and show_notice"},
        {"id": "a", "role": "assistant", "toolCalls": [call, other]},
        {"id": "t1", "role": "tool", "toolCallId": "c1",
         "content": [{"type": "text", "text": "sunny,"}, {"type": "text", "text": "21 C"}]},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": ""},
    ]
    text = _text(await _run(backend, {"threadId": "t", "runId": "r", "messages": messages}))
    assert text == ("The tool get_weather returned sunny, 21 C. "
                    "The tool show_notice returned (empty).")


async def _approval(backend: Backend, thread: str, text: str) -> dict[str, Any]:
    [*_, finished] = await _run(backend, _user(thread, f"{thread}-1", text))
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt"
    [interrupt] = finished["outcome"]["interrupts"]
    return dict(interrupt)


async def _answer(backend: Backend, thread: str, entry: dict[str, Any]) -> str:
    body = {"threadId": thread, "runId": f"{thread}-2", "messages": [], "resume": [entry]}
    return _text(await _run(backend, body))


async def test_an_approval_is_asked_with_its_action_and_each_answer_is_said(
    backend: Backend,
) -> None:
    interrupt = await _approval(backend, "a", "approve deploy v2")
    assert interrupt["reason"] == "approval"
    assert interrupt["message"] == "Approve: deploy v2?"
    assert interrupt["metadata"] == {"action": "deploy v2"}
    assert interrupt["responseSchema"] == {
        "type": "object", "properties": {"approved": {"type": "boolean"}},
        "required": ["approved"]}
    answers = [
        ({"status": "resolved", "payload": {"approved": True}}, "Approved: deploy v2."),
        ({"status": "resolved", "payload": {"approved": False}}, "Not approved: deploy v2."),
        ({"status": "resolved", "payload": {"approved": "yes"}}, "Not approved: deploy v2."),
        ({"status": "cancelled"}, "Cancelled: deploy v2."),
    ]
    for n, (entry, said) in enumerate(answers):
        thread = f"a{n}"
        asked = await _approval(backend, thread, "approve deploy v2")
        assert await _answer(backend, thread, {"interruptId": asked["id"], **entry}) == said
    bare = await _approval(backend, "bare", "Approve")
    assert bare["message"] == "Approve: the action?"
    assert bare["metadata"] == {"action": "the action"}
