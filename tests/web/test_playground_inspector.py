"""The inspector in real Chromium: events grouped by run, text deltas and tool calls folded
(with timing), the run's timeline and usage, state snapshots and deltas with the state they
lead to, filter and search, and a run exported as JSON lines (the events the server sent).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput, StateDelta, StateSnapshot
from iobridge.agents.tools import tool


@tool
async def slow_lookup(word: str) -> dict[str, Any]:
    """Look a word up (takes 300 ms)."""
    await asyncio.sleep(0.3)
    return {"word": word, "found": True}


class BusyAgent(Agent):
    """State, a slow server tool, a streamed reply and token usage in one run."""

    id = "busy"
    name = "Busy agent"
    tools = (slow_lookup,)

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield StateSnapshot(snapshot={"step": 1, "notes": []})
        yield StateDelta(patch=[{"op": "replace", "path": "/step", "value": 2},
                                {"op": "add", "path": "/notes/-", "value": "looked up"}])
        result = await ctx.call_tool("slow_lookup", {"word": "bridge"})
        assert not result.is_error
        for word in ("The ", "word ", "was ", "found."):
            yield word
        ctx.add_usage("fake", "m1", {"inputTokens": 12, "outputTokens": 30, "totalTokens": 42})


def test_runs_fold_time_filter_search_and_export(
    serve: Any, page: Any, screenshot: Any, axe: Any, tmp_path: Path
) -> None:
    server = serve(agents=[BusyAgent()], default_agent="busy")
    page.goto(f"{server.url}/playground")
    expect(page.locator("#send")).to_be_enabled()
    for text in ("first", "second"):
        page.locator("#text").fill(text)
        page.locator("#text").press("Enter")
        expect(page.locator(".msg.assistant").last).to_have_text("The word was found.")
        expect(page.locator("#send")).to_be_enabled()
    runs = page.locator("#events li.run")
    expect(runs).to_have_count(2)
    run = runs.last
    expect(run.locator(".run-usage")).to_have_text("usage fake/m1: 12 in · 30 out · 42 total")
    timeline = run.locator(".run-timeline").inner_text()
    parts = timeline.split(" · ")
    assert parts[0].startswith("first event after ") and parts[-1].startswith("total "), timeline
    assert parts[1].startswith("1 tool call waited "), timeline
    waited = parts[1].removeprefix("1 tool call waited ")
    assert waited.endswith(" ms") and int(waited[:-3]) >= 200, timeline  # the tool sleeps 300 ms
    # The tool call is one entry: its arguments, its result, how long it took.
    call = run.locator("li.group", has_text="TOOL_CALL slow_lookup")
    expect(call.locator("pre.folded")).to_have_text(
        'arguments: {"word":"bridge"}\nresult: {"word":"bridge","found":true}'
    )
    expect(call.locator(".figures")).to_contain_text("waited ")
    # The reply's four deltas are one entry with the text; the raw events open on demand.
    reply = run.locator("li.group", has_text="TEXT_MESSAGE")
    expect(reply.locator(".figures")).to_have_text("4 deltas · 19 characters")
    expect(reply.locator("pre.folded")).to_have_text("The word was found.")
    reply.locator("details.raw summary").click()
    raw = [json.loads(line) for line in reply.locator("details.raw pre").inner_text().splitlines()]
    assert [e["type"] for e in raw] == ["TEXT_MESSAGE_START", *["TEXT_MESSAGE_CONTENT"] * 4,
                                        "TEXT_MESSAGE_END"]
    # The delta shows the state it leads to.
    delta = run.locator("li.state[data-type=STATE_DELTA]")
    assert json.loads(delta.locator("pre.state-after").inner_text()) == {
        "step": 2, "notes": ["looked up"]}
    assert axe(page) == []
    screenshot("inspector")

    # Filter by type: only the entries with such an event, in both runs.
    page.locator("#event-filter").select_option("TOOL_CALL_RESULT")
    visible = page.locator("#events li[data-type]:not(.hidden)")
    expect(visible).to_have_count(2)
    expect(visible.locator(".type")).to_have_text(["TOOL_CALL slow_lookup"] * 2)
    page.locator("#event-filter").select_option("")
    # Search the events' JSON: the first run's id is in its first and last events only.
    page.locator("#event-search").fill(runs.first.get_attribute("data-run-id").upper())
    expect(page.locator("#events li.run:not(.hidden)")).to_have_count(1)
    expect(visible.locator(".type")).to_have_text(["RUN_STARTED", "RUN_FINISHED"])
    page.locator("#event-search").fill("REPLACE")  # a state delta's operation, in both runs
    expect(visible).to_have_count(2)
    page.locator("#event-search").fill("")
    expect(page.locator("#events li.run:not(.hidden)")).to_have_count(2)

    # Export: the run's events as the server sent them, one a line.
    with page.expect_download() as download:
        run.get_by_role("button", name="Export JSON lines").click()
    assert download.value.suggested_filename == f"run-{run.get_attribute('data-run-id')}.jsonl"
    target = tmp_path / "run.jsonl"
    download.value.save_as(target)
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert events[0]["runId"] == run.get_attribute("data-run-id")
    assert events[-1]["usage"] == [{"provider": "fake", "model": "m1", "inputTokens": 12,
                                    "outputTokens": 30, "totalTokens": 42}]
    assert sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events) == 4

    # A reload keeps the grouping, the timeline and the usage.
    page.reload()
    expect(page.locator("#send")).to_be_enabled()
    expect(runs).to_have_count(2)
    expect(runs.last.locator(".run-usage")).to_have_text(
        "usage fake/m1: 12 in · 30 out · 42 total")
    expect(runs.last.locator(".run-timeline")).to_have_text(timeline)
    assert page.errors == []
