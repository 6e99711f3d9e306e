"""The playground in a real Chromium against a real server on loopback.

Covers: send and stream (Markdown, sanitized), tool cards, frontend tool round trips (auto,
from the form, a user-declared tool), Stop, Send disabled during a run, a 409 shown as a
sentence, reload keeping the thread and its history, thread rename/delete, the default
agent, folded reasoning, the event inspector, and api-key auth.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from playwright.sync_api import expect
from tests.helpers import run_body

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput, ReasoningDelta, ReasoningEnd
from iobridge.auth import hash_api_key
from iobridge.errors import AgentError

MARKDOWN_REPLY = (
    "## Result\n\nSome **bold** and `code`.\nA second line.\n\n"
    "- one\n- two\n\n<img src=x onerror=\"window.__xss=1\"> [bad](javascript:window.__xss=2)"
)


class MarkdownAgent(Agent):
    """Streams a Markdown reply (with hostile HTML) in small chunks, after some reasoning."""

    id = "markdown"
    name = "Markdown agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield ReasoningDelta(delta="The user wants formatting.")
        yield ReasoningEnd()
        for start in range(0, len(MARKDOWN_REPLY), 7):
            yield MARKDOWN_REPLY[start : start + 7]


class SlowAgent(Agent):
    """Streams a word every 100 ms for a minute: long enough to be stopped."""

    id = "slow"
    name = "Slow agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for n in range(600):
            yield f"word{n} "
            await asyncio.sleep(0.1)


class FailingAgent(Agent):
    """Says a word, then fails the way a rate-limited model does."""

    id = "failing"
    name = "Failing agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield "Thinking"
        raise AgentError("the model provider is rate limiting requests", code="MODEL_RATE_LIMIT")


def _open(page: Any, url: str) -> None:
    page.goto(f"{url}/playground")
    expect(page.locator("#agent option").first).to_be_attached()


def _send(page: Any, text: str) -> None:
    expect(page.locator("#send")).to_be_enabled()  # not while the page (re)loads the thread
    page.locator("#text").fill(text)
    page.locator("#text").press("Enter")


def _wait_idle(page: Any) -> None:
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()


def test_send_streams_sanitized_markdown_and_folds_reasoning(
    serve: Any, page: Any, screenshot: Any
) -> None:
    server = serve(agents=[MarkdownAgent()], default_agent="markdown")
    _open(page, server.url)
    expect(page.locator("#agent")).to_have_value("markdown")
    page.locator("#text").fill("format")
    page.locator("#text").press("Shift+Enter")
    page.locator("#text").press_sequentially("this please")
    assert page.locator("#text").input_value() == "format\nthis please"
    page.locator("#text").press("Enter")
    user = page.locator(".msg.user").last
    expect(user).to_have_text("format\nthis please")
    reply = page.locator(".msg.assistant").last
    expect(reply.locator("li")).to_have_count(2)
    _wait_idle(page)
    expect(reply.locator("h2")).to_have_text("Result")
    expect(reply.locator("strong")).to_have_text("bold")
    expect(reply.locator("code")).to_have_text("code")
    assert reply.locator("br").count() == 1
    assert "<img src=x" in reply.inner_text()
    assert reply.locator("img").count() == 0
    assert reply.locator("a").count() == 0
    assert page.evaluate("window.__xss") is None
    reasoning = page.locator("details.reasoning")
    expect(reasoning).to_have_count(1)
    assert reasoning.get_attribute("open") is None
    expect(reasoning.locator("div")).to_have_text("The user wants formatting.")
    screenshot("markdown")

    page.reload()  # the history renders the same way: Markdown, escaped HTML, folded reasoning
    reply = page.locator(".msg.assistant")
    expect(reply.locator("h2")).to_have_text("Result")
    assert reply.locator("img").count() == 0
    expect(page.locator("details.reasoning:not([open]) div")).to_have_text(
        "The user wants formatting."
    )
    assert page.evaluate("window.__xss") is None
    assert page.errors == []


def test_server_tool_card_and_event_inspector(serve: Any, page: Any, screenshot: Any) -> None:
    server = serve()
    _open(page, server.url)
    _send(page, "what is 2 + 3 * 4")
    card = page.locator(".tool-card").last
    expect(card.locator(".name")).to_have_text("calculate")
    expect(card.locator(".badge")).to_have_text("server")
    expect(card.locator("pre.result")).to_contain_text('"value": 14')
    expect(card.locator("pre.args")).to_contain_text('"expression": "2 + 3 * 4"')
    expect(page.locator(".msg.assistant").last).to_contain_text("2 + 3 * 4 = 14.")
    _wait_idle(page)
    events = page.locator("#events li[data-type]")
    expect(events.first.locator(".type")).to_have_text("RUN_STARTED")
    expect(events.last.locator(".type")).to_have_text("RUN_FINISHED")
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} \+\d+\.\d{3}s", events.first.locator(".time")
                        .inner_text())
    assert events.first.locator("pre").evaluate("e => getComputedStyle(e).whiteSpace") == (
        "pre-wrap"
    )
    page.locator("#event-filter").select_option("TOOL_CALL_RESULT")
    visible = page.locator("#events li[data-type]:not(.hidden)")
    expect(page.locator("#events li.run:not(.hidden)")).to_have_count(1)
    expect(visible).to_have_count(1)
    expect(visible.locator(".type")).to_have_text("TOOL_CALL calculate")
    screenshot("server-tool")
    assert page.errors == []


def test_frontend_tools_round_trip_auto_form_and_declared(
    serve: Any, page: Any, screenshot: Any
) -> None:
    server = serve()
    _open(page, server.url)
    _send(page, "get_weather city=Paris")
    weather = page.locator(".tool-card").last
    expect(weather.locator(".badge")).to_have_text("frontend")
    expect(weather.locator("pre.result")).to_contain_text('"city": "Paris"')
    expect(page.locator(".msg.assistant").last).to_contain_text("The tool get_weather returned")
    _wait_idle(page)

    # Built-in tool answered by hand: the form is prefilled with the demo result.
    page.locator("#auto-answer").uncheck()
    _send(page, "show_notice text=hello")
    notice = page.locator(".tool-card").last
    form = notice.locator("form")
    expect(form.locator("textarea")).to_have_value('{\n  "shown": true\n}')
    expect(notice.locator(".status")).to_have_text("waiting for your answer")
    expect(page.locator("#send")).to_be_disabled()
    form.locator("textarea").fill('{"shown": "by hand"}')
    form.get_by_role("button", name="Send result").click()
    expect(notice.locator("pre.result")).to_contain_text('"shown": "by hand"')
    _wait_idle(page)

    # A tool the user declares in the page, answered with plain text.
    page.locator("#add-tool summary").click()
    page.locator("#tool-name").fill("pick_color")
    page.locator("#tool-description").fill("Ask the user for a colour")
    page.locator("#tool-parameters").fill(
        '{"type": "object", "properties": {"hint": {"type": "string"}}}'
    )
    page.locator("#tool-form button").click()
    expect(page.locator('#tools input[data-tool="pick_color"]')).to_be_checked()
    _send(page, "pick_color hint=warm")
    picked = page.locator(".tool-card").last
    expect(picked.locator(".name")).to_have_text("pick_color")
    expect(picked.locator("pre.args")).to_contain_text('"hint": "warm"')
    screenshot("frontend-form")
    picked.locator("form textarea").fill("orange")
    picked.locator("form").get_by_role("button", name="Send result").click()
    expect(picked.locator("pre.result")).to_have_text("orange")
    expect(page.locator(".msg.assistant").last).to_contain_text(
        "The tool pick_color returned orange"
    )
    _wait_idle(page)
    screenshot("frontend-tools")
    assert page.errors == []


def test_stop_and_busy_thread(serve: Any, page: Any, screenshot: Any) -> None:
    server = serve(agents=[SlowAgent()], default_agent="slow")
    _open(page, server.url)
    _send(page, "go")
    reply = page.locator(".msg.assistant").last
    expect(reply).to_contain_text("word2")
    expect(page.locator("#send")).to_be_disabled()
    expect(page.locator("#stop")).to_be_enabled()
    page.locator("#text").fill("a second message while busy")  # Enter while the run is live
    page.locator("#text").press("Enter")
    assert page.locator(".msg.user").count() == 1
    assert page.locator("#text").input_value() == "a second message while busy"

    page.locator("#stop").click()
    expect(page.locator(".msg.notice").last).to_have_text("Run stopped.")
    _wait_idle(page)
    expect(page.locator("#events li .type").last).to_have_text("RUN_FINISHED")
    assert '"cancelled"' in page.locator("#events li pre").last.inner_text()

    # Another client holds the thread: the page says so in a sentence, not raw JSON.
    thread_id = page.evaluate("new URL(location.href).searchParams.get('thread')")
    page.evaluate(
        """([prefix, threadId]) => {
            window.__other = fetch(prefix + "/run", {method: "POST",
              headers: {"content-type": "application/json"},
              body: JSON.stringify({threadId, runId: crypto.randomUUID(), tools: [], context: [],
                messages: [{id: crypto.randomUUID(), role: "user", content: "x"}],
                forwardedProps: {agentId: "slow"}})});
            return window.__other.then(() => true);
        }""",
        ["/io-bridge", thread_id],
    )
    _send(page, "now")
    error = page.locator(".msg.error").last
    expect(error).to_have_text(
        "This thread already has a run in progress: wait for it to finish or press Stop."
    )
    assert "{" not in error.inner_text()
    _wait_idle(page)
    screenshot("stop-and-busy")
    assert page.errors == []


def test_reload_keeps_thread_history_rename_delete(
    serve: Any, page: Any, screenshot: Any
) -> None:
    server = serve()
    _open(page, server.url)
    _send(page, "get_weather city=Oslo and 6 * 7")
    expect(page.locator(".tool-card pre.result")).to_have_count(2)
    _wait_idle(page)
    thread_id = page.evaluate("new URL(location.href).searchParams.get('thread')")
    item = page.locator(f'#threads li[data-thread-id="{thread_id}"]')
    expect(item).to_have_class(re.compile("selected"))
    expect(item.locator(".title")).to_have_text("get_weather city=Oslo and 6 * 7")

    page.goto(f"{server.url}/playground")  # no ?thread=: localStorage remembers it
    expect(page.locator(".msg.user")).to_have_text(["get_weather city=Oslo and 6 * 7"])
    cards = page.locator(".tool-card")
    expect(cards).to_have_count(2)
    weather = cards.filter(has=page.locator(".name", has_text="get_weather"))
    expect(weather.locator(".badge")).to_have_text("frontend")
    expect(weather.locator("pre.result")).to_contain_text('"city": "Oslo"')
    calc = cards.filter(has=page.locator(".name", has_text="calculate"))
    expect(calc.locator(".badge")).to_have_text("server")
    expect(calc.locator("pre.result")).to_contain_text('"value": 42')
    expect(page.locator(".msg.assistant").last).to_contain_text("6 * 7 = 42.")
    assert page.evaluate("new URL(location.href).searchParams.get('thread')") == thread_id
    screenshot("reloaded")

    item.locator("button.rename").click()
    item.locator("input").fill("Weather and maths")
    item.locator("input").press("Enter")
    expect(item.locator(".title")).to_have_text("Weather and maths")
    stored = httpx.get(f"{server.url}/io-bridge/threads/{thread_id}").json()
    assert stored["title"] == "Weather and maths"

    page.locator("#new-thread").click()  # a new thread is stored with its first message
    expect(page.locator("#threads li")).to_have_count(2)
    expect(page.locator("#threads li.draft.selected .title")).to_have_text("New thread")
    expect(page.locator(".msg")).to_have_count(0)
    new_id = page.evaluate("new URL(location.href).searchParams.get('thread')")
    assert new_id != thread_id
    assert httpx.get(f"{server.url}/io-bridge/threads/{new_id}").status_code == 404

    item.click()
    expect(page.locator(".tool-card")).to_have_count(2)
    item.locator("button.delete").click()
    expect(item.locator("button.delete")).to_have_text("delete?")
    item.locator("button.delete").click()
    expect(page.locator("#threads li")).to_have_count(1)
    expect(page.locator(".msg")).to_have_count(0)
    assert httpx.get(f"{server.url}/io-bridge/threads/{thread_id}").status_code == 404
    assert page.errors == []


def test_unavailable_agents_are_greyed_with_their_reason(serve: Any, page: Any) -> None:
    """``GET /agents`` entries with ``status: "unavailable"`` (a field being added to the
    discovery data) are listed but not selectable; the real response gets one such entry."""
    server = serve()

    def add_unavailable(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        body["agents"].append(
            {"id": "gpt", "name": "GPT", "status": "unavailable",
             "reason": "environment variable OPENAI_API_KEY is not set"}
        )
        route.fulfill(response=response, json=body)

    page.route(re.compile(r".*/io-bridge/agents$"), add_unavailable)
    _open(page, server.url)
    option = page.locator('#agent option[value="gpt"]')
    expect(option).to_have_text("GPT (unavailable: environment variable OPENAI_API_KEY is not set)")
    assert option.is_disabled()
    expect(page.locator("#agent")).to_have_value("demo")
    expect(page.locator("#agent-note")).to_contain_text("1 unavailable")


def test_api_key_auth(serve: Any, page: Any, screenshot: Any) -> None:
    key = "playground-test-key"
    server = serve(
        auth={"mode": "api-key", "api_keys": [{"sha256": hash_api_key(key), "principal": "ann"}]}
    )
    page.goto(f"{server.url}/playground")
    banner = page.locator("#banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("requires authentication")
    expect(page.locator("#agent option")).to_have_count(0)

    page.locator("#auth-key").fill("wrong")
    page.locator("#auth button[type=submit]").click()
    expect(banner).to_be_visible()
    expect(page.locator("#agent option")).to_have_count(0)

    page.locator("#auth-key").fill(key)
    page.locator("#auth button[type=submit]").click()
    expect(banner).to_be_hidden()
    expect(page.locator("#agent")).to_have_value("demo")
    _send(page, "get_weather city=Rome")
    expect(page.locator(".tool-card pre.result")).to_contain_text('"city": "Rome"')
    _wait_idle(page)
    thread_id = page.evaluate("new URL(location.href).searchParams.get('thread')")
    expect(page.locator(f'#threads li[data-thread-id="{thread_id}"]')).to_be_visible()

    page.reload()  # the key stays for the tab (sessionStorage), the history comes back
    expect(page.locator(".tool-card pre.result")).to_contain_text('"city": "Rome"')
    expect(banner).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('iobridge.auth.key')") == key
    assert page.evaluate("localStorage.getItem('iobridge.auth.key')") is None
    screenshot("api-key")

    page.locator("#auth-scheme").select_option("bearer")
    page.locator("#auth button[type=submit]").click()
    expect(page.locator("#agent")).to_have_value("demo")
    _send(page, "2 + 2")
    expect(page.locator(".msg.assistant").last).to_contain_text("2 + 2 = 4.")
    _wait_idle(page)
    assert page.errors == []


def test_page_policy_refuses_inline_scripts(serve: Any, page: Any) -> None:
    """Defence in depth behind the escaping renderer: the page's CSP runs only its own files."""
    server = serve()
    _open(page, server.url)
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.__injected = 1'; document.body.append(s); }"
        )
    assert page.evaluate("window.__injected") is None


