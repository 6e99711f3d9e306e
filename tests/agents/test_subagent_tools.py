"""The tool a model calls to run a subagent, through a Backend in process: the declaration
the model and discovery see, and the bounds of the ``task`` it hands over (checked before any
subagent starts)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.agents.fake_openai import FakeOpenAI, calls, text

from iobridge.agents.subagents import MAX_TASK_CHARS, subagent_tool, task_messages
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS
from iobridge.config import Settings
from iobridge.errors import InputError

TASK_PARAMETERS = {
    "type": "object",
    "properties": {"task": {
        "type": "string",
        "description": "What the agent should do, with everything it needs to know.",
    }},
    "required": ["task"],
}


@pytest.fixture
async def backend(fake_openai: FakeOpenAI) -> AsyncIterator[Backend]:
    common: dict[str, Any] = {"model": "openai:gpt-4o-mini", "base_url": fake_openai.base_url,
              "api_key_env": "HOME"}
    agents: list[dict[str, Any]] = [
        {"id": "lead", "instructions": "You lead.", "subagents": ["helper", "quiet"], **common},
        {"id": "helper", "description": "Finds facts.", "instructions": "You help.", **common},
        {"id": "quiet", "name": "Quiet one", "instructions": "You help.", **common},
    ]
    async with Backend(Settings(agents=agents, database_url="memory://")) as opened:
        yield opened


async def _run(backend: Backend, say: str) -> list[dict[str, Any]]:
    run = await backend.start_run(ANONYMOUS, {
        "threadId": "t", "runId": "r", "agentId": "lead", "forwardedProps": {},
        "messages": [{"id": "u", "role": "user", "content": say}],
    })
    await run.task
    return [json.loads(data) for _, data in run.log.entries(0)]


def test_the_subagent_tools_are_declared_with_one_task_parameter(backend: Backend) -> None:
    """A subagent without a description is described by its name."""
    items = {t["name"]: t for t in backend.describe_agent("lead")["capabilities"]["tools"]["items"]}
    assert items["helper"] == {"name": "helper", "description": "Finds facts.",
                               "parameters": TASK_PARAMETERS}
    assert items["quiet"] == {"name": "quiet",
                              "description": "Ask the agent 'Quiet one' to do a task.",
                              "parameters": TASK_PARAMETERS}


async def test_the_model_is_sent_the_subagent_tool_s_schema(
    backend: Backend, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(text("hi"))
    await _run(backend, "hello")
    declared = {t["function"]["name"]: t["function"] for t in fake_openai.requests[0]["tools"]}
    assert declared["helper"]["parameters"] == {**TASK_PARAMETERS, "additionalProperties": False}


async def test_a_task_of_exactly_the_limit_reaches_the_subagent_as_its_user_message(
    backend: Backend, fake_openai: FakeOpenAI
) -> None:
    task = "x" * MAX_TASK_CHARS
    fake_openai.push(calls(("c1", "helper", json.dumps({"task": task}))), text("fact"),
                     text("done"))
    events = await _run(backend, "go")
    assert [e["type"] for e in events if e["type"].startswith("SUBAGENT_")] == [
        "SUBAGENT_STARTED", "SUBAGENT_FINISHED"]
    [helper_request] = [r for r in fake_openai.requests
                        if r["messages"][0]["content"] == "You help."]
    assert helper_request["messages"][1:] == [{"role": "user", "content": task}]


TOO_LONG = f"a subagent's task is limited to {MAX_TASK_CHARS} characters"
NO_TASK = "a subagent call needs a non-empty 'task' string"
BAD_TASKS = pytest.mark.parametrize(("args", "reason"), [
    ({"task": "x" * (MAX_TASK_CHARS + 1)}, TOO_LONG), ({"task": "  \n"}, NO_TASK),
    ({"task": 7}, NO_TASK), ({}, NO_TASK),
], ids=["one-past-the-limit", "blank", "not-a-string", "missing"])


@BAD_TASKS
async def test_a_bad_task_is_the_model_s_failed_result_and_no_subagent_starts(
    backend: Backend, fake_openai: FakeOpenAI, args: dict[str, Any], reason: str
) -> None:
    fake_openai.push(calls(("c1", "helper", json.dumps(args))), text("sorry"))
    events = await _run(backend, "go")
    assert not any(e["type"].startswith("SUBAGENT_") for e in events)
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"]) == {"error": reason}
    assert len(fake_openai.requests) == 2


@BAD_TASKS
def test_a_bad_task_is_invalid_tool_args(args: dict[str, Any], reason: str) -> None:
    with pytest.raises(InputError) as raised:
        task_messages(args, "m-1")
    assert (raised.value.code, raised.value.message) == ("INVALID_TOOL_ARGS", reason)


def test_a_task_becomes_one_user_message_with_the_id_given() -> None:
    assert task_messages({"task": "find it"}, "m-1") == [
        {"id": "m-1", "role": "user", "content": "find it"}]


async def test_a_subagent_tool_is_never_invoked_as_a_plain_tool(backend: Backend) -> None:
    """Only the runtime runs a subagent: calling the tool directly is refused."""
    helper = subagent_tool(backend.catalog.get("helper"))
    with pytest.raises(InputError) as raised:
        await helper.invoke({"task": "anything"})
    assert raised.value.code == "SUBAGENT_TOOL"
    assert raised.value.message == "tool 'helper' runs a subagent"
