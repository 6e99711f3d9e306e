"""assistant-ui and CopilotKit, unchanged, in a real Chromium against iobridge.

Each scenario runs in both apps (``tests/frontends/assistant-ui``, ``tests/frontends/
copilotkit``) and asserts what the user sees and what iobridge stored (read back through
its REST routes): a streamed reply, a frontend tool declared in the app, a server tool,
Stop, a reload, and all of it on two replicas behind one port.

Both frontends bundle ``@ag-ui/client`` 0.0.x and re-run for frontend tool results, so
iobridge runs in next-run mode (``tool_result_mode = "next-run"``).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from tests.cluster.replicas import postgres_database, redis_server
from tests.frontends.agents import STORY
from tests.frontends.harness import Balancer, bridge, copilot_runtime, stored_messages
from tests.helpers import LiveServer

APPS = ("assistant-ui", "copilotkit")


@pytest.fixture(scope="module", autouse=True)
def _patient_expectations() -> Iterator[None]:
    """A page waits on Chromium, the apps' Node runtime and iobridge, beside the rest of the
    suite: Playwright's 5 s default failed CopilotKit's first reply under CI's load."""
    expect.set_options(timeout=20_000)
    yield
    expect.set_options(timeout=5_000)


@dataclass
class Stack:
    """What a test drives: the apps' origin, iobridge (one server, or a balancer in front
    of two replicas), the replicas themselves, and a CopilotKit runtime using iobridge."""

    origin: str
    bridge_url: str
    runtime_url: str
    replicas: list[LiveServer] = field(default_factory=list)
    balancer: Balancer | None = None


