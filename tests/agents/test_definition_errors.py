"""Agent definitions: import paths, upstream tables and limits, each refusal in the words a
user reads in ``GET /agents`` errors or the CLI."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from iobridge.agents.definitions import (
    build_upstream_agent,
    definition_from_dict,
    load_agents,
    resolve_tool,
)
from iobridge.agents.providers import AgentConfigError
from iobridge.agents.upstream import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_TIMEOUT,
    AgUiUpstreamAgent,
)

ENV = {"OPENAI_API_KEY": "sk-o"}
#: What every request to an upstream carries besides the configured headers.
UPSTREAM_DEFAULT_HEADERS = {"Accept": "text/event-stream", "Accept-Encoding": "identity",
                            "Content-Type": "application/json"}


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Modules of a user's project, importable from ``tmp_path``."""
    (tmp_path / "udefs.py").write_text(textwrap.dedent('''
        class Namespace:
            @staticmethod
            def shout(text: str) -> str:
                """Shout the text."""
                return text.upper()

        def unresolvable(x: "NoSuchType") -> str:  # noqa: F821
            """Its hint names nothing."""
            return str(x)
    '''))
    (tmp_path / "udefs_quiet.py").write_text("raise RuntimeError()\n")
    (tmp_path / "udefs_lines.py").write_text(
        "raise ValueError('first line\\nsecond line')\n"
    )
    (tmp_path / "udefs_nameless.py").write_text(
        "raise ModuleNotFoundError('plugin registry is empty')\n"
    )
    (tmp_path / "udefs_needs.py").write_text("import udefs_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def tool_error(spec: str) -> str:
    with pytest.raises(AgentConfigError) as caught:
        resolve_tool(spec)
    return caught.value.message


@pytest.mark.parametrize("spec", [":shout", "udefs:", "udefs"])
def test_a_tool_path_missing_a_part_says_what_it_must_look_like(spec: str) -> None:
    assert tool_error(spec) == f"tool {spec!r} must look like 'package.module:function'"


def test_a_nested_attribute_path_resolves_through_each_dot(user_modules: Path) -> None:
    assert resolve_tool("udefs:Namespace.shout").name == "shout"


def test_a_second_colon_belongs_to_the_attribute(user_modules: Path) -> None:
    assert tool_error("udefs:Namespace:shout") == (
        "tool 'udefs:Namespace:shout': 'udefs' has no attribute 'Namespace:shout'"
    )


def test_a_missing_package_names_the_folder_to_start_from(user_modules: Path) -> None:
    message = tool_error("udefs_nopkg.tools:f")
    assert message == (
        f"tool 'udefs_nopkg.tools:f': no module named 'udefs_nopkg' in the working directory "
        f"{os.getcwd()} or the installed packages (start iobridge from the folder that holds "
        "udefs_nopkg/ or udefs_nopkg.py, or install it)"
    )


def test_a_dependency_the_user_module_lacks_is_an_import_failure(user_modules: Path) -> None:
    """Not "start from another folder": the module was found, its own import failed."""
    assert tool_error("udefs_needs:f") == (
        "tool 'udefs_needs:f': cannot import 'udefs_needs' (ModuleNotFoundError: No module "
        "named 'udefs_absent_dependency')"
    )


def test_a_module_not_found_error_without_a_name_is_an_import_failure(
    user_modules: Path,
) -> None:
    assert tool_error("udefs_nameless:f") == (
        "tool 'udefs_nameless:f': cannot import 'udefs_nameless' (ModuleNotFoundError: "
        "plugin registry is empty)"
    )


def test_an_import_failure_shows_only_the_first_line_of_the_error(user_modules: Path) -> None:
    assert tool_error("udefs_lines:f") == (
        "tool 'udefs_lines:f': cannot import 'udefs_lines' (ValueError: first line)"
    )


def test_an_import_failure_without_a_message_names_the_exception(user_modules: Path) -> None:
    assert tool_error("udefs_quiet:f") == (
        "tool 'udefs_quiet:f': cannot import 'udefs_quiet' (RuntimeError: )"
    )


def test_a_tool_whose_schema_cannot_be_derived_says_so(user_modules: Path) -> None:
    message = tool_error("udefs:unresolvable")
    assert message.startswith("tool 'udefs:unresolvable': cannot derive its schema (")
    assert "NoSuchType" in message


def test_modules_of_the_working_directory_are_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``iobridge serve`` started in a project folder imports that project's tools."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "udefs_cwd.py").write_text('def hello() -> str:\n    """Hi."""\n    return "hi"\n')
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    monkeypatch.chdir(project)
    assert resolve_tool("udefs_cwd:hello").name == "hello"
    assert sys.path[0] == str(project)
    resolve_tool("udefs_cwd:hello")
    assert sys.path.count(str(project)) == 1


def test_a_pydantic_ai_path_that_is_not_an_agent_is_refused() -> None:
    _, errors = load_agents([{"id": "w", "pydantic_ai": "iobridge.agents.demo:calculate"}])
    assert errors == {"w": "pydantic_ai 'iobridge.agents.demo:calculate' is a ServerTool, "
                           "not a pydantic_ai.Agent"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("model", "openai:x"), ("base_url", "http://h"), ("api_key_env", "K"),
     ("instructions", "Be brief."), ("timeout", 5)],
)
def test_a_wrapped_pydantic_ai_agent_refuses_keys_of_a_built_model(key: str, value: Any) -> None:
    _, errors = load_agents([{"id": "w", "pydantic_ai": "m:agent", key: value}])
    assert errors == {"w": f"'{key}' cannot be used with 'pydantic_ai': set it on the "
                           "pydantic-ai Agent"}


