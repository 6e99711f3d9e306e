"""Attachments, copy, copy as curl and interrupts that outlive a reload, in real Chromium.

Attachments become AG-UI 1.0 input parts that reach the agent (checked in what the agent
received and what the thread stored); what the agent declares it does not take, and what is
over the server's limits, is refused in the page before anything is sent; a 413 from the
server (limits that changed under the page) is a sentence, and the message comes back.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

from iobridge.agents.base import Agent
from iobridge.agents.capabilities import MEDIA_INPUTS
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class LookingAgent(Agent):
    """Takes images, PDFs and files (not audio) and says what each part of the message was."""

    id = "looking"
    name = "Looking agent"

    def own_capabilities(self) -> dict[str, Any]:
        accepted = dict.fromkeys(MEDIA_INPUTS, True)
        accepted["audio"] = False
        return {"multimodal": {"input": accepted}}

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        content = ctx.messages[-1].get("content")
        if isinstance(content, str):
            yield f"text only: {content}"
            return
        seen = []
        for part in content:
            if part["type"] == "text":
                seen.append(f"text {part['text']!r}")
            else:
                source = part["source"]
                size = len(base64.b64decode(source["value"]))
                name = (part.get("metadata") or {}).get("filename")
                seen.append(f"{part['type']} {source['mimeType']} {size} bytes {name}")
        yield "; ".join(seen)


def _open(page: Any, url: str) -> None:
    page.goto(f"{url}/playground")
    expect(page.locator("#agent option").first).to_be_attached()
    expect(page.locator("#send")).to_be_enabled()


def _file(name: str, mime: str, data: bytes) -> dict[str, Any]:
    return {"name": name, "mimeType": mime, "buffer": data}


def _stored(url: str, thread_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/io-bridge/threads/{thread_id}/messages?format=agui", timeout=10)
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def _thread_on_screen(page: Any) -> str:
    value: str = page.evaluate("new URLSearchParams(location.search).get('thread')")
    return value


def test_picked_image_and_pdf_reach_the_agent_with_previews(
    serve: Any, page: Any, screenshot: Any, axe: Any
) -> None:
    server = serve(agents=[LookingAgent()], default_agent="looking")
    _open(page, server.url)
    note = page.locator("#attach-note")
    expect(note).to_have_text(
        "Attach or drop images, video, PDFs, files · up to 2 MiB each, 3 MiB per message"
    )
    page.locator("#attach-input").set_input_files(
        [_file("dot.png", "image/png", PNG), _file("spec.pdf", "application/pdf", b"%PDF-1.4 x")]
    )
    chips = page.locator("#attachments li")
    expect(chips).to_have_count(2)
    expect(chips.first.locator("img")).to_have_attribute("alt", "Preview of dot.png")
    assert chips.first.locator("img").evaluate("i => i.complete && i.naturalWidth") == 1
    expect(chips.nth(1)).to_contain_text("spec.pdf")
    expect(note).to_contain_text(f"attached {len(PNG) + 10} B")
    # One removed and added again: the list follows.
    page.get_by_role("button", name="Remove spec.pdf").click()
    expect(chips).to_have_count(1)
    page.locator("#attach-input").set_input_files(
        [_file("spec.pdf", "application/pdf", b"%PDF-1.4 x")]
    )
    expect(chips).to_have_count(2)
    assert axe(page) == []
    screenshot("attached")
    page.locator("#text").fill("what are these?")
    page.locator("#text").press("Enter")
    reply = page.locator(".msg.assistant").last
    expect(reply).to_have_text(
        f"text 'what are these?'; image image/png {len(PNG)} bytes dot.png; "
        "document application/pdf 10 bytes spec.pdf"
    )
    expect(chips).to_have_count(0)
    bubble = page.locator(".msg.user").last
    expect(bubble.locator("figure img")).to_have_attribute("alt", "dot.png")
    expect(bubble.locator("figcaption").nth(1)).to_have_text("spec.pdf")
    expect(page.locator("#send")).to_be_enabled()
    stored = _stored(server.url, _thread_on_screen(page))
    parts = stored[0]["content"]
    assert [p["type"] for p in parts] == ["text", "image", "document"]
    assert base64.b64decode(parts[1]["source"]["value"]) == PNG
    assert parts[2]["source"]["mimeType"] == "application/pdf"
    # A reload shows the stored image again (from the history, through a blob: URL).
    page.reload()
    bubble = page.locator(".msg.user").last
    expect(bubble.locator("figure img")).to_have_attribute("alt", "dot.png")
    assert bubble.locator("img").evaluate("i => i.src.startsWith('blob:')")
    expect(bubble.locator("img")).to_have_js_property("naturalWidth", 1)
    screenshot("reloaded")
    assert page.errors == []


def test_a_dropped_file_is_attached(serve: Any, page: Any) -> None:
    server = serve(agents=[LookingAgent()], default_agent="looking")
    _open(page, server.url)
    drop = page.evaluate_handle(
        """() => {
            const data = new DataTransfer();
            data.items.add(new File(["hello"], "notes.txt", {type: "text/plain"}));
            return data;
        }"""
    )
    page.dispatch_event("#composer", "dragover", {"dataTransfer": drop})
    expect(page.locator("#composer")).to_have_class("dropping")
    page.dispatch_event("#composer", "drop", {"dataTransfer": drop})
    expect(page.locator("#composer")).not_to_have_class("dropping")
    expect(page.locator("#attachments li")).to_contain_text("notes.txt")
    page.locator("#send").click()  # attachments alone, no text
    expect(page.locator(".msg.assistant").last).to_have_text(
        "document text/plain 5 bytes notes.txt"
    )
    assert page.errors == []


def test_what_the_agent_refuses_and_what_is_too_large_never_leaves_the_page(
    serve: Any, page: Any
) -> None:
    server = serve(agents=[LookingAgent()], default_agent="looking",
                   max_media_part_bytes=1000, max_media_message_bytes=1500)
    _open(page, server.url)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/run") else None)
    expect(page.locator("#attach-note")).to_contain_text("up to 1000 B each, 1.5 KiB per message")
    problem = page.locator("#attach-problem")
    page.locator("#attach-input").set_input_files([_file("song.mp3", "audio/mpeg", b"ID3")])
    expect(problem).to_have_text(
        "song.mp3: Looking agent does not take audio (it takes images, video, PDFs, files)."
    )
    page.locator("#attach-input").set_input_files([_file("big.png", "image/png", b"x" * 1001)])
    expect(problem).to_have_text(
        "big.png is 1001 B: this server takes at most 1000 B per attachment."
    )
    page.locator("#attach-input").set_input_files(
        [_file("a.png", "image/png", b"a" * 900), _file("b.png", "image/png", b"b" * 900)]
    )
    expect(problem).to_have_text(
        "b.png (900 B) would bring this message's attachments over the server's 1.5 KiB."
    )
    expect(page.locator("#attachments li")).to_have_count(1)  # a.png was kept
    assert sent == []
    # The demo agent takes text only: the picker is off and says so.
    page.locator("#agent").select_option("demo")
    expect(page.locator("#attach")).to_be_disabled()
    expect(page.locator("#attach-note")).to_have_text("Demo agent takes text only.")
    assert page.errors == []


def test_a_413_is_a_sentence_and_the_message_comes_back(serve: Any, page: Any) -> None:
    server = serve(agents=[LookingAgent()], default_agent="looking", max_media_part_bytes=100)

    def stale_limits(route: Any) -> None:
        # The page was loaded when the server took more (its limits changed since).
        response = route.fetch()
        config = response.json()
        config["limits"]["maxMediaPartBytes"] = 10_000
        route.fulfill(response=response, body=json.dumps(config))

    page.route("**/playground/config.json", stale_limits)
    _open(page, server.url)
    page.locator("#attach-input").set_input_files([_file("pic.png", "image/png", b"p" * 500)])
    page.locator("#text").fill("look")
    page.locator("#send").click()
    error = page.locator(".msg.error").last
    expect(error).to_contain_text("The server refused the message as too large")
    expect(error).to_contain_text("(MEDIA_TOO_LARGE, HTTP 413)")
    expect(page.locator("#text")).to_have_value("look")
    expect(page.locator("#attachments li")).to_contain_text("pic.png")
    expect(page.locator("#send")).to_be_enabled()
    response = httpx.get(f"{server.url}/io-bridge/threads/{_thread_on_screen(page)}", timeout=10)
    assert response.status_code == 404, "nothing was stored"
    # Removing the attachment lets the text go.
    page.get_by_role("button", name="Remove pic.png").click()
    page.locator("#send").click()
    expect(page.locator(".msg.assistant").last).to_have_text("text only: look")
    assert page.errors == []


def test_copy_message_and_copy_as_curl_replays_the_request(
    serve: Any, browser: Any, tmp_path: Path
) -> None:
    server = serve()
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page = context.new_page()
    _open(page, server.url)
    page.locator("#text").fill("what is 2 + 3 * 4")
    page.locator("#text").press("Enter")
    expect(page.locator(".msg.assistant").last).to_contain_text("= 14.")
    expect(page.locator("#send")).to_be_enabled()
    reply_tools = page.locator(".msg-tools.assistant").last
    reply_tools.get_by_role("button", name="Copy this reply (Markdown)").click()
    expect(reply_tools.get_by_role("button").first).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "2 + 3 * 4 = 14."
    page.get_by_role("button", name="Copy this message").click()
    assert page.evaluate("navigator.clipboard.readText()") == "what is 2 + 3 * 4"
    page.get_by_role("button", name="Copy as curl: this request as a shell command").click()
    command: str = page.evaluate("navigator.clipboard.readText()")
    context.close()
    assert command.startswith(f"curl -N '{server.url}/io-bridge/run'")
    # The command runs as copied, in a shell: a new run of the same turn in the same thread.
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "IOBRIDGE_API_KEY": "unused"})
    assert done.returncode == 0, done.stderr
    events = [json.loads(line[5:]) for line in done.stdout.splitlines()
              if line.startswith("data:")]
    assert events[-1]["type"] == "RUN_FINISHED"
    thread_id = events[0]["threadId"]
    texts = [m.get("content") for m in _stored(server.url, thread_id)]
    assert texts.count("what is 2 + 3 * 4") == 2 and texts.count("2 + 3 * 4 = 14.") == 2


def test_an_approval_card_survives_a_reload_and_is_answered_after_it(
    serve: Any, page: Any, screenshot: Any
) -> None:
    server = serve()
    _open(page, server.url)
    page.locator("#text").fill("approve deploy")
    page.locator("#text").press("Enter")
    expect(page.locator(".tool-card.interrupt")).to_contain_text("Approve: deploy?")
    expect(page.locator("#send")).to_be_enabled()
    thread = httpx.get(f"{server.url}/io-bridge/threads/{_thread_on_screen(page)}").json()
    assert [i["reason"] for i in thread["interrupts"]] == ["approval"]
    page.reload()
    card = page.locator(".tool-card.interrupt")
    expect(card).to_contain_text("Approve: deploy?")
    expect(card.locator(".status")).to_have_text("waiting for your answer")
    screenshot("after-reload")
    expect(page.locator("#send")).to_be_enabled()
    card.get_by_role("button", name="Decline").click()
    expect(page.locator(".msg.assistant").last).to_have_text("Not approved: deploy.")
    expect(page.locator("#send")).to_be_enabled()
    # Answered: the thread keeps no open interrupt, and a reload asks nothing.
    thread = httpx.get(f"{server.url}/io-bridge/threads/{_thread_on_screen(page)}").json()
    assert "interrupts" not in thread
    page.reload()
    expect(page.locator(".msg.assistant").last).to_have_text("Not approved: deploy.")
    expect(page.locator(".tool-card.interrupt")).to_have_count(0)
    assert page.errors == []