@pytest.fixture(scope="module")
def single(apps: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    db = tmp_path_factory.mktemp("bridge") / "iobridge.db"
    with (
        bridge(database_url=f"sqlite+aiosqlite:///{db}", cors_origins=[apps]) as server,
        copilot_runtime(f"{server.url}/io-bridge") as runtime,
    ):
        yield Stack(apps, server.url, runtime, [server])


@pytest.fixture(scope="module")
def pair(apps: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two replicas on one PostgreSQL database and one Redis, behind a round-robin balancer."""
    prefix = f"f{uuid.uuid4().hex[:8]}"
    with (
        redis_server(tmp_path_factory.mktemp("redis")) as redis_url,
        postgres_database() as database_url,
    ):
        settings = dict(database_url=database_url, redis_url=redis_url, redis_prefix=prefix,
                        heartbeat_seconds=0.2, owner_lost_seconds=1.0, cors_origins=[apps])
        with (
            bridge(**settings) as a,
            bridge(**settings) as b,
            Balancer([a.url, b.url]) as lb,
            copilot_runtime(f"{lb.url}/io-bridge") as runtime,
        ):
            yield Stack(apps, lb.url, runtime, [a, b], lb)


class App:
    """How the user works one app's page: the composer, Send/Stop, the transcript."""

    def __init__(self, name: str, page: Any, stack: Stack) -> None:
        self.name, self.page, self.stack = name, page, stack

    def open(self) -> None:
        if self.name == "assistant-ui":
            url = f"{self.stack.origin}/assistant-ui/?bridge={self.stack.bridge_url}/io-bridge"
        else:
            url = f"{self.stack.origin}/copilotkit/?runtime={self.stack.runtime_url}"
        self.page.goto(url)
        self.wait_idle()

    @property
    def thread_id(self) -> str:
        value: str = self.page.evaluate("new URLSearchParams(location.search).get('thread')")
        return value

    @property
    def box(self) -> Any:
        if self.name == "assistant-ui":
            return self.page.get_by_placeholder("Message")
        return self.page.get_by_test_id("copilot-chat-textarea")

    @property
    def transcript(self) -> Any:
        if self.name == "assistant-ui":
            return self.page.locator(".messages")
        return self.page.locator("[data-testid=copilot-chat]").or_(self.page.locator("body")).first

    def send(self, text: str) -> None:
        self.wait_idle()
        self.box.fill(text)
        self.box.press("Enter")

    def stop(self) -> None:
        if self.name == "assistant-ui":
            self.page.get_by_role("button", name="Stop").click()
        else:
            self.page.get_by_test_id("copilot-send-button").click()

    def wait_idle(self) -> None:
        if self.name == "assistant-ui":
            expect(self.page.get_by_role("button", name="Send")).to_be_visible()
        else:
            expect(self.page.locator("[data-testid=copilot-send-button] .lucide-square")
                   ).to_have_count(0)

    def tool(self, name: str) -> Any:
        return self.page.locator(f".tool[data-tool={name}]").last


@pytest.fixture(params=APPS)
def app(request: pytest.FixtureRequest, page: Any, single: Stack) -> App:
    return App(request.param, page, single)


def _assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]


def _cancelled_runs(stack: Stack) -> int:
    """Runs that ended with outcome ``cancelled``, from each replica's metrics."""
    total = 0
    for replica in stack.replicas:
        text = httpx.get(f"{replica.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("iobridge_runs_finished_total{") and 'outcome="cancelled"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


# -- the scenarios, shared by the one-server and the two-replica tests ------------------


def streamed_reply(app: App) -> None:
    """The reply grows on the page word by word; the thread stores it whole."""
    app.send("tell me a story")
    app.page.evaluate("""() => {
        window.__seen = [];
        new MutationObserver(() => {
            const text = document.body.innerText;
            if (text.includes('Once upon') && window.__seen.at(-1) !== text)
                window.__seen.push(text);
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")
    expect(app.transcript).to_contain_text(STORY.strip())
    app.wait_idle()
    seen: list[str] = app.page.evaluate("window.__seen")
    partial = [text for text in seen if "Once upon" in text and STORY.strip() not in text]
    assert len(partial) >= 3, f"the reply did not stream: {len(partial)} partial renders"
    stored = stored_messages(app.stack.bridge_url, app.thread_id)
    assert [m["role"] for m in stored][-2:] == ["user", "assistant"]
    assert stored[-2]["content"] == "tell me a story"
    assert stored[-1]["content"].strip() == STORY.strip()


def frontend_tool(app: App) -> None:
    """The agent calls the app's get_weather; the browser runs it, re-runs with the result
    (next-run), and the agent answers from it."""
    app.send("get_weather city=Oslo")
    expect(app.tool("get_weather")).to_contain_text("Weather in Oslo: sunny, 21 °C")
    expect(app.transcript).to_contain_text('The tool get_weather returned {"city":"Oslo"')
    app.wait_idle()
    stored = stored_messages(app.stack.bridge_url, app.thread_id)
    call_message = next(m for m in reversed(stored) if m.get("toolCalls"))
    (call,) = call_message["toolCalls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    results = [m for m in stored if m["role"] == "tool" and m["toolCallId"] == call["id"]]
    assert len(results) == 1, "the tool result is stored exactly once"
    assert json.loads(results[0]["content"]) == {"city": "Oslo", "sky": "sunny", "celsius": 21}
    assert stored[-1]["role"] == "assistant"
    assert stored[-1]["content"].startswith("The tool get_weather returned")


def server_tool(app: App) -> None:
    """iobridge's calculate runs on the server; the page shows the call and the answer."""
    app.send("what is 2 + 3 * 4")
    expect(app.tool("calculate")).to_contain_text('"value":14')
    expect(app.transcript).to_contain_text("2 + 3 * 4 = 14.")
    app.wait_idle()
    stored = stored_messages(app.stack.bridge_url, app.thread_id)
    assert stored[-1] == {**stored[-1], "role": "assistant", "content": "2 + 3 * 4 = 14."}
    result = stored[-2]
    assert result["role"] == "tool" and json.loads(result["content"])["value"] == 14


def stop(app: App) -> None:
    """Stop ends the run on the server (outcome cancelled), keeping what was shown."""
    before = _cancelled_runs(app.stack)
    app.send("count slowly")
    expect(app.transcript).to_contain_text("3 4 5")
    app.stop()
    app.wait_idle()
    shown = re.findall(r"\b\d+\b", app.transcript.inner_text().split("count slowly")[-1])
    assert 5 <= len(shown) < 600
    deadline = 100
    while _cancelled_runs(app.stack) == before and deadline:
        app.page.wait_for_timeout(100)
        deadline -= 1
    assert _cancelled_runs(app.stack) == before + 1
    stored = stored_messages(app.stack.bridge_url, app.thread_id)
    assert stored[-2]["content"] == "count slowly"
    counted = stored[-1]["content"].split()
    assert stored[-1]["role"] == "assistant" and counted == [str(n) for n in
                                                            range(1, len(counted) + 1)]
    assert len(shown) <= len(counted) < 600
    # The thread is free again at once: the next message gets its answer.
    app.send("what is 2 + 3 * 4")
    expect(app.transcript).to_contain_text("2 + 3 * 4 = 14.")


def reload(app: App) -> None:
    """After a reload the page shows the same thread: texts and tool calls with results."""
    # The last reply's text shows before its run ends; its messages are stored by then.
    app.wait_idle()
    before = stored_messages(app.stack.bridge_url, app.thread_id)
    app.page.reload()
    app.wait_idle()
    for text in ["get_weather city=Oslo", "what is 2 + 3 * 4", "2 + 3 * 4 = 14.",
                 'The tool get_weather returned {"city":"Oslo"']:
        expect(app.transcript).to_contain_text(text)
    expect(app.tool("get_weather")).to_contain_text("Weather in Oslo: sunny, 21 °C")
    expect(app.tool("calculate")).to_contain_text('"value":14')
    assert stored_messages(app.stack.bridge_url, app.thread_id) == before, "reload changed it"


# -- one server ------------------------------------------------------------------------------


def test_a_reply_streams_and_is_stored(app: App) -> None:
    app.open()
    streamed_reply(app)
    assert app.page.errors == []


def test_a_frontend_tool_round_trips_through_the_next_run(app: App) -> None:
    app.open()
    frontend_tool(app)
    assert app.page.errors == []


def test_a_server_tool_shows_its_call_and_result(app: App) -> None:
    app.open()
    server_tool(app)
    assert app.page.errors == []


def test_stop_cancels_the_run_on_the_server(app: App) -> None:
    app.open()
    stop(app)
    assert app.page.errors == []


def test_a_reload_restores_the_thread(app: App) -> None:
    app.open()
    frontend_tool(app)
    server_tool(app)
    reload(app)
    assert app.page.errors == []


# -- two replicas behind one port ------------------------------------------------------------


@pytest.mark.parametrize("name", APPS)
def test_two_replicas_behind_one_port_keep_it_all_working(
    name: str, page: Any, pair: Stack
) -> None:
    app = App(name, page, pair)
    assert pair.balancer is not None
    served = dict(pair.balancer.served)
    app.open()
    streamed_reply(app)
    frontend_tool(app)
    server_tool(app)
    stop(app)
    reload(app)
    assert app.page.errors == []
    used = {url: n - served.get(url, 0) for url, n in pair.balancer.served.items()}
    assert len(used) == 2 and min(used.values()) >= 2, used


# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_an_image_attachment_reaches_the_agent(page: Any, single: Stack) -> None:
    """assistant-ui's image attachment arrives as an AG-UI 1.0 image part: the agent sees
    its bytes, the thread stores it, and a reload shows it on the user's message."""
    app = App("assistant-ui", page, single)
    app.open()
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach").click()
    chooser.value.set_files([{"name": "dot.png", "mimeType": "image/png", "buffer": PNG}])
    expect(page.locator(".composer .attachment")).to_contain_text("dot.png")
    app.send("what is this?")
    expect(app.transcript).to_contain_text(f"I see image/png of {len(PNG)} bytes.")
    app.wait_idle()
    stored = stored_messages(single.bridge_url, app.thread_id)
    user = stored[-2]
    assert user["role"] == "user"
    images = [p for p in user["content"] if p["type"] == "image"]
    assert [p["source"]["mimeType"] for p in images] == ["image/png"]
    assert base64.b64decode(images[0]["source"]["value"]) == PNG
    assert [p["text"] for p in user["content"] if p["type"] == "text"] == ["what is this?"]
    page.reload()
    app.wait_idle()
    expect(page.locator(".message.user .attachment")).to_have_count(1)
    expect(app.transcript).to_contain_text(f"I see image/png of {len(PNG)} bytes.")
    assert page.errors == []
