"""End to end, subagents with the real ``@ag-ui/client`` 1.0: a model agent whose subagent
tool runs another model agent (both on the local fake of the OpenAI API) inside the run; the
client's own ``verifyEvents`` (subagent lifecycle and ownership) accepts the stream, and its
messages carry the subagent's attribution as the stored thread does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from harness import ROOT, run_client, running_server
from tests.agents.fake_openai import FakeOpenAI, calls, text

from agui_verify import verify_events
from iobridge.conformance.check.agui10 import subagent_problem


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def server(fake_llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp("e2e-subagents")
    config = workdir / "iobridge.toml"
    config.write_text(
        "[[agents]]\n"
        'id = "lead"\n'
        'model = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_llm.base_url}"\n'
        'subagents = ["helper"]\n'
        "\n[[agents]]\n"
        'id = "helper"\n'
        'description = "Finds facts."\n'
        'model = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_llm.base_url}"\n'
    )
    with running_server(workdir, env={"PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"},
                        args=("--config", str(config))) as url:
        yield url


def test_the_client_accepts_a_subagent_run_and_keeps_its_attribution(
    server: str, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reset()
    fake_llm.push(calls(("c1", "helper", '{"task": "find x"}')), text("x is 42"),
                  text("The helper says 42."))
    report = run_client(server, "what is x?", agent_id="lead")
    assert report["runErrors"] == []
    events = report["events"]
    verify_events(events, thread_id=report["threadId"], run_id=report["runId"])
    assert subagent_problem(events) is None
    assert_valid_agui(report["wire"])
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    sub = started["subagentRunId"]
    assert [e["type"] for e in events].count("SUBAGENT_FINISHED") == 1
    # The client's messages: the helper's answer attributed, the lead's own not.
    by_role = [(m["role"], m.get("subagentRunId"), m.get("content")) for m in report["messages"]
               if m["role"] != "user"]
    assert ("assistant", sub, "x is 42") in by_role
    assert ("assistant", None, "The helper says 42.") in by_role
    assert ("tool", None, "x is 42") in by_role
    # The stored thread holds the same messages, with the same attribution.
    stored = httpx.get(f"{server}/io-bridge/threads/{report['threadId']}/messages",
                       params={"format": "agui"}, timeout=10).json()["messages"]
    client = {m["id"]: m.get("subagentRunId") for m in report["messages"]}
    assert {m["id"]: m.get("subagentRunId") for m in stored} == client
