"""End to end: an AG-UI server (pydantic-ai ``AGUIAdapter``) behind ``iobridge serve``.

The upstream runs on a loopback port in this process; ``iobridge serve`` fronts it from an
``[[agents]] agui_url`` table; the real ``@ag-ui/client`` drives the runs and answers the
frontend tool while the stream is open, which the upstream alone (next-run style) cannot do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from harness import run_client, running_server
from tests.agents.upstream_apps import WEATHER, Upstream, pydantic_upstream

from agui_verify import verify_events


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with pydantic_upstream() as running:
        yield running


@pytest.fixture(scope="module")
def server(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("e2e-upstream")
    config = workdir / "iobridge.toml"
    config.write_text(f'[[agents]]\nid = "upstream"\nagui_url = "{upstream.url}"\n')
    with running_server(workdir, args=("--config", str(config))) as url:
        yield url


def checked(report: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = report["events"]
    verify_events(events, thread_id=report["threadId"], run_id=report["runId"])
    verify_events(report["wire"], thread_id=report["threadId"], run_id=report["runId"])
    assert_valid_agui(report["wire"], max_warnings=0)
    assert report["runErrors"] == []
    return events


def reply(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def test_text(server: str) -> None:
    report = run_client(server, "hello", agent_id="upstream")
    assert reply(checked(report)) == "Hello from upstream."
    assert [m["role"] for m in report["newMessages"]] == ["assistant"]


def test_server_tool(server: str) -> None:
    report = run_client(server, "what time is it?", agent_id="upstream")
    events = checked(report)
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call-now" and result["content"] == "12:00 UTC"
    assert reply(events) == "Results: now=12:00 UTC"
    assert [m["role"] for m in report["newMessages"]] == ["assistant", "tool", "assistant"]


def test_in_run_frontend_tool(server: str, upstream: Upstream) -> None:
    before = len(upstream.bodies)
    report = run_client(server, "weather in Paris?", agent_id="upstream", tools=[WEATHER],
                        frontend_results={"get_weather": {"tempC": 19}})
    events = checked(report)
    [post] = report["posts"]
    assert post["status"] == 200 and post["toolCallName"] == "get_weather"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"]) == {"tempC": 19, "args": {"city": "Paris"}}
    assert reply(events[events.index(result):]).startswith("Results: get_weather=")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert "pendingToolCallIds" not in events[-1].get("outcome", {})
    # One client run, two upstream runs: the follow-up carried the call and its result.
    assert len(upstream.bodies) == before + 2
    follow_up = upstream.bodies[-1]["messages"]
    assert follow_up[-1]["role"] == "tool" and follow_up[-1]["toolCallId"] == post["toolCallId"]
    roles = [m["role"] for m in report["newMessages"]]
    assert roles == ["assistant", "tool", "assistant"]


def test_discovery_lists_the_upstream_agent(server: str) -> None:
    agents = httpx.get(f"{server}/io-bridge/agents", timeout=10).json()["agents"]
    listed = next(a for a in agents if a["id"] == "upstream")
    assert listed["status"] == "available"
