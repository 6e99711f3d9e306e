"""The real ``@ag-ui/client`` takes an interrupt outcome and resumes it with ``resume``."""

from __future__ import annotations

import uuid

import httpx
from ag_ui_validate.pytest_plugin import assert_valid_agui
from harness import run_node

from agui_verify import parse_sse, verify_events


def test_the_client_accepts_an_interrupt_and_resumes_it(server: str) -> None:
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    run_ids = [f"run-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    scenario = {"baseUrl": server, "threadId": thread_id, "runIds": run_ids,
                "text": "approve the launch", "payload": {"approved": True}, "timeoutMs": 15000}
    report = run_node("run_interrupt.mjs", scenario)
    first, second = report["runs"]
    assert first["runErrors"] == [] and second["runErrors"] == []
    # The client kept the outcome as sent (its schema knows the interrupt variant).
    outcome = first["events"][-1]["outcome"]
    assert outcome["type"] == "interrupt"
    assert outcome["interrupts"][0]["message"] == "Approve: the launch?"
    text = "".join(e["delta"] for e in second["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Approved: the launch."
    assert [m["content"] for m in report["messages"]] == [
        "approve the launch", "Approved: the launch."]
    for run_id, run in zip(run_ids, report["runs"], strict=True):
        wire = parse_sse(httpx.get(f"{server}/io-bridge/runs/{run_id}/events", timeout=10).content)
        verify_events(wire, thread_id=thread_id, run_id=run_id)
        assert_valid_agui(wire, max_warnings=0)
        assert [e["type"] for e in wire] == [e["type"] for e in run["events"]]