# -- model agents: limits at their edges -----------------------------------------------------


@pytest.mark.parametrize("retries", [0, 10])
def test_output_retries_at_either_limit_are_accepted(retries: int) -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x", "output_retries": retries}],
                                 environ=ENV)
    assert errors == {}
    assert agents[0].output_retries == retries  # type: ignore[attr-defined]


@pytest.mark.parametrize("retries", [-1, 11])
def test_output_retries_one_past_a_limit_are_refused(retries: int) -> None:
    _, errors = load_agents([{"id": "a", "model": "openai:x", "output_retries": retries}],
                            environ=ENV)
    assert errors == {"a": "output_retries must be between 0 and 10"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds"),
        ({"timeout": True}, "'timeout' must be a number of seconds"),
        ({"output_retries": True}, "'output_retries' must be an integer"),
        ({"model_settings": 3}, "'model_settings' must be a table"),
        ({"capabilities": ["tools"]}, "'capabilities' must be a table (AG-UI AgentCapabilities)"),
        ({"subagents": "helper"}, "'subagents' must be a list of agent ids"),
        ({"subagents": [1]}, "'subagents' must be a list of agent ids"),
        ({"subagents": ["a b"]}, "subagent 'a b' is not an agent id"),
        ({"subagents": ["h", "h"]}, "'subagents' names an agent twice"),
        ({"mcp_servers": {"url": "http://x"}},
         "'mcp_servers' must be a list of tables ([[agents.mcp_servers]])"),
        ({"tools": [1]}, "'tools' must be a list of 'package.module:function' strings"),
        ({"aliases": [1]}, "'aliases' must be a list of strings"),
        ({"name": 5}, "'name' must be a string"),
        ({"api_key_env": "sk-pasted"}, "api_key_env must be the name of an environment "
                                       "variable (like OPENAI_API_KEY), not the key itself"),
        ({"tool_result_mode": "later"}, "tool_result_mode must be one of in-run, next-run"),
        ({"multitask_strategy": "shout"}, "multitask_strategy must be one of"),
    ],
)
def test_model_agent_refusals_in_full(entry: dict[str, Any], message: str) -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x", **entry}], environ=ENV)
    assert agents == []
    assert errors["a"].startswith(message)


def test_a_secret_key_is_refused_before_unknown_keys() -> None:
    _, errors = load_agents([{"id": "a", "model": "openai:x", "token": "t", "zz": 1}])
    assert errors == {"a": "'token' must not be in the configuration file: put the key in an "
                           "environment variable and name that variable with api_key_env"}


def test_unknown_keys_are_named_with_a_suggestion_and_the_known_keys() -> None:
    _, errors = load_agents([{"id": "a", "model": "openai:x", "descripton": "d"}])
    assert errors["a"] == (
        "unknown key(s) descripton (did you mean description?); known keys: aliases, "
        "api_key_env, base_url, capabilities, description, id, instructions, mcp_servers, "
        "model, model_settings, multitask_strategy, name, output_retries, pydantic_ai, "
        "subagents, timeout, tool_result_mode, tools"
    )


