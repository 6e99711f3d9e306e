"""Agent definitions: TOML tables and Python, per-agent errors, secrets kept out of files."""

from __future__ import annotations

import logging
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from iobridge.agents.definitions import (
    AgentDefinition,
    build_agent,
    definition_from_dict,
    load_agents,
    resolve_tool,
)
from iobridge.agents.model import ModelAgent
from iobridge.agents.providers import AgentConfigError
from iobridge.agents.tools import ServerTool, tool

EXAMPLE = Path(__file__).parents[2] / "examples" / "iobridge.toml"
ENV = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "GOOGLE_API_KEY": "g-k",
       "VLLM_API_KEY": "v-k"}


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module with tools, and one that fails on import."""
    (tmp_path / "defs_tools.py").write_text(textwrap.dedent('''
        from iobridge.agents.tools import tool

        def lookup(sku: str, count: int = 1) -> dict:
            """Look up a product."""
            return {"sku": sku, "count": count}

        @tool(name="ping_tool")
        def ping() -> str:
            """Ping."""
            return "pong"

        NOT_CALLABLE = 3
    '''))
    (tmp_path / "defs_broken.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "defs_tools"


def test_example_file_builds_every_agent() -> None:
    config = tomllib.loads(EXAMPLE.read_text())
    agents, errors = load_agents(config["agents"], environ=ENV)
    assert errors == {}
    assert [a.id for a in agents] == ["assistant", "claude", "gemini", "local", "vllm"]
    by_id = {a.id: a for a in agents}
    assistant = by_id["assistant"]
    assert isinstance(assistant, ModelAgent)
    assert [t.name for t in assistant.tools] == ["calculate", "current_time"]
    assert assistant.model_settings == {"temperature": 0.2, "max_tokens": 1024, "max_retries": 2,
                                        "timeout": 60}
    assert assistant.describe()["modelId"] == "openai:gpt-4o-mini"
    assert by_id["local"].tool_result_mode == "next-run"  # type: ignore[attr-defined]
    assert by_id["claude"].model.system == "anthropic"  # type: ignore[attr-defined]
    assert by_id["gemini"].model.system.startswith("google")  # type: ignore[attr-defined]


def test_missing_key_fails_only_that_agent(caplog: pytest.LogCaptureFixture) -> None:
    config = tomllib.loads(EXAMPLE.read_text())
    env = {k: v for k, v in ENV.items() if k != "ANTHROPIC_API_KEY"}
    with caplog.at_level(logging.ERROR, logger="iobridge.agents.definitions"):
        agents, errors = load_agents(config["agents"], environ=env)
    assert [a.id for a in agents] == ["assistant", "gemini", "local", "vllm"]
    assert errors == {"claude": "environment variable ANTHROPIC_API_KEY is not set "
                                "(API key for anthropic)"}
    assert "claude" in caplog.text and "ANTHROPIC_API_KEY" in caplog.text


def test_default_key_variable_and_keyless_local_servers() -> None:
    agents, errors = load_agents([
        {"id": "o", "model": "openai:gpt-4o"},
        {"id": "local", "model": "openai:llama3", "base_url": "http://127.0.0.1:11434/v1"},
        {"id": "ol", "model": "ollama:llama3.2"},
        {"id": "named", "model": "openai:m", "base_url": "http://127.0.0.1:1/v1",
         "api_key_env": "MY_KEY"},
    ], environ={})
    assert [a.id for a in agents] == ["local", "ol"]
    assert errors["o"] == "environment variable OPENAI_API_KEY is not set (API key for openai)"
    # a named variable is required even for a local server
    assert "MY_KEY is not set" in errors["named"]
    ollama = agents[1]
    assert isinstance(ollama, ModelAgent)
    assert str(ollama.model.base_url).startswith("http://localhost:11434/v1")


@pytest.mark.parametrize("key", ["api_key", "apiKey", "token"])
def test_literal_secret_in_the_file_is_refused(key: str) -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:gpt-4o", key: "sk-LEAK"}],
                                 environ=ENV)
    assert agents == []
    assert "api_key_env" in errors["a"] and "sk-LEAK" not in errors["a"]


def test_key_pasted_into_api_key_env_is_refused_without_echo() -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:gpt-4o",
                                   "api_key_env": "sk-proj-abc123DEF"}], environ=ENV)
    assert agents == []
    assert "name of an environment variable" in errors["a"]
    assert "sk-proj" not in errors["a"]


def test_base_url_with_credentials_is_refused_without_echo() -> None:
    _, errors = load_agents([{"id": "a", "model": "openai:m",
                              "base_url": "https://user:hunter2@llm.example/v1"}], environ=ENV)
    assert "must not contain credentials" in errors["a"] and "hunter2" not in errors["a"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"model": "openai:gpt-4o"}, "'id' is required"),
        ({"id": "a"}, "'model' is required"),
        ({"id": "a", "model": "gpt-4o"}, "must look like 'provider:model'"),
        ({"id": "a", "model": "mistery:big"}, "unknown model provider 'mistery'"),
        ({"id": "a", "model": "openai:x", "modle_settings": {}}, "unknown key(s) modle_settings"),
        ({"id": "a", "model": "openai:x", "tools": "m:f"}, "'tools' must be a list"),
        ({"id": "a", "model": "openai:x", "model_settings": {"temperature": 9}},
         "model_settings.temperature must be a number between 0 and 2"),
        ({"id": "a", "model": "openai:x", "tool_result_mode": "later"}, "tool_result_mode"),
        ({"id": "a", "model": "openai:x", "output_retries": "2"}, "must be an integer"),
        ({"id": "a", "model": "openai:x", "output_retries": 99}, "between 0 and 10"),
        ({"id": "a", "model": "openai:x", "timeout": -1}, "timeout must be a positive"),
        ({"id": "a b", "model": "openai:x"}, "'id' must be"),
        ({"id": "a", "model": "openai:x", "base_url": "ftp://host"}, "http:// or https://"),
        ({"id": "a", "model": "openai:x", "aliases": "b"}, "'aliases' must be a list"),
        ({"id": "a", "model": "openai:x", "aliases": ["b c"]}, "alias 'b c' must be"),
        ({"id": "a", "model": "openai:x", "aliases": ["a"]}, "not the id"),
    ],
)
def test_bad_definitions_are_reported(entry: dict[str, Any], message: str) -> None:
    agents, errors = load_agents([entry], environ=ENV)
    assert agents == []
    (reason,) = errors.values()
    assert message in reason


def test_entry_without_id_is_keyed_by_position() -> None:
    _, errors = load_agents([{"id": "ok", "model": "openai:x"}, {"model": "openai:x"}, 7],  # type: ignore[list-item]
                            environ=ENV)
    assert set(errors) == {"#1", "#2"}


def test_duplicate_ids_keep_the_first() -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x", "description": "first"},
                                  {"id": "a", "model": "openai:y"}], environ=ENV)
    assert [a.description for a in agents] == ["first"]
    assert errors == {"a": "duplicate agent id 'a'"}


def test_tools_by_import_path(tools_module: str) -> None:
    agents, errors = load_agents([{
        "id": "shop", "model": "openai:x",
        "tools": [f"{tools_module}:lookup", f"{tools_module}:ping"],
    }], environ=ENV)
    assert errors == {}
    lookup, ping = agents[0].tools
    assert isinstance(lookup, ServerTool) and lookup.name == "lookup"
    assert lookup.parameters["required"] == ["sku"]
    assert lookup.description == "Look up a product."
    assert ping.name == "ping_tool"  # an existing ServerTool is kept as declared


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon_here", "must look like 'package.module:function'"),
        ("defs_missing_module:f", "no module named 'defs_missing_module' in the working "
                                  "directory"),
        ("defs_broken:f", "cannot import 'defs_broken' (RuntimeError: broken on import)"),
        ("defs_tools:nope", "has no attribute 'nope'"),
        ("defs_tools:NOT_CALLABLE", "is not callable"),
    ],
)
def test_bad_tool_paths_fail_only_their_agent(
    tools_module: str, spec: str, message: str
) -> None:
    agents, errors = load_agents([
        {"id": "bad", "model": "openai:x", "tools": [spec]},
        {"id": "good", "model": "openai:x", "tools": [f"{tools_module}:lookup"]},
    ], environ=ENV)
    assert [a.id for a in agents] == ["good"]
    assert message in errors["bad"]


def test_python_definitions_take_functions_and_server_tools() -> None:
    def area(width: float, height: float) -> float:
        """Area of a rectangle."""
        return width * height

    @tool(name="half")
    def halve(x: float) -> float:
        """Half of x."""
        return x / 2

    agent = build_agent(
        AgentDefinition(id="geo", model="openai:gpt-4o", tools=[area, halve],
                        model_settings={"max_tokens": 10}, instructions="Be exact."),
        environ=ENV,
    )
    assert [t.name for t in agent.tools] == ["area", "half"]
    assert agent.model_settings == {"max_tokens": 10}
    assert agent.instructions == "Be exact."
    assert agent.name == "geo"


def test_duplicate_tool_names_are_refused() -> None:
    def a() -> None:
        """A."""

    with pytest.raises(AgentConfigError, match="duplicate tool name"):
        build_agent(AgentDefinition(id="x", model="openai:x", tools=[a, tool(a)]), environ=ENV)


def test_definition_from_dict_keeps_values() -> None:
    d = definition_from_dict({"id": "a", "model": "openai:x", "name": "A", "timeout": 5,
                              "tools": ["m:f"], "model_settings": {"topP": 0.5}})
    assert (d.name, d.timeout, tuple(d.tools), dict(d.model_settings)) == (
        "A", 5, ("m:f",), {"topP": 0.5})


def test_resolve_tool_accepts_module_attribute_paths() -> None:
    resolved = resolve_tool("iobridge.agents.demo:calculate")
    assert resolved.name == "calculate"
    assert resolved.parameters["required"] == ["expression"]


def test_aliases_and_model_id_reach_the_agent() -> None:
    agents, errors = load_agents(
        [{"id": "io-agent", "aliases": ["ioAgent"], "name": "IO Agent", "model": "openai:gpt-4o"}],
        environ=ENV,
    )
    assert errors == {}
    (agent,) = agents
    assert agent.describe()["aliases"] == ["ioAgent"]
    assert agent.describe()["modelId"] == "openai:gpt-4o"
