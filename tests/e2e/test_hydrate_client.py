"""A reloaded stock ``@ag-ui/client`` gets its history back with ``messagesSnapshot``."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from harness import run_client

from agui_verify import verify_events

NOTICE = {"name": "show_notice", "description": "Show a notice (runs in the browser).",
          "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}


def stored(server: str, thread_id: str) -> list[dict[str, Any]]:
    url = f"{server}/io-bridge/threads/{thread_id}/messages?format=agui"
    return httpx.get(url, timeout=10).json()["messages"]  # type: ignore[no-any-return]


def test_a_fresh_client_hydrates_from_the_stored_thread(server: str) -> None:
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    run_client(server, "what is 6 * 7", thread_id=thread_id)
    run_client(server, 'show_notice text="saved" and the time', tools=[NOTICE],
               frontend_results={"show_notice": {"shown": True}}, thread_id=thread_id)
    conversation = stored(server, thread_id)
    roles = [m["role"] for m in conversation]
    assert roles == ["user", "assistant", "tool", "assistant",
                     "user", "assistant", "tool", "tool", "assistant"]

    # A new page: an HttpAgent with no messages, same threadId, asking for the snapshot.
    report = run_client(server, None, thread_id=thread_id,
                        forwarded_props={"messagesSnapshot": True})
    kinds = [e["type"] for e in report["events"]]
    assert kinds == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    verify_events(report["events"], thread_id=thread_id, run_id=report["runId"])
    assert report["messages"] == conversation
    assert stored(server, thread_id) == conversation  # hydrating stored nothing
