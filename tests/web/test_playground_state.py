"""No action races another, and what the user chose survives a reload.

The race tests slow the thread routes' answers in the page (a wrapped ``fetch``), widening
the window the playground used to race in: on the code before this test, "+ New thread"
then Enter at once lost the bubble or stored the run in the previous thread, and a switch
of thread then Enter at once wiped the new bubble when the history arrived.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from playwright.sync_api import expect
from tests.helpers import run_body

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput

# Every answer of a /threads route reaches the page 400 ms late (the request leaves at once).
SLOW_THREAD_ROUTES = """
    const realFetch = window.fetch;
    window.__threadAnswersPending = 0;
    window.fetch = (input, init) => {
        const answer = realFetch(input, init);
        const url = String(input && input.url ? input.url : input);
        if (!url.includes("/threads")) return answer;
        window.__threadAnswersPending += 1;
        const late = () => { window.__threadAnswersPending -= 1; };
        return answer.then(
            (r) => new Promise((done) => setTimeout(() => { late(); done(r); }, 400)),
            (e) => { late(); throw e; });
    };
"""


class EchoAgent(Agent):
    """Answers with the user's last message."""

    id = "echo"
    name = "Echo agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield f"echo: {ctx.messages[-1]['content']}"


def _thread_on_screen(page: Any) -> str:
    thread: str = page.evaluate("new URL(location.href).searchParams.get('thread')")
    return thread


def _stored_user_texts(url: str, thread_id: str) -> list[str]:
    answer = httpx.get(f"{url}/io-bridge/threads/{thread_id}/messages", params={"format": "agui"})
    if answer.status_code == 404:
        return []
    assert answer.status_code == 200, answer.text
    return [m["content"] for m in answer.json()["messages"] if m["role"] == "user"]


def _wait_idle(page: Any) -> None:
    """Idle as the user sees it, with every slowed thread answer delivered (the race tests
    read the page the same way before and after the phase gate)."""
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    page.wait_for_function("() => !window.__threadAnswersPending")
    page.wait_for_function("() => (document.body.dataset.phase ?? 'idle') === 'idle'")


def test_new_thread_then_send_at_once_stays_in_the_new_thread(serve: Any, page: Any) -> None:
    server = serve()
    page.add_init_script(SLOW_THREAD_ROUTES)
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    page.locator("#text").fill("first")
    page.locator("#text").press("Enter")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    _wait_idle(page)
    first = _thread_on_screen(page)
    seen = {first}
    for n in range(5):
        page.locator("#new-thread").click()
        page.locator("#text").fill(f"message {n}")
        page.locator("#text").press("Enter")
        _wait_idle(page)
        expect(page.locator(".msg.user")).to_have_text([f"message {n}"])
        expect(page.locator(".msg.assistant")).to_have_count(1)
        thread = _thread_on_screen(page)
        assert thread not in seen
        seen.add(thread)
        assert _stored_user_texts(server.url, thread) == [f"message {n}"]
    assert _stored_user_texts(server.url, first) == ["first"]
    page.reload()
    _wait_idle(page)
    expect(page.locator(".msg.user")).to_have_text(["message 4"])
    assert page.errors == []


def test_switching_thread_then_send_at_once_keeps_the_bubble(serve: Any, page: Any) -> None:
    server = serve(agents=[EchoAgent()], default_agent="echo")
    with httpx.Client(base_url=f"{server.url}/io-bridge") as client:
        for name in ("A", "B"):
            body = run_body(f"hello {name}", thread_id=f"thread-{name}", run_id=f"r-{name}")
            body["forwardedProps"] = {"agentId": "echo"}
            assert '"RUN_FINISHED"' in client.post("/run", json=body).text
    page.add_init_script(SLOW_THREAD_ROUTES)
    page.goto(f"{server.url}/playground?thread=thread-A")
    _wait_idle(page)
    for n in range(4):
        name = "B" if n % 2 == 0 else "A"
        page.locator(f'#threads li[data-thread-id="thread-{name}"] .title').click()
        page.locator("#text").fill(f"to {name} #{n}")
        page.locator("#text").press("Enter")  # while the history loads: not sent, kept
        _wait_idle(page)
        if page.locator("#text").input_value():
            page.locator("#text").press("Enter")
            _wait_idle(page)
        expect(page.locator(".msg.user").last).to_have_text(f"to {name} #{n}")
        expect(page.locator(".msg.assistant").last).to_have_text(f"echo: to {name} #{n}")
        assert _thread_on_screen(page) == f"thread-{name}"
    assert _stored_user_texts(server.url, "thread-A") == ["hello A", "to A #1", "to A #3"]
    assert _stored_user_texts(server.url, "thread-B") == ["hello B", "to B #0", "to B #2"]
    assert page.errors == []


