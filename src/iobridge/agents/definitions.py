"""Agent definitions: ``[[agents]]`` tables of ``iobridge.toml``, dicts, or Python.

A definition names a model and its tools (``build_agent`` makes a ``ModelAgent``), or the
import path of an existing pydantic-ai ``Agent`` (``pydantic_ai = "package.module:agent"``,
served as a ``PydanticAIAgent``); either may add ``mcp_servers``. A table with ``agui_url``
instead fronts another AG-UI server (``build_upstream_agent``).
``load_agents`` builds a whole list and never raises: an agent whose key is missing or whose
tool cannot be imported is reported (and logged) on its own, and the other agents still
start, so one bad entry never takes the server down.

Secrets never live in the file: ``api_key_env`` *names* an environment variable, and a
definition that carries a key itself is refused with a message saying what to do instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.settings import ModelSettings

from iobridge.agents.base import Agent
from iobridge.agents.capabilities import CapabilityError, validate_capabilities
from iobridge.agents.mcp import build_mcp_toolsets
from iobridge.agents.model import ModelAgent
from iobridge.agents.providers import (
    ENV_NAME,
    AgentConfigError,
    build_model,
    check_base_url,
    values_from_env,
)
from iobridge.agents.pydantic_agent import PydanticAIAgent
from iobridge.agents.tools import ServerTool, tool
from iobridge.agents.upstream import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_TIMEOUT,
    AgUiUpstreamAgent,
)
from iobridge.errors import InputError
from iobridge.protocol.options import (
    TOOL_RESULT_MODES,
    MultitaskStrategy,
    parse_model_settings,
    parse_multitask_strategy,
    parse_tool_result_mode,
)
from iobridge.typos import did_you_mean

logger = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Keys that would put a secret in the file.
_SECRET_KEYS = frozenset({"api_key", "apiKey", "key", "token", "secret", "password"})
_KEYS = frozenset({
    "id", "aliases", "name", "description", "instructions", "model", "base_url", "api_key_env",
    "tools", "model_settings", "tool_result_mode", "output_retries", "timeout", "pydantic_ai",
    "mcp_servers", "capabilities", "multitask_strategy", "subagents",
})
_UPSTREAM_KEYS = frozenset({
    "id", "aliases", "name", "description", "agui_url", "headers", "headers_env", "timeout",
    "max_event_bytes", "max_rounds", "tool_result_mode", "capabilities", "multitask_strategy",
})
#: Header names whose values are secrets: they come from ``headers_env``, never the file.
_SECRET_HEADER = re.compile(r"auth|token|key|secret|cookie|session|password", re.IGNORECASE)
#: Keys that describe a model built here; a wrapped pydantic-ai agent has its own.
_MODEL_ONLY = ("model", "base_url", "api_key_env", "instructions", "timeout")

#: What a tool entry may be: ``"package.module:function"``, a ``ServerTool``, or a function.
ToolSpec = str | ServerTool | Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class AgentDefinition:
    """What it takes to build a model-backed agent.

    ``model_settings`` uses the ``forwardedProps.modelSettings`` names (camelCase or
    snake_case); a run's ``modelSettings`` override them key by key.
    """

    id: str
    #: ``provider:model``; empty when ``pydantic_ai`` names the agent instead.
    model: str = ""
    #: ``"package.module:attribute"`` of a pydantic-ai ``Agent`` to serve as it is.
    pydantic_ai: str | None = None
    #: MCP servers whose tools the agent gets (see ``iobridge.agents.mcp``).
    mcp_servers: Sequence[Mapping[str, Any]] = ()
    #: Other ids the agent answers to (io.Assist's Angular template lists threads by its
    #: Mastra registry key, ``ioAgent``, while matching ``io-agent`` against ``id``).
    aliases: Sequence[str] = ()
    name: str | None = None
    description: str = ""
    instructions: str = ""
    #: Any OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp, LM Studio) or a proxy.
    base_url: str | None = None
    #: Name of the environment variable holding the API key.
    api_key_env: str | None = None
    tools: Sequence[ToolSpec] = ()
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    #: ``"in-run"`` or ``"next-run"`` (``None``: the server's default).
    tool_result_mode: str | None = None
    #: What a run does when its thread is busy (``None``: the request's, then the server's).
    multitask_strategy: str | None = None
    #: How often an answer violating ``structuredOutput`` goes back to the model.
    output_retries: int = 2
    #: Seconds one model request may take.
    timeout: float | None = None
    #: Overrides of the AG-UI ``AgentCapabilities`` the agent declares (``GET /agents``).
    capabilities: Mapping[str, Any] | None = None
    #: Ids of catalog agents it may run as subagents, one tool each (``agents.subagents``).
    subagents: Sequence[str] = ()


def _check_str(data: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise AgentConfigError(f"'{key}' is required")
        return None
    if not isinstance(value, str):
        raise AgentConfigError(f"'{key}' must be a string")
    return value


def definition_from_dict(data: Mapping[str, Any]) -> AgentDefinition:
    """Read one ``[[agents]]`` table.

    Raises:
        AgentConfigError: a secret in the file, an unknown key, or a value of the wrong type.
    """
    secrets = sorted(k for k in data if k in _SECRET_KEYS)
    if secrets:
        raise AgentConfigError(
            f"'{secrets[0]}' must not be in the configuration file: put the key in an "
            "environment variable and name that variable with api_key_env"
        )
    unknown = sorted(k for k in data if k not in _KEYS)
    if unknown:
        named = ", ".join(k + did_you_mean(k, _KEYS) for k in unknown)
        raise AgentConfigError(f"unknown key(s) {named}; known keys: {', '.join(sorted(_KEYS))}")
    tools = data.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise AgentConfigError("'tools' must be a list of 'package.module:function' strings")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise AgentConfigError("'aliases' must be a list of strings")
    settings = data.get("model_settings", {})
    if not isinstance(settings, Mapping):
        raise AgentConfigError("'model_settings' must be a table")
    output_retries = data.get("output_retries", 2)
    if isinstance(output_retries, bool) or not isinstance(output_retries, int):
        raise AgentConfigError("'output_retries' must be an integer")
    timeout = data.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise AgentConfigError("'timeout' must be a number of seconds")
    capabilities = data.get("capabilities")
    if capabilities is not None and not isinstance(capabilities, Mapping):
        raise AgentConfigError("'capabilities' must be a table (AG-UI AgentCapabilities)")
    subagents = data.get("subagents", [])
    if not isinstance(subagents, list) or not all(isinstance(a, str) for a in subagents):
        raise AgentConfigError("'subagents' must be a list of agent ids")
    mcp_servers = data.get("mcp_servers", [])
    if not isinstance(mcp_servers, list):
        raise AgentConfigError("'mcp_servers' must be a list of tables ([[agents.mcp_servers]])")
    wrapped = _check_str(data, "pydantic_ai")
    if wrapped is not None:
        own = [k for k in _MODEL_ONLY if k in data]
        if own:
            raise AgentConfigError(
                f"'{own[0]}' cannot be used with 'pydantic_ai': set it on the pydantic-ai Agent"
            )
    return AgentDefinition(
        id=_check_str(data, "id", required=True) or "",
        model=_check_str(data, "model", required=wrapped is None) or "",
        pydantic_ai=wrapped,
        mcp_servers=tuple(mcp_servers),
        aliases=tuple(aliases),
        name=_check_str(data, "name"),
        description=_check_str(data, "description") or "",
        instructions=_check_str(data, "instructions") or "",
        base_url=_check_str(data, "base_url"),
        api_key_env=_check_str(data, "api_key_env"),
        tools=tuple(tools),
        model_settings=dict(settings),
        tool_result_mode=_check_str(data, "tool_result_mode"),
        multitask_strategy=_check_str(data, "multitask_strategy"),
        output_retries=output_retries,
        timeout=timeout,
        capabilities=capabilities,
        subagents=tuple(subagents),
    )


def resolve_tool(spec: ToolSpec) -> ServerTool:
    """A ``ServerTool`` from an import path, a ``ServerTool`` or a typed function.

    Raises:
        AgentConfigError: a malformed path, a module that fails to import, a missing
            attribute, or something that is not callable.
    """
    if isinstance(spec, ServerTool):
        return spec
    if callable(spec):
        return tool(spec)
    target = import_target(spec, "tool", "function")
    if isinstance(target, ServerTool):
        return target
    if not callable(target):
        raise AgentConfigError(f"tool {spec!r} is not callable")
    try:
        return tool(target)
    except Exception as exc:  # unresolvable type hints and the like
        raise AgentConfigError(f"tool {spec!r}: cannot derive its schema ({exc})") from None


def import_target(spec: str, what: str, kind: str) -> Any:
    """The object ``"package.module:attribute"`` names.

    Raises:
        AgentConfigError: a malformed path, a module that fails to import, or a missing
            attribute (one line naming which).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentConfigError(f"{what} {spec!r} must look like 'package.module:{kind}'")
    folder = search_working_directory()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _is_part_of(exc.name, module_name):
            raise _import_failed(spec, what, module_name, exc) from None
        top = module_name.split(".")[0]
        raise AgentConfigError(
            f"{what} {spec!r}: no module named {exc.name!r} in the working directory "
            f"{folder} or the installed packages (start iobridge from the folder that holds "
            f"{top}/ or {top}.py, or install it)"
        ) from None
    except Exception as exc:  # any import-time failure of user code is a config error
        raise _import_failed(spec, what, module_name, exc) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise AgentConfigError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