def test_every_unknown_key_is_named() -> None:
    _, errors = load_agents([{"id": "a", "model": "openai:x", "zz": 1, "descripton": "d"}])
    assert errors["a"].startswith("unknown key(s) descripton (did you mean description?), zz; "
                                  "known keys: ")


@pytest.mark.parametrize("agent_id", ["a b", "x" * 65])
def test_a_model_agent_id_must_be_a_short_word(agent_id: str) -> None:
    _, errors = load_agents([{"id": agent_id, "model": "openai:x"}], environ=ENV)
    assert errors == {agent_id: "'id' must be 1-64 letters, digits, '.', '_' or '-'"}


def test_a_table_without_texts_has_empty_ones() -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x"}], environ=ENV)
    assert errors == {}
    assert (agents[0].description, agents[0].instructions) == ("", "")  # type: ignore[attr-defined]
    assert definition_from_dict({"id": "w", "pydantic_ai": "m:agent"}).model == ""


def test_a_table_without_output_retries_sends_a_bad_answer_back_twice() -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x"}], environ=ENV)
    assert errors == {}
    assert agents[0].output_retries == 2  # type: ignore[attr-defined]


def test_a_model_agent_timeout_becomes_its_request_timeout() -> None:
    agents, errors = load_agents([{"id": "a", "model": "openai:x", "timeout": 0.5}],
                                 environ=ENV)
    assert errors == {}
    assert agents[0].model_settings == {"timeout": 0.5}  # type: ignore[attr-defined]


# -- agui_url tables -------------------------------------------------------------------------


def upstream(**table: Any) -> AgUiUpstreamAgent:
    return build_upstream_agent({"id": "up", "agui_url": "http://127.0.0.1:1/agui", **table},
                                environ={"TENANT": "acme"})


def upstream_error(**table: Any) -> str:
    _, errors = load_agents([{"id": "up", "agui_url": "http://127.0.0.1:1/agui", **table}],
                            environ={})
    return errors["up"]


def test_an_upstream_table_without_limits_gets_the_defaults() -> None:
    built = upstream()
    assert (built.timeout, built.max_event_bytes, built.max_rounds) == (
        DEFAULT_TIMEOUT, DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_ROUNDS)
    assert built.tool_result_mode is None
    assert (built.name, built.description) == ("up", "")
    assert built.headers == UPSTREAM_DEFAULT_HEADERS


def test_an_upstream_table_at_the_smallest_limits_is_accepted() -> None:
    built = upstream(timeout=0.5, max_event_bytes=1, max_rounds=0)
    assert (built.timeout, built.max_event_bytes, built.max_rounds) == (0.5, 1, 0)


def test_an_upstream_table_at_the_largest_round_limit_is_accepted() -> None:
    assert upstream(max_rounds=100).max_rounds == 100


