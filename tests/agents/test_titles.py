"""Generated thread titles (``memoryOptions.generateTitle``) from a model agent's own model.

Over a live server and the local OpenAI-compatible fake: the title request is bounded, stored
before the terminal event, and a slow or failing title request falls back to the first
message's text.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from fake_openai import FakeOpenAI, Reply, error, text
from tests.helpers import parse_sse, run_body

from iobridge.agents.model import TITLE_MAX_TOKENS, ModelAgent, _clean_title
from iobridge.agents.providers import build_model

QUESTION = "Could you help me plan a long weekend in Oslo next spring with kids?"


def title_agent(base_url: str, **kwargs: Any) -> ModelAgent:
    model = build_model("openai:gpt-4o", base_url=base_url, environ={"K": "sk-x"},
                        api_key_env="K")
    return ModelAgent(id="planner", model=model, model_settings={"max_retries": 0}, **kwargs)


async def run_and_read_title(server: Any, body: dict[str, Any]) -> tuple[list[Any], str]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        response = await client.post("/io-bridge/run", json=body)
        # Read right after the stream closed: the title must already be there.
        thread = (await client.get(f"/io-bridge/threads/{body['threadId']}")).json()
    return parse_sse(response.text), thread["title"]


async def test_the_model_titles_the_thread_with_a_bounded_request(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(text("Sure, here is a plan."), text('"Family ', 'weekend in Oslo."\nmore'))
    server = serve(agents=[title_agent(fake_openai.base_url)])
    body = run_body(QUESTION, agentId="planner", memoryOptions={"generateTitle": True})
    events, title = await run_and_read_title(server, body)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert title == "Family weekend in Oslo"

    answer, title_request = fake_openai.requests
    assert "max_tokens" not in answer and "max_completion_tokens" not in answer
    limit = title_request.get("max_completion_tokens", title_request.get("max_tokens"))
    assert limit == TITLE_MAX_TOKENS
    assert title_request["stream"] is True and "tools" not in title_request
    prompt = "\n".join(str(m["content"]) for m in title_request["messages"])
    assert f"User: {QUESTION}" in prompt and "Assistant: Sure, here is a plan." in prompt
    assert "short title" in prompt

    # Titled once: the next run asks the model for its answer only.
    fake_openai.reset()
    fake_openai.push(text("Anything else?"))
    again = run_body("thanks", run_id="r2", agentId="planner",
                     memoryOptions={"generateTitle": True})
    _, title = await run_and_read_title(server, again)
    assert title == "Family weekend in Oslo" and len(fake_openai.requests) == 1


@pytest.mark.parametrize("failure", ["slow", "error", "empty"])
async def test_a_slow_or_failed_title_request_falls_back_to_the_first_message(
    fake_openai: FakeOpenAI, serve: Any, failure: str
) -> None:
    title_reply = {"slow": Reply(text=("Too late",), delay=3.0),
                   "error": error(500), "empty": text("  ")}[failure]
    fake_openai.push(text("Sure."), title_reply)
    server = serve(agents=[title_agent(fake_openai.base_url, title_timeout=0.5)])
    body = run_body(QUESTION, agentId="planner", memoryOptions={"generateTitle": True})
    started = time.monotonic()
    events, title = await run_and_read_title(server, body)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert title == "Could you help me plan a long weekend in Oslo next spring with kids?"
    assert time.monotonic() - started < 3.0  # the timeout, not the slow reply, ended it
    assert len(fake_openai.requests) == 2


async def test_a_failed_run_is_titled_without_asking_the_model(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(error(400))
    server = serve(agents=[title_agent(fake_openai.base_url)])
    body = run_body("Short question", agentId="planner", memoryOptions={"generateTitle": True})
    events, title = await run_and_read_title(server, body)
    assert events[-1]["type"] == "RUN_ERROR"
    assert title == "Short question" and len(fake_openai.requests) == 1


@pytest.mark.parametrize(
    ("raw", "title"),
    [("Title: Oslo trip.", "Oslo trip"), ("“Quoted”", "Quoted"), ("a\x00b\u200bc", "abc"),
     ("x" * 200, "x" * 80), ("\n\n  Second line  \nthird", "Second line"), ("...", None)],
)
def test_clean_title(raw: str, title: str | None) -> None:
    assert _clean_title(raw) == title
