"""End to end, AG-UI 1.0 with the real ``@ag-ui/client`` and ``@ag-ui/core``: the version on
every run, every agent's capabilities against the client's own schema, multimodal input to an
OpenAI-compatible server and back through both history formats, and an upstream interrupt
resumed through iobridge.

One ``iobridge serve`` subprocess configured in TOML with a model agent (a local fake of the
OpenAI API: no paid API is reachable), a pydantic-ai agent, an upstream AG-UI server with an
approval-gated tool, and an agent whose capabilities the TOML overrides.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import PROTOCOL_VERSION
from ag_ui_validate.pytest_plugin import assert_valid_agui
from harness import ROOT, run_client, run_node, running_server
from tests.agents.fake_openai import FakeOpenAI, text
from tests.agents.upstream_apps import Upstream, approval_upstream

from agui_verify import parse_sse, verify_events

PNG = b"\x89PNG\r\n\x1a\n" + b"\x02" * 24
PDF = b"%PDF-1.7\n%%EOF\n"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 8


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with approval_upstream() as running:
        yield running


@pytest.fixture(scope="module")
def server(fake_llm: FakeOpenAI, upstream: Upstream,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp("e2e-agui10")
    config = workdir / "iobridge.toml"
    config.write_text(
        "[[agents]]\n"
        'id = "vision"\n'
        'model = "openai:gpt-4o-audio-preview"\n'
        f'base_url = "{fake_llm.base_url}"\n'
        "\n[[agents]]\n"
        'id = "weather"\n'
        'pydantic_ai = "tests.agents.pyai_agents:weather_agent"\n'
        "\n[[agents]]\n"
        'id = "ops"\n'
        f'agui_url = "{upstream.url}"\n'
        "\n[[agents]]\n"
        'id = "text-only"\n'
        'model = "openai:gpt-4o"\n'
        f'base_url = "{fake_llm.base_url}"\n'
        "capabilities = { multimodal = { input = { image = false, pdf = false } }, "
        'identity = { version = "2.0.0" } }\n'
    )
    env = {"PYTHONPATH": str(ROOT)}
    with running_server(workdir, env=env, args=("--config", str(config))) as url:
        yield url


def test_every_agent_kind_declares_capabilities_the_client_schema_accepts(server: str) -> None:
    report = run_node("check_agents.mjs", {"baseUrl": server})
    assert report["protocolVersions"] == [report["clientVersion"]] == [PROTOCOL_VERSION]
    agents = {a["id"]: a for a in report["agents"]}
    assert set(agents) == {"demo", "vision", "weather", "ops", "text-only"}
    for agent in agents.values():
        assert agent["status"] == "available", agent
        assert agent["valid"], (agent["id"], agent["issues"])
    kinds = {i: a["capabilities"]["identity"]["type"] for i, a in agents.items()}
    assert kinds == {"demo": "demo", "vision": "pydantic-ai", "weather": "pydantic-ai",
                     "ops": "ag-ui", "text-only": "pydantic-ai"}
    assert agents["vision"]["capabilities"]["multimodal"]["input"]["audio"] is True
    overridden = agents["text-only"]["capabilities"]
    assert overridden["multimodal"]["input"] == {"image": False, "audio": False,
                                                 "video": False, "pdf": False, "file": True}
    assert overridden["identity"]["version"] == "2.0.0"
    assert agents["ops"]["capabilities"]["humanInTheLoop"] == {"interrupts": True}


def test_every_run_declares_the_version(server: str) -> None:
    for agent_id in ("demo", "ops"):
        report = run_client(server, "hello", agent_id=agent_id)
        assert report["runErrors"] == []
        assert report["events"][0]["protocolVersion"] == PROTOCOL_VERSION
        assert report["wire"][0]["protocolVersion"] == PROTOCOL_VERSION
        assert_valid_agui(report["wire"], max_warnings=0)


def test_another_major_version_is_refused_before_the_run(server: str) -> None:
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    response = httpx.post(f"{server}/io-bridge/run", json={
        "threadId": thread_id, "runId": "r", "protocolVersion": "2.0", "messages": [
            {"id": "u", "role": "user", "content": "hi"}]}, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "UNSUPPORTED_PROTOCOL_VERSION"
    assert error["details"] == {"supported": [PROTOCOL_VERSION]}
    assert httpx.get(f"{server}/io-bridge/threads/{thread_id}", timeout=10).status_code == 404


def test_an_image_a_pdf_and_an_audio_clip_from_the_client_reach_the_model(
    server: str, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reset()
    fake_llm.push(text("Seen, read and heard."))
    content = [
        {"type": "text", "text": "describe these"},
        {"type": "image", "source": {"type": "data", "value": b64(PNG), "mimeType": "image/png"}},
        {"type": "document", "source": {"type": "data", "value": b64(PDF),
                                        "mimeType": "application/pdf"}},
        {"type": "audio", "source": {"type": "data", "value": b64(WAV), "mimeType": "audio/wav"}},
    ]
    report = run_node("run_agent.mjs", {
        "baseUrl": server, "threadId": (thread := f"thread-{uuid.uuid4().hex[:12]}"),
        "runId": (run_id := f"run-{uuid.uuid4().hex[:12]}"), "text": None, "content": content,
        "tools": [], "frontendResults": {}, "timeoutMs": 15000, "agentId": "vision"})
    assert report["runErrors"] == []
    verify_events(report["events"], thread_id=thread, run_id=run_id)
    [request] = fake_llm.requests
    sent = next(m for m in request["messages"] if m["role"] == "user")["content"]
    assert [p["type"] for p in sent] == ["text", "image_url", "file", "input_audio"]
    assert sent[1]["image_url"]["url"] == f"data:image/png;base64,{b64(PNG)}"
    assert sent[2]["file"]["file_data"] == f"data:application/pdf;base64,{b64(PDF)}"
    assert sent[3]["input_audio"] == {"data": b64(WAV), "format": "wav"}

    base = f"{server}/io-bridge/threads/{thread}/messages"
    agui = httpx.get(base, params={"format": "agui"}, timeout=10).json()["messages"]
    assert agui[0]["content"] == content
    mastra = httpx.get(base, params={"format": "mastra"}, timeout=10).json()["messages"]
    assert mastra[0]["content"]["parts"][1:] == [
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": f"data:image/png;base64,{b64(PNG)}"},
        {"type": "file", "mimeType": "application/pdf", "mediaType": "application/pdf",
         "data": f"data:application/pdf;base64,{b64(PDF)}"},
        {"type": "file", "mimeType": "audio/wav", "mediaType": "audio/wav",
         "data": f"data:audio/wav;base64,{b64(WAV)}"},
    ]


def test_media_an_agent_does_not_take_is_refused_to_the_client(server: str) -> None:
    image = {"type": "image", "source": {"type": "url", "value": "https://x.test/a.png"}}
    scenario = {"baseUrl": server, "threadId": f"thread-{uuid.uuid4().hex[:12]}",
                "runId": "r", "text": None, "content": [image], "tools": [],
                "frontendResults": {}, "timeoutMs": 15000, "agentId": "text-only"}
    completed = run_node_error("run_agent.mjs", scenario)
    assert "HTTP 400" in completed and "UNSUPPORTED_MEDIA" in completed


def run_node_error(script: str, scenario: dict[str, Any]) -> str:
    """The error the client reported (``runAgent`` rejects a non-2xx answer)."""
    import subprocess

    from harness import HERE, NODE
    done = subprocess.run([NODE or "node", str(HERE / script), json.dumps(scenario)], cwd=HERE,
                          capture_output=True, text=True, timeout=30)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["error"] is not None
    return str(report["error"])


def test_an_upstream_interrupt_is_resumed_through_iobridge_by_the_client(
    server: str, upstream: Upstream
) -> None:
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    run_ids = [f"run-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    report = run_node("run_interrupt.mjs", {
        "baseUrl": server, "threadId": thread_id, "runIds": run_ids, "text": "delete v1.txt",
        "payload": {"approved": True}, "timeoutMs": 20000, "agentId": "ops"})
    first, second = report["runs"]
    assert first["runErrors"] == [] and second["runErrors"] == []
    [interrupt] = first["events"][-1]["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "call-delete"
    results = [e for e in second["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["content"] for r in results] == ["deleted v1.txt"]
    assert "v1.txt" in upstream.deleted
    # The client filed the result after the call it got in the first run: one call, answered.
    roles = [m["role"] for m in report["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert [c["id"] for c in report["messages"][1]["toolCalls"]] == ["call-delete"]
    for run_id, earlier in zip(run_ids, [(), ("call-delete",)], strict=True):
        wire = parse_sse(httpx.get(f"{server}/io-bridge/runs/{run_id}/events", timeout=10).content)
        verify_events(wire, thread_id=thread_id, run_id=run_id, earlier_calls=earlier)