def test_an_upstream_table_keeps_its_names_aliases_and_capabilities() -> None:
    built = upstream(name="Remote", description="Elsewhere", aliases=["remote"],
                     headers={"X-Tenant": "t"}, headers_env={"X-Other": "TENANT"},
                     capabilities={"tools": {"supported": False}})
    described = built.describe()
    assert (built.name, built.description, described["aliases"]) == (
        "Remote", "Elsewhere", ["remote"])
    assert built.headers == {**UPSTREAM_DEFAULT_HEADERS, "X-Tenant": "t", "X-Other": "acme"}
    assert described["capabilities"]["tools"]["supported"] is False


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"max_rounds": -1}, "'max_rounds' must be an integer between 0 and 100"),
        ({"max_rounds": True}, "'max_rounds' must be an integer between 0 and 100"),
        ({"max_rounds": 2.0}, "'max_rounds' must be an integer between 0 and 100"),
        ({"max_event_bytes": 0}, "'max_event_bytes' must be a positive integer"),
        ({"max_event_bytes": True}, "'max_event_bytes' must be a positive integer"),
        ({"timeout": -0.5}, "'timeout' must be a positive number"),
        ({"timeout": "5"}, "'timeout' must be a positive number"),
        ({"headers": ["X"]}, "'headers' must be a table of strings"),
        ({"headers_env": {"X": 1}}, "'headers_env' must be a table of strings"),
        ({"aliases": "remote"}, "'aliases' must be a list of strings"),
        ({"aliases": [1]}, "'aliases' must be a list of strings"),
        ({"aliases": ["up"]}, "alias 'up' must be 1-64 letters, digits, '.', '_' or '-', not "
                              "the id"),
        ({"aliases": ["r emote"]}, "alias 'r emote' must be 1-64 letters"),
        ({"capabilities": {"tools": 3}}, "capabilities"),
        ({"multitask_strategy": "shout"}, "multitask_strategy must be one of"),
        ({"tool_result_mode": "later"}, "tool_result_mode must be one of in-run, next-run"),
        ({"agui_url": None}, "'agui_url' is required"),
        ({"headers_env": {"Authorization": "UNSET_UPSTREAM_AUTH"}},
         "environment variable UNSET_UPSTREAM_AUTH is not set (headers_env Authorization)"),
        ({"headers_env": {"Authorization": "Bearer x"}},
         "headers_env 'Authorization' must name an environment variable, not hold the value"),
        ({"timout": 3, "nmae": "x"}, "unknown key(s) nmae (did you mean name?), timout (did you "
                                     "mean timeout?) for an agui_url agent"),
        ({"name": 3}, "'name' must be a string"),
        ({"headers": {"Cookie": "c", "Authorization": "a"}},
         "header 'Authorization' must not be in the configuration file: put its value in an "
         "environment variable and name that variable in headers_env"),
        ({"timout": 3}, "unknown key(s) timout (did you mean timeout?) for an agui_url agent; "
                        "known keys: agui_url, aliases, capabilities, description, headers, "
                        "headers_env, id, max_event_bytes, max_rounds, multitask_strategy, name, "
                        "timeout, tool_result_mode"),
        ({"agui_url": "ftp://x"}, "agui_url must be an http:// or https:// URL without "
                                  "credentials; put them in headers_env"),
    ],
)
def test_upstream_table_refusals_in_full(table: dict[str, Any], message: str) -> None:
    assert upstream_error(**table).startswith(message)


@pytest.mark.parametrize("agent_id", ["", "a b", "x" * 65])
def test_an_upstream_id_must_be_a_short_word(agent_id: str) -> None:
    _, errors = load_agents([{"id": agent_id, "agui_url": "http://127.0.0.1:1/agui"}])
    assert list(errors.values()) == ["'id' must be 1-64 letters, digits, '.', '_' or '-'"]


def test_an_upstream_id_of_64_characters_is_accepted() -> None:
    agents, errors = load_agents([{"id": "x" * 64, "agui_url": "http://127.0.0.1:1/agui"}])
    assert errors == {} and agents[0].id == "x" * 64


def test_an_upstream_without_url_or_id_is_refused() -> None:
    _, errors = load_agents([{"id": "up"}, {"agui_url": "http://127.0.0.1:1/agui"}])
    assert errors == {"up": "'model' is required", "#1": "'id' is required"}


def test_upstream_headers_from_the_environment_default_to_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IOBRIDGE_TEST_UPSTREAM_AUTH", "Bearer from-env")
    built = build_upstream_agent({"id": "up", "agui_url": "http://127.0.0.1:1/agui",
                                  "headers_env": {"Authorization": "IOBRIDGE_TEST_UPSTREAM_AUTH"}})
    assert built.headers["Authorization"] == "Bearer from-env"


def test_an_upstream_table_keeps_its_multitask_strategy() -> None:
    agents, errors = load_agents([{"id": "up", "agui_url": "http://127.0.0.1:1/agui",
                                   "multitask_strategy": "enqueue"}])
    assert errors == {}
    assert agents[0].multitask_strategy == "enqueue"


def test_a_second_upstream_with_a_taken_id_is_refused() -> None:
    agents, errors = load_agents([
        {"id": "up", "model": "openai:x"},
        {"id": "up", "agui_url": "http://127.0.0.1:1/agui"},
        {"id": "up2", "agui_url": "ftp://x"},
        {"id": "up2", "agui_url": "http://127.0.0.1:1/agui"},
    ], environ=ENV)
    assert [a.id for a in agents] == ["up"]
    assert errors["up"] == "duplicate agent id 'up'"
    assert errors["up2"] == "duplicate agent id 'up2'"