def test_an_interrupt_is_answered_from_the_chat(serve: Any, page: Any, screenshot: Any) -> None:
    server = serve()
    _open(page, server.url)
    _send(page, "approve ship v2")
    card = page.locator(".tool-card.interrupt")
    expect(card.locator(".name")).to_have_text("approval")
    expect(card).to_contain_text("Approve: ship v2?")
    _wait_idle(page)
    screenshot("interrupt")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator(".msg.assistant").last).to_have_text("Approved: ship v2.")
    expect(card.locator(".status")).to_have_text("approve")
    expect(card.get_by_role("button", name="Decline")).to_be_disabled()
    _wait_idle(page)
    expect(page.locator("#events li .type").last).to_have_text("RUN_FINISHED")
    assert page.errors == []


def test_run_errors_are_shown_in_the_chat(serve: Any, page: Any) -> None:
    server = serve(agents=[FailingAgent()], default_agent="failing")
    _open(page, server.url)
    _send(page, "hello")
    expect(page.locator(".msg.error")).to_have_text(
        "The run failed: the model provider is rate limiting requests (MODEL_RATE_LIMIT)"
    )
    _wait_idle(page)
    expect(page.locator("#events li .type.error")).to_have_text("RUN_ERROR")
    assert page.errors == []


def test_history_shows_at_most_the_latest_200_messages(serve: Any, page: Any) -> None:
    server = serve()
    thread_id = "long-thread"
    with httpx.Client(base_url=f"{server.url}/io-bridge", timeout=30) as client:
        for n in range(101):  # 202 messages: a user message and a reply per run
            body = run_body(f"message {n}", thread_id=thread_id, run_id=f"r{n}")
            assert '"RUN_FINISHED"' in client.post("/run", json=body).text
        stored = client.get(f"/threads/{thread_id}/messages", params={"format": "agui"})
    assert len(stored.json()["messages"]) == 202
    page.goto(f"{server.url}/playground?thread={thread_id}")
    expect(page.locator(".msg.notice").first).to_have_text(
        "Showing the latest 200 messages of this thread."
    )
    expect(page.locator(".msg.user, .msg.assistant")).to_have_count(200)
    expect(page.locator(".msg.user").first).to_have_text("message 1")
    expect(page.locator(".msg.user").last).to_have_text("message 100")


