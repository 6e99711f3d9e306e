"""The conversation tools in a real Chromium, each checked on screen and in what the server
stored: regenerate and edit as server branches with the branch picker (kept across a reload),
a message typed while a run streams following the agent's busy-thread strategy (queued,
interrupting, refused), and a subagent's activity folded under its tool card."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.helpers import LiveServer

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app


class CountingAgent(Agent):
    """Answers ``reply N to: <the last user text>``, N counting its runs: a regenerated
    answer differs from the one it replaces."""

    id = "counting"
    name = "Counting agent"

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        self.runs += 1
        yield f"reply {self.runs} to: {ctx.messages[-1]['content']}"


class GatedAgent(Agent):
    """Says it is working on the message, then waits for the test's gate before it is done:
    a run that holds its thread as long as the test wants."""

    name = "Gated agent"

    def __init__(self, agent_id: str, strategy: Any) -> None:
        self.id = agent_id
        self.multitask_strategy = strategy
        self.gate = threading.Event()

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        said = ctx.messages[-1]["content"]
        yield f"working on {said}. "
        while not self.gate.is_set():
            await asyncio.sleep(0.02)
        yield f"done {said}"


def _thread(page: Any) -> str:
    thread: str = page.evaluate("new URL(location.href).searchParams.get('thread')")
    return thread


def _api(url: str, path: str, **params: str) -> Any:
    answer = httpx.get(f"{url}/io-bridge{path}", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _stored(url: str, thread_id: str, **params: str) -> list[tuple[str, Any]]:
    messages = _api(url, f"/threads/{thread_id}/messages", format="agui", **params)["messages"]
    return [(m["role"], m.get("content")) for m in messages]


def _wait_idle(page: Any) -> None:
    expect(page.locator("#stop")).to_be_disabled()
    page.wait_for_function("() => document.body.dataset.phase === 'idle'")


def _send(page: Any, words: str) -> None:
    page.locator("#text").fill(words)
    page.locator("#text").press("Enter")


def test_regenerate_and_edit_make_branches_and_the_picker_switches_them(
    serve: Any, new_page: Any, axe: Any, shoot: Any
) -> None:
    server = serve(agents=[CountingAgent()], default_agent="counting")
    page = new_page(width=1280, height=900)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "hello")
    expect(page.locator(".msg.assistant")).to_have_text(["reply 1 to: hello"])
    _wait_idle(page)
    thread = _thread(page)
    expect(page.locator(".branch-picker")).to_have_count(0)  # one branch: no picker

    page.get_by_role("button", name="Regenerate this answer").click()
    expect(page.locator(".msg.assistant")).to_have_text(["reply 2 to: hello"])
    _wait_idle(page)
    picker = page.locator(".branch-picker")
    expect(picker).to_have_count(1)
    expect(picker.locator(".count")).to_have_text("2/2")
    expect(page.locator(".msg.user")).to_have_text(["hello"])
    # The server holds both versions: the new current branch and the old one.
    branches = _api(server.url, f"/threads/{thread}/branches")["branches"]
    assert [b["current"] for b in branches] == [False, True]
    assert _stored(server.url, thread) == [("user", "hello"), ("assistant", "reply 2 to: hello")]
    assert _stored(server.url, thread, branch=branches[0]["id"]) == [
        ("user", "hello"), ("assistant", "reply 1 to: hello")]

    page.get_by_role("button", name="Previous version").click()
    expect(page.locator(".msg.assistant")).to_have_text(["reply 1 to: hello"])
    expect(page.locator(".branch-picker .count")).to_have_text("1/2")
    _wait_idle(page)
    branches = _api(server.url, f"/threads/{thread}/branches")["branches"]
    assert [b["current"] for b in branches] == [True, False]  # switched on the server

    page.reload()  # the shown branch is the server's current one
    _wait_idle(page)
    expect(page.locator(".msg.assistant")).to_have_text(["reply 1 to: hello"])
    expect(page.locator(".branch-picker .count")).to_have_text("1/2")

    page.get_by_role("button", name="Edit this message").click()
    editor = page.get_by_role("textbox", name="Edit the message")
    expect(editor).to_have_value("hello")
    editor.fill("bye")
    page.get_by_role("button", name="Send the edited message").click()
    expect(page.locator(".msg.user")).to_have_text(["bye"])
    expect(page.locator(".msg.assistant")).to_have_text(["reply 3 to: bye"])
    _wait_idle(page)
    # The edited message has siblings (the branches that start with "hello").
    expect(page.locator(".msg-tools.user .branch-picker .count")).to_have_text("2/2")
    assert _stored(server.url, thread) == [("user", "bye"), ("assistant", "reply 3 to: bye")]
    branches = _api(server.url, f"/threads/{thread}/branches")["branches"]
    assert len(branches) == 3 and branches[-1]["current"]
    assert axe(page) == []
    shoot(page, "conversation-branches-1280")

    # Back to "hello": the newest branch with it (the regenerated answer) is shown.
    page.locator(".msg-tools.user").get_by_role("button", name="Previous version").click()
    expect(page.locator(".msg.user")).to_have_text(["hello"])
    expect(page.locator(".msg.assistant")).to_have_text(["reply 2 to: hello"])
    _wait_idle(page)
    assert _stored(server.url, thread) == [("user", "hello"), ("assistant", "reply 2 to: hello")]
    assert page.errors == []


def test_a_message_sent_while_the_agent_answers_is_queued_then_runs(
    serve: Any, new_page: Any, axe: Any, shoot: Any
) -> None:
    agent = GatedAgent("queuing", "enqueue")
    server = serve(agents=[agent], default_agent="queuing")
    page = new_page(width=390, height=844)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "first")
    expect(page.locator(".msg.assistant")).to_have_text(["working on first."])
    expect(page.locator("#composer-status")).to_contain_text("queues your message")
    thread = _thread(page)

    _send(page, "second")  # the first run still holds the thread
    queued = page.locator(".turn").nth(1)
    expect(queued.locator(".msg.user")).to_have_text("second")
    expect(queued.locator(".chip")).to_contain_text("queued")
    expect(queued).to_have_attribute("data-waiting", "queued")
    expect(page.locator("#new-thread")).to_be_disabled()  # nothing can move it elsewhere
    assert page.locator("#text").input_value() == ""
    assert axe(page) == []
    shoot(page, "conversation-queued-390")
    assert [c for r, c in _stored(server.url, thread) if r == "user"] == ["first"]

    agent.gate.set()
    expect(queued.locator(".msg.assistant")).to_have_text("working on second. done second")
    expect(page.locator(".turn").first.locator(".msg.assistant")).to_have_text(
        "working on first. done first")
    _wait_idle(page)
    expect(queued.locator(".chip")).to_have_count(0)
    assert _stored(server.url, thread) == [
        ("user", "first"), ("assistant", "working on first. done first"),
        ("user", "second"), ("assistant", "working on second. done second")]
    page.reload()
    _wait_idle(page)
    expect(page.locator(".msg.user")).to_have_text(["first", "second"])
    assert page.errors == []


def test_a_queued_message_can_be_cancelled_and_comes_back_to_the_composer(
    serve: Any, new_page: Any
) -> None:
    agent = GatedAgent("queuing", "enqueue")
    server = serve(agents=[agent], default_agent="queuing")
    page = new_page(width=390, height=844)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "first")
    expect(page.locator(".msg.assistant")).to_have_text(["working on first."])
    thread = _thread(page)
    _send(page, "second")
    queued = page.locator(".turn").nth(1)
    expect(queued.locator(".chip")).to_contain_text("queued")
    queued.get_by_role("button", name="Cancel this waiting message").click()
    expect(queued.locator(".msg.error")).to_contain_text("RUN_CANCELLED")
    expect(page.locator("#text")).to_have_value("second")
    expect(page.locator("#stop")).to_be_enabled()  # the first run goes on
    agent.gate.set()
    _wait_idle(page)
    assert _stored(server.url, thread) == [
        ("user", "first"), ("assistant", "working on first. done first")]
    assert page.errors == []


def test_a_message_sent_while_the_agent_answers_interrupts_it(
    serve: Any, new_page: Any, axe: Any
) -> None:
    agent = GatedAgent("interrupting", "interrupt")
    server = serve(agents=[agent], default_agent="interrupting")
    page = new_page(width=1280, height=900)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "first")
    expect(page.locator(".msg.assistant")).to_have_text(["working on first."])
    expect(page.locator("#composer-status")).to_contain_text("interrupts this answer")
    thread = _thread(page)

    _send(page, "second")
    first, second = page.locator(".turn").nth(0), page.locator(".turn").nth(1)
    expect(first.locator(".msg.notice")).to_have_text("Interrupted by your next message.")
    expect(second.locator(".msg.assistant")).to_have_text("working on second.")
    expect(second.locator(".chip")).to_have_count(0)  # running now
    assert axe(page) == []
    agent.gate.set()
    expect(second.locator(".msg.assistant")).to_have_text("working on second. done second")
    _wait_idle(page)
    # What the interrupted run said is kept; the new message ran after it, in the same thread.
    assert _stored(server.url, thread) == [
        ("user", "first"), ("assistant", "working on first. "),
        ("user", "second"), ("assistant", "working on second. done second")]
    assert page.errors == []


def test_a_rollback_interrupt_removes_the_stopped_answer_from_screen_and_thread(
    serve: Any, new_page: Any
) -> None:
    agent = GatedAgent("rolling", "rollback")
    server = serve(agents=[agent], default_agent="rolling")
    page = new_page(width=1280, height=900)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "first")
    expect(page.locator(".msg.assistant")).to_have_text(["working on first."])
    thread = _thread(page)
    _send(page, "second")
    expect(page.locator(".turn.rolled-back .msg.notice")).to_contain_text("rollback")
    agent.gate.set()
    _wait_idle(page)
    # Read again from the server once the runs ended: the stopped turn is gone there too.
    expect(page.locator(".msg.user")).to_have_text(["second"])
    expect(page.locator(".msg.assistant")).to_have_text(["working on second. done second"])
    assert _stored(server.url, thread) == [
        ("user", "second"), ("assistant", "working on second. done second")]
    assert page.errors == []


def test_a_message_sent_while_a_rejecting_agent_answers_shows_the_servers_error(
    serve: Any, new_page: Any
) -> None:
    agent = GatedAgent("rejecting", "reject")
    server = serve(agents=[agent], default_agent="rejecting")
    page = new_page(width=390, height=844)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    _send(page, "first")
    expect(page.locator(".msg.assistant")).to_have_text(["working on first."])
    thread = _thread(page)
    _send(page, "second")
    refused = page.locator(".turn.refused")
    expect(refused.locator(".msg.error")).to_contain_text("(THREAD_BUSY, HTTP 409)")
    expect(refused.locator(".msg.user")).to_have_text("second")
    expect(page.locator("#text")).to_have_value("second")  # nothing lost
    agent.gate.set()
    _wait_idle(page)
    assert _stored(server.url, thread) == [
        ("user", "first"), ("assistant", "working on first. done first")]
    _send(page, "second")  # sent again once the answer ended
    expect(page.locator(".msg.assistant").last).to_have_text("working on second. done second")
    _wait_idle(page)
    assert [c for r, c in _stored(server.url, thread) if r == "user"] == ["first", "second"]
    assert page.errors == []


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def lead_server(tmp_path: Any, fake_openai: FakeOpenAI) -> Iterator[LiveServer]:
    """A model agent ``lead`` with the subagent ``helper``, both on the fake OpenAI server."""
    common = {"model": "openai:gpt-4o-mini", "base_url": fake_openai.base_url,
              "api_key_env": "HOME"}
    settings = Settings(
        agents=[
            {"id": "lead", "instructions": "You lead.", "subagents": ["helper"], **common},
            {"id": "helper", "description": "Finds facts.", "instructions": "You help.",
             **common},
        ],
        default_agent="lead",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/subagents.db",
    )
    with LiveServer(create_app(Backend(settings))) as server:
        yield server


def test_subagent_activity_folds_under_its_tool_card(
    lead_server: LiveServer, fake_openai: FakeOpenAI, new_page: Any, axe: Any, shoot: Any
) -> None:
    fake_openai.push(
        calls(("c1", "helper", '{"task": "find x"}')),
        text("x is ", "42"),
        text("The helper says 42."),
        text("Finding x"),  # the thread's title
    )
    page = new_page(width=390, height=844, color_scheme="dark")
    page.goto(f"{lead_server.url}/playground")
    _wait_idle(page)
    _send(page, "what is x?")
    expect(page.locator(".turn > .msg.assistant")).to_have_text(["The helper says 42."])
    _wait_idle(page)
    thread = _thread(page)

    def check_folded() -> None:
        card = page.locator(".turn > .tool-card")
        expect(card).to_have_count(1)
        expect(card.locator("header .name")).to_have_text("helper")
        block = card.locator("details.subagent")
        expect(block).to_have_count(1)
        expect(block).not_to_have_attribute("open", "")
        expect(block.locator("summary")).to_contain_text("helper")
        expect(block.locator("summary .status")).to_have_text("done")
        words = block.locator(".msg.assistant")
        expect(words).to_have_text("x is 42")
        expect(words).to_be_hidden()  # collapsed by default
        expect(card.locator("pre.result").last).to_have_text("x is 42")
        # Its words are not a reply of the conversation.
        expect(page.locator(".turn > .msg.assistant")).to_have_text(["The helper says 42."])
        block.locator("summary").click()
        expect(words).to_be_visible()

    check_folded()
    assert axe(page) == []
    shoot(page, "conversation-subagent-390-dark")
    stored = _api(lead_server.url, f"/threads/{thread}/messages", format="agui")["messages"]
    assert [(m["role"], bool(m.get("subagentRunId")), m.get("content")) for m in stored] == [
        ("user", False, "what is x?"), ("assistant", False, None),
        ("assistant", True, "x is 42"), ("tool", False, "x is 42"),
        ("assistant", False, "The helper says 42.")]

    page.reload()  # from the stored thread, folded the same way
    _wait_idle(page)
    check_folded()
    assert page.errors == []