def search_working_directory() -> str:
    """Put the working directory first on ``sys.path`` (once), as uvicorn's ``--app-dir``
    does: ``iobridge serve`` run from a project folder imports that project's modules, even
    when ``sys.path[0]`` is the folder of the ``iobridge`` script. Returns the folder."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)
        importlib.invalidate_caches()
    return folder


def _is_part_of(missing: str, module_name: str) -> bool:
    """Whether the module not found is ``module_name`` or one of its packages (not a module
    that the user's code itself imports)."""
    return module_name == missing or module_name.startswith(missing + ".")


def _import_failed(spec: str, what: str, module_name: str, exc: Exception) -> AgentConfigError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return AgentConfigError(
        f"{what} {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {first})"
    )


def build_agent(
    definition: AgentDefinition, *, environ: Mapping[str, str] | None = None
) -> Agent:
    """Build the agent a definition describes (its subagents are linked by the catalog).

    Raises:
        AgentConfigError: anything that prevents the agent from working.
    """
    for subagent in definition.subagents:
        if not _ID.match(subagent):
            raise AgentConfigError(f"subagent {subagent!r} is not an agent id")
    if len(set(definition.subagents)) != len(definition.subagents):
        raise AgentConfigError("'subagents' names an agent twice")
    agent = _build_agent(definition, environ=environ)
    agent.subagent_ids = tuple(definition.subagents)
    return agent


def _build_agent(
    definition: AgentDefinition, *, environ: Mapping[str, str] | None = None
) -> Agent:
    """Build the agent a definition describes.

    Args:
        definition: The definition.
        environ: Where API keys are read (default ``os.environ``).

    Raises:
        AgentConfigError: anything that prevents the agent from working.
    """
    d = definition
    if not _ID.match(d.id):
        raise AgentConfigError("'id' must be 1-64 letters, digits, '.', '_' or '-'")
    for alias in d.aliases:
        if not _ID.match(alias) or alias == d.id:
            raise AgentConfigError(
                f"alias {alias!r} must be 1-64 letters, digits, '.', '_' or '-', not the id"
            )
    env = os.environ if environ is None else environ
    if d.api_key_env is not None and not ENV_NAME.match(d.api_key_env):
        # Never echo the value: it may well be a pasted key.
        raise AgentConfigError(
            "api_key_env must be the name of an environment variable (like OPENAI_API_KEY), "
            "not the key itself"
        )
    try:
        mode = parse_tool_result_mode(d.tool_result_mode, where="tool_result_mode")
    except InputError:
        raise AgentConfigError(
            f"tool_result_mode must be one of {', '.join(TOOL_RESULT_MODES)}"
        ) from None
    if not 0 <= d.output_retries <= 10:
        raise AgentConfigError("output_retries must be between 0 and 10")
    if d.timeout is not None and not d.timeout > 0:
        raise AgentConfigError("timeout must be a positive number of seconds")
    try:
        settings = parse_model_settings(d.model_settings, where="model_settings")
    except InputError as exc:
        problems = "; ".join(f"{p['field']} {p['message']}" for p in exc.details or [])
        raise AgentConfigError(f"invalid model_settings: {problems}") from None
    if d.timeout is not None:
        settings["timeout"] = d.timeout
    overrides = _capability_overrides(d.capabilities)
    tools = [resolve_tool(t) for t in d.tools]
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AgentConfigError(f"duplicate tool name(s): {', '.join(duplicates)}")
    toolsets = build_mcp_toolsets(d.mcp_servers, environ=env)
    if d.pydantic_ai is not None:
        wrapped = import_target(d.pydantic_ai, "pydantic_ai", "agent")
        if not isinstance(wrapped, PydanticAgent):
            raise AgentConfigError(
                f"pydantic_ai {d.pydantic_ai!r} is a {type(wrapped).__name__}, "
                "not a pydantic_ai.Agent"
            )
        return PydanticAIAgent(
            wrapped,
            id=d.id,
            aliases=d.aliases,
            name=d.name,
            description=d.description or None,
            tools=tools,
            toolsets=toolsets,
            model_settings=cast(ModelSettings, settings),
            output_retries=d.output_retries,
            tool_result_mode=mode,
            capabilities=overrides,
        )
    model = build_model(d.model, base_url=d.base_url, api_key_env=d.api_key_env, environ=env)
    return ModelAgent(
        id=d.id,
        aliases=d.aliases,
        model=model,
        name=d.name,
        description=d.description,
        instructions=d.instructions,
        tools=tools,
        model_settings=cast(ModelSettings, settings),
        model_id=d.model,
        output_retries=d.output_retries,
        tool_result_mode=mode,
        toolsets=toolsets,
        capabilities=overrides,
    )


def _capability_overrides(data: Any) -> dict[str, Any] | None:
    """A ``capabilities`` table checked as AG-UI ``AgentCapabilities``.

    Raises:
        AgentConfigError: it does not validate (the message names the offending keys).
    """
    if data is None:
        return None
    try:
        return validate_capabilities(data)
    except CapabilityError as exc:
        raise AgentConfigError(str(exc)) from None


def load_agents(
    definitions: Sequence[Mapping[str, Any] | AgentDefinition],
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[Agent], dict[str, str]]:
    """Build every definition; collect failures instead of raising.

    Args:
        definitions: ``[[agents]]`` tables (as parsed from TOML) or ``AgentDefinition``s.
        environ: Where API keys are read (default ``os.environ``).

    Returns:
        The agents that could be built, and ``{agent id: reason}`` for those that could not
        (an entry without a usable id is keyed ``#<index>``). Reasons are safe to show.
    """
    agents: list[Agent] = []
    errors: dict[str, str] = {}
    for index, entry in enumerate(definitions):
        key = f"#{index}"
        try:
            if isinstance(entry, AgentDefinition):
                definition = entry
            elif isinstance(entry, Mapping) and "agui_url" in entry:
                raw_id = entry.get("id")
                key = raw_id if isinstance(raw_id, str) and raw_id else key
                if key in errors or any(a.id == key for a in agents):
                    raise AgentConfigError(f"duplicate agent id {key!r}")
                upstream = build_upstream_agent(entry, environ=environ)
                upstream.multitask_strategy = _multitask_strategy(
                    _check_str(entry, "multitask_strategy")
                )
                agents.append(upstream)
                continue
            elif isinstance(entry, Mapping):
                raw_id = entry.get("id")
                key = raw_id if isinstance(raw_id, str) and raw_id else key
                definition = definition_from_dict(entry)
            else:
                raise AgentConfigError("an agent definition must be a table")
            key = definition.id or key
            if key in errors or any(a.id == key for a in agents):
                raise AgentConfigError(f"duplicate agent id {key!r}")
            agent = build_agent(definition, environ=environ)
            agent.multitask_strategy = _multitask_strategy(definition.multitask_strategy)
            agents.append(agent)
        except AgentConfigError as exc:
            errors[key] = exc.message
            logger.error("agent %s is unavailable: %s", key, exc.message)
    return agents, errors


def _multitask_strategy(value: str | None) -> MultitaskStrategy | None:
    try:
        return parse_multitask_strategy(value, where="multitask_strategy")
    except InputError as exc:
        raise AgentConfigError(exc.message) from None


def _number(data: Mapping[str, Any], key: str, default: float, *, integer: bool = False) -> Any:
    value = data.get(key, default)
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        raise AgentConfigError(f"'{key}' must be a positive {'integer' if integer else 'number'}")
    return value


def _string_table(data: Mapping[str, Any], key: str) -> dict[str, str]:
    table = data.get(key, {})
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise AgentConfigError(f"'{key}' must be a table of strings")
    return dict(table)


def build_upstream_agent(
    data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> AgUiUpstreamAgent:
    """An ``[[agents]]`` table with ``agui_url``: another AG-UI server as an agent.

    ``headers`` holds plain headers; a header that carries a secret (``Authorization``, an API
    key, a cookie) is named in ``headers_env`` with the environment variable holding its value.

    Raises:
        AgentConfigError: an unknown key, a bad value, a secret header in the file, or a
            ``headers_env`` variable that is not set.
    """
    unknown = sorted(k for k in data if k not in _UPSTREAM_KEYS)
    if unknown:
        named = ", ".join(k + did_you_mean(k, _UPSTREAM_KEYS) for k in unknown)
        raise AgentConfigError(
            f"unknown key(s) {named} for an agui_url agent; known keys: "
            f"{', '.join(sorted(_UPSTREAM_KEYS))}"
        )
    agent_id = _check_str(data, "id", required=True) or ""
    url = _check_str(data, "agui_url", required=True) or ""
    try:
        check_base_url(url)
    except AgentConfigError:
        raise AgentConfigError(
            "agui_url must be an http:// or https:// URL without credentials; put them in "
            "headers_env"
        ) from None
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise AgentConfigError("'aliases' must be a list of strings")
    if not _ID.match(agent_id):
        raise AgentConfigError("'id' must be 1-64 letters, digits, '.', '_' or '-'")
    for alias in aliases:
        if not _ID.match(alias) or alias == agent_id:
            raise AgentConfigError(
                f"alias {alias!r} must be 1-64 letters, digits, '.', '_' or '-', not the id"
            )
    headers = _string_table(data, "headers")
    secret = sorted(name for name in headers if _SECRET_HEADER.search(name))
    if secret:
        raise AgentConfigError(
            f"header {secret[0]!r} must not be in the configuration file: put its value in an "
            "environment variable and name that variable in headers_env"
        )
    environ = os.environ if environ is None else environ
    headers.update(values_from_env(_string_table(data, "headers_env"), environ, "headers_env"))
    try:
        mode = parse_tool_result_mode(
            _check_str(data, "tool_result_mode"), where="tool_result_mode"
        )
    except InputError:
        raise AgentConfigError(
            f"tool_result_mode must be one of {', '.join(TOOL_RESULT_MODES)}"
        ) from None
    rounds = data.get("max_rounds", DEFAULT_MAX_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 <= rounds <= 100:
        raise AgentConfigError("'max_rounds' must be an integer between 0 and 100")
    overrides = _capability_overrides(data.get("capabilities"))
    return AgUiUpstreamAgent(
        url,
        id=agent_id,
        aliases=aliases,
        name=_check_str(data, "name"),
        description=_check_str(data, "description") or "",
        headers=headers,
        timeout=_number(data, "timeout", DEFAULT_TIMEOUT),
        max_event_bytes=_number(
            data, "max_event_bytes", DEFAULT_MAX_EVENT_BYTES, integer=True
        ),
        max_rounds=rounds,
        tool_result_mode=mode,
        capabilities=overrides,
    )
