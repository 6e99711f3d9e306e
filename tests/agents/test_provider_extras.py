"""Provider SDKs are extras: a missing one fails only its agents, with the extra to install.

A missing SDK is simulated by putting ``None`` in ``sys.modules`` for it (Python then raises
ImportError on import) and dropping pydantic-ai's already imported wrapper modules.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from iobridge.agents.definitions import load_agents
from iobridge.agents.providers import AgentConfigError, build_model

EXAMPLE = Path(__file__).parents[2] / "examples" / "iobridge.toml"
ENV = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "GOOGLE_API_KEY": "g-k",
       "VLLM_API_KEY": "v-k"}
#: provider -> (the SDK's top-level module, pydantic-ai's modules wrapping it)
SDKS = {
    "openai": ("openai", ["pydantic_ai.models.openai", "pydantic_ai.providers.openai"]),
    "anthropic": ("anthropic", ["pydantic_ai.models.anthropic", "pydantic_ai.providers.anthropic"]),
    "google": ("google.genai", ["pydantic_ai.models.google", "pydantic_ai.providers.google"]),
}


def _uninstall(monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    module, wrappers = SDKS[extra]
    monkeypatch.setitem(sys.modules, module, None)  # type: ignore[arg-type]
    for name in wrappers:
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("anthropic:claude-sonnet-4-5", "anthropic"),
        ("google:gemini-2.5-flash", "google"),
        ("openai:gpt-4o-mini", "openai"),
        ("ollama:llama3.2", "openai"),
    ],
)
def test_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, model: str, extra: str
) -> None:
    _uninstall(monkeypatch, extra)
    with pytest.raises(AgentConfigError) as caught:
        build_model(model, environ=ENV)
    assert str(caught.value) == (
        f"the {extra} SDK is not installed (model {model}): pip install 'iobridge[{extra}]'"
    )
    assert caught.value.code == "AGENT_CONFIG_INVALID"


def test_missing_sdk_leaves_the_other_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    _uninstall(monkeypatch, "anthropic")
    config = tomllib.loads(EXAMPLE.read_text())
    agents, errors = load_agents(config["agents"], environ=ENV)
    assert [a.id for a in agents] == ["assistant", "gemini", "local", "vllm"]
    assert errors == {
        "claude": "the anthropic SDK is not installed (model anthropic:claude-sonnet-4-5): "
        "pip install 'iobridge[anthropic]'"
    }


def test_base_install_serves_without_the_optional_sdks() -> None:
    """With the Anthropic and Google SDKs unimportable, the server runs the demo agent."""
    script = textwrap.dedent("""
        import json, sys
        sys.modules["anthropic"] = None
        sys.modules["google.genai"] = None
        from fastapi.testclient import TestClient
        from iobridge.agents.providers import build_model
        from iobridge.config import Settings
        from iobridge.app import Backend
        from iobridge.http.app import create_app

        build_model("openai:gpt-4o-mini", environ={"OPENAI_API_KEY": "k"})
        body = {"threadId": "t", "runId": "r", "tools": [], "context": [],
                "messages": [{"id": "m", "role": "user", "content": "2 + 2"}]}
        app = create_app(Backend(Settings(database_url="memory://")))
        with TestClient(app, base_url="http://127.0.0.1") as client:
            stream = client.post("/io-bridge/run", json=body).text
        events = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: ")]
        print(json.dumps({"types": [e["type"] for e in events],
                          "text": "".join(e.get("delta", "") for e in events)}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["types"][0] == "RUN_STARTED" and run["types"][-1] == "RUN_FINISHED"
    assert run["text"].endswith("2 + 2 = 4.")