class ChattyAgent(Agent):
    """2,100 text deltas in one run: more events than the inspector keeps."""

    id = "chatty"
    name = "Chatty agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for n in range(2100):
            yield f"w{n} "


def test_inspector_keeps_the_latest_2000_events(serve: Any, page: Any) -> None:
    server = serve(agents=[ChattyAgent()], default_agent="chatty")
    _open(page, server.url)
    _send(page, "talk")
    expect(page.locator(".msg.assistant")).to_contain_text("w2099")
    _wait_idle(page)
    events = page.locator("#events li[data-type]")
    expect(events.last.locator(".type")).to_have_text("RUN_FINISHED")
    # The deltas fold into one entry; the oldest events (RUN_STARTED, the first deltas) went.
    text = events.first
    expect(text.locator(".type")).to_have_text("TEXT_MESSAGE")
    kept = int(text.locator(".figures").inner_text().split(" ")[0])
    assert 1990 <= kept < 2000
    assert page.evaluate("document.querySelectorAll('#events details.raw').length") == 1
    folded = text.locator("pre.folded").inner_text()
    assert folded.startswith(f"w{2100 - kept} ") and folded.rstrip().endswith("w2099")
    text.locator("details.raw summary").click()
    assert text.locator("details.raw pre").inner_text().splitlines()[-1].startswith(
        '{"type":"TEXT_MESSAGE_END"')
    assert text.locator("details.raw pre").inner_text().count("\n") == kept


def test_thread_list_pages_by_50(serve: Any, page: Any) -> None:
    server = serve()
    with httpx.Client(base_url=f"{server.url}/io-bridge") as client:
        for n in range(51):
            assert client.post("/threads", json={"title": f"thread {n:02d}"}).status_code == 201
    _open(page, server.url)
    threads = page.locator("#threads li:not(.draft)")
    expect(threads).to_have_count(50)
    expect(threads.first.locator(".title")).to_have_text("thread 50")
    page.locator("#more-threads").click()
    expect(threads).to_have_count(51)
    expect(threads.last.locator(".title")).to_have_text("thread 00")
    expect(page.locator("#more-threads")).to_be_hidden()
