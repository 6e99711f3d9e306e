"""Thread titles (``memoryOptions.generateTitle``): the agent's ``title`` hook, what it is
shown, its deadline, and the first-message fallback, as a client re-listing threads sees it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from tests.helpers import parse_sse, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.runtime import thread_memory
from iobridge.runtime.thread_memory import TITLE_CONTEXT, TITLE_LENGTH, title_from

TITLED = {"memoryOptions": {"generateTitle": True}}


async def _reply(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    yield "the reply"


class Titler(FunctionAgent):
    """An agent whose title hook records what it was shown and answers ``answer``."""

    def __init__(self, answer: str | None = "A generated title", *, fail: bool = False,
                 hang: bool = False) -> None:
        super().__init__(_reply, id="titler")
        self.answer, self.fail, self.hang = answer, fail, hang
        self.seen: list[list[dict[str, Any]]] = []

    async def title(self, messages: Sequence[dict[str, Any]]) -> str | None:
        self.seen.append([dict(m) for m in messages])
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail:
            raise ValueError("no title today")
        return self.answer


async def _title(client: httpx.AsyncClient, thread_id: str = "t1") -> Any:
    response = await client.get(f"/io-bridge/threads/{thread_id}")
    assert response.status_code == 200, response.text
    return response.json()["title"]


async def _run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = parse_sse((await client.post("/io-bridge/run", json=body)).text)
    assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events
    return events


async def test_the_agents_title_hook_names_the_thread_from_the_conversation(serve: Any) -> None:
    agent = Titler()
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url) as client:
        await _run(client, run_body("Plan a trip", agentId="titler", **TITLED))
        assert await _title(client) == "A generated title"
        # Titled once: a later run does not ask again.
        await _run(client, run_body("And back", run_id="r2", agentId="titler", **TITLED))
        assert await _title(client) == "A generated title"
    assert len(agent.seen) == 1
    assert [(m["role"], m["content"]) for m in agent.seen[0]] == [
        ("user", "Plan a trip"), ("assistant", "the reply")]


@pytest.mark.parametrize(("last_messages", "shown"), [
    (2, ["question 1", "question 2", "the reply"]),
    (4, ["question 1", "the reply", "question 2", "the reply"]),  # the first one not twice
])
async def test_the_hook_sees_the_first_message_and_the_window_before_the_new_ones(
    serve: Any, last_messages: int, shown: list[str],
) -> None:
    agent = Titler()
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url) as client:
        for n in (1, 2):  # two runs on a thread nobody asked to title
            await _run(client, run_body(f"question {n}", run_id=f"r{n}", agentId="titler"))
        assert await _title(client) == ""  # untitled
        body = run_body("question 3", run_id="r3", agentId="titler",
                        memoryOptions={"generateTitle": True, "lastMessages": last_messages})
        await _run(client, body)
        assert await _title(client) == "A generated title"
    # The first user message, then the stored window (not repeating it), then this run.
    assert [m["content"] for m in agent.seen[0]] == [*shown, "question 3", "the reply"]


async def test_the_hook_is_shown_at_most_title_context_messages(serve: Any) -> None:
    agent = Titler()
    server = serve(agents=[agent])
    history = [{"id": f"m{n}", "role": "user" if n % 2 == 0 else "assistant",
                "content": f"message {n}"} for n in range(TITLE_CONTEXT + 5)]
    body = {**run_body("unused", agentId="titler", **TITLED), "messages": history}
    async with httpx.AsyncClient(base_url=server.url) as client:
        await _run(client, body)
    assert [m["content"] for m in agent.seen[0]] == [
        f"message {n}" for n in range(TITLE_CONTEXT)]


@pytest.mark.parametrize(("fail", "warnings"), [
    (False, []), (True, ["agent titler could not title thread t1: ValueError"]),
], ids=["none", "raises"])
async def test_without_a_generated_title_the_first_message_names_the_thread(
    serve: Any, caplog: pytest.LogCaptureFixture, fail: bool, warnings: list[str],
) -> None:
    server = serve(agents=[Titler(None, fail=fail)])
    with caplog.at_level(logging.WARNING, logger="iobridge.runtime"):
        async with httpx.AsyncClient(base_url=server.url) as client:
            await _run(client, run_body("  Plan   a trip ", agentId="titler", **TITLED))
            assert await _title(client) == "Plan a trip"
    logged = [r.getMessage() for r in caplog.records if "could not title" in r.getMessage()]
    assert logged == warnings


async def test_a_title_hook_past_its_deadline_falls_back_to_the_first_message(
    serve: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(thread_memory, "TITLE_DEADLINE", 0.05)
    agent = Titler(hang=True)
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        events = await _run(client, run_body("Plan a trip", agentId="titler", **TITLED))
        assert events[-1]["type"] == "RUN_FINISHED"
        assert await _title(client) == "Plan a trip"
    assert len(agent.seen) == 1


async def test_a_failed_run_is_titled_from_its_first_message_without_the_hook(
    serve: Any,
) -> None:
    async def broken(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "half"
        raise RuntimeError("boom")

    agent = Titler()
    agent.func = broken
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url) as client:
        events = await _run(client, run_body("Plan a trip", agentId="titler", **TITLED))
        assert events[-1]["type"] == "RUN_ERROR"
        assert await _title(client) == "Plan a trip"
    assert agent.seen == []


async def test_read_only_runs_are_never_titled(serve: Any) -> None:
    agent = Titler()
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url) as client:
        await _run(client, run_body("first", agentId="titler"))
        body = run_body("second", run_id="r2", agentId="titler",
                        memoryOptions={"generateTitle": True, "readOnly": True})
        await _run(client, body)
        assert await _title(client) == ""  # untitled
    assert agent.seen == []


# -- the fallback title -------------------------------------------------------------------


def _user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_the_fallback_is_the_first_user_message_with_text() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "hello"},
        _user("   "),
        _user(None),
        _user("  the\n real   question "),
        _user("a later one"),
    ]
    assert title_from(messages) == "the real question"
    assert title_from([{"role": "assistant", "content": "x"}]) is None
    assert title_from([]) is None


def test_content_parts_give_their_text_and_skip_the_rest() -> None:
    parts = [{"type": "text", "text": "look at"}, {"type": "image", "url": "u"}, "junk",
             {"type": "text", "text": "this"}]
    assert title_from([_user(parts)]) == "look at this"
    assert title_from([_user([{"type": "image", "url": "u"}]), _user("second")]) == "second"


def test_titles_at_the_limit_are_kept_and_longer_ones_cut_at_a_word() -> None:
    exact = "x" * (TITLE_LENGTH - 2) + " y"
    assert title_from([_user(exact)]) == exact
    # One character over (81): cut at the last word that fits.
    over = "x" * (TITLE_LENGTH - 2) + " yz"
    assert len(over) == TITLE_LENGTH + 1
    assert title_from([_user(over)]) == "x" * (TITLE_LENGTH - 2) + "…"
    # The 80th character is a space: the cut keeps every word before it.
    longer = "a" * 40 + " " + "b" * (TITLE_LENGTH - 42) + " tail"
    assert title_from([_user(longer)]) == "a" * 40 + " " + "b" * (TITLE_LENGTH - 42) + "…"
    words = "one two " + "z" * TITLE_LENGTH
    assert title_from([_user(words)]) == "one two…"
    # A word ending exactly at the 80th character is whole: it stays.
    whole = "c" * 39 + " " + "d" * 40 + " more"
    assert title_from([_user(whole)]) == "c" * 39 + " " + "d" * 40 + "…"
    # One word longer than the limit is cut at the limit.
    assert title_from([_user("e" * (TITLE_LENGTH + 5))]) == "e" * TITLE_LENGTH + "…"