def test_send_waits_while_a_thread_loads(serve: Any, page: Any) -> None:
    server = serve()
    page.add_init_script(SLOW_THREAD_ROUTES)
    page.goto(f"{server.url}/playground")
    expect(page.locator("body")).to_have_attribute("data-phase", "connecting")
    expect(page.locator("#send")).to_be_disabled()
    page.locator("#text").fill("too early")
    page.locator("#text").press("Enter")
    expect(page.locator("#composer-status")).not_to_have_text("")
    _wait_idle(page)
    assert page.locator(".msg.user").count() == 0
    assert page.locator("#text").input_value() == "too early"
    assert httpx.get(f"{server.url}/io-bridge/threads").json()["threads"] == []


def test_a_thread_is_created_by_its_first_message(serve: Any, page: Any) -> None:
    server = serve()
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    for _ in range(3):
        page.locator("#new-thread").click()
    expect(page.locator("#threads li")).to_have_count(1)
    expect(page.locator("#threads li.draft .title")).to_have_text("New thread")
    assert httpx.get(f"{server.url}/io-bridge/threads").json()["threads"] == []
    page.locator("#text").fill("2 + 2")
    page.locator("#text").press("Enter")
    _wait_idle(page)
    threads = httpx.get(f"{server.url}/io-bridge/threads").json()["threads"]
    assert [(t["id"], t["agentId"]) for t in threads] == [(_thread_on_screen(page), "demo")]
    expect(page.locator("#threads li")).to_have_count(1)
    expect(page.locator("#threads li.selected .title")).to_have_text("2 + 2")
    assert page.locator("#threads li.draft").count() == 0


def test_settings_and_inspector_survive_a_reload(serve: Any, page: Any) -> None:
    server = serve(agents=[EchoAgent()])
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    page.locator("#agent").select_option("demo")
    page.locator("#auto-answer").uncheck()
    page.locator('#tools input[data-tool="show_notice"]').uncheck()
    page.locator("#text").fill("get_weather city=Lima")
    page.locator("#text").press("Enter")
    form = page.locator(".tool-card form")
    expect(form.locator("textarea")).to_have_value(
        '{\n  "city": "Lima",\n  "sky": "clear",\n  "temperature": 21\n}'
    )
    form.get_by_role("button", name="Send result").click()
    _wait_idle(page)
    run_heads = page.locator("#events .run-head")
    expect(run_heads).to_have_count(1)  # the result went into the same run
    head = run_heads.text_content()
    events = page.locator("#events li[data-type]").all_inner_texts()

    page.reload()
    _wait_idle(page)
    expect(page.locator("#agent")).to_have_value("demo")
    expect(page.locator("#auto-answer")).not_to_be_checked()
    expect(page.locator('#tools input[data-tool="show_notice"]')).not_to_be_checked()
    expect(page.locator('#tools input[data-tool="get_weather"]')).to_be_checked()
    expect(page.locator(".tool-card pre.result")).to_contain_text('"city": "Lima"')
    expect(page.locator("#events li[data-type]")).to_have_count(len(events))
    assert page.locator("#events li[data-type]").all_inner_texts() == events
    expect(run_heads).to_have_text([head])

    page.locator("#agent").select_option("echo")  # a new choice is kept too
    page.reload()
    _wait_idle(page)
    # The thread on screen was run by demo: its agent wins over the last choice ...
    expect(page.locator("#agent")).to_have_value("demo")
    page.locator("#new-thread").click()
    page.reload()
    _wait_idle(page)
    # ... and a new thread starts on the chosen one.
    expect(page.locator("#agent")).to_have_value("echo")
    assert page.errors == []


class BulkyAgent(Agent):
    """600 deltas of 3,000 characters: 1.8 M characters of events, more than a tab keeps."""

    id = "bulky"
    name = "Bulky agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        for n in range(600):
            yield f"{n:04d}" + "x" * 2996


def test_the_saved_inspector_is_bounded_and_keeps_the_latest_events(
    serve: Any, page: Any
) -> None:
    server = serve(agents=[BulkyAgent()], default_agent="bulky")
    page.goto(f"{server.url}/playground")
    _wait_idle(page)
    page.locator("#text").fill("lots")
    page.locator("#text").press("Enter")
    expect(page.locator(".msg.assistant")).to_contain_text("0599")
    _wait_idle(page)
    text = page.locator("#events li.group")
    expect(text.locator(".figures")).to_have_text("600 deltas · 1800000 characters")
    saved = page.evaluate("sessionStorage.getItem('iobridge.events').length")
    assert 900_000 < saved <= 1024 * 1024
    page.reload()
    _wait_idle(page)
    restored = page.locator("#events li[data-type]")
    expect(restored.last.locator(".type")).to_have_text("RUN_FINISHED")
    # About a third of the 600 deltas fit, the tail of the run.
    kept = int(text.locator(".figures").inner_text().split(" ")[0])
    assert 250 < kept < 600
    folded = text.locator("pre.folded").inner_text()
    assert folded.startswith(f"{600 - kept:04d}x") and folded.endswith("0599" + "x" * 2996)
    expect(page.locator("#events .run-head")).to_have_count(1)
    assert page.errors == []
