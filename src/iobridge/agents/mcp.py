"""``mcp_servers`` of an ``[[agents]]`` table: MCP servers as pydantic-ai toolsets.

Each entry is a stdio server (``command``, ``args``, ``env``, ``cwd``) or a streamable-HTTP
server (``url``, ``headers``), connected through pydantic-ai's MCP client (``MCPToolset``,
the ``iobridge[mcp]`` extra). Their tools are the agent's own tools, so calls are announced
and stored like server tools. A run connects to its servers (a stdio server is started) and
disconnects when it ends.

Secrets stay out of the file, by the one convention of agent definitions (``docs/agents.md``,
"Secrets from the environment"): ``headers_env`` (HTTP) and ``env_from_env`` (stdio) name the
environment variables holding header and child-environment values, read when the agent is
built. A ``"${NAME}"`` value in ``env`` or ``headers`` (the earlier form) is still read, with
a deprecation warning; it goes in the next release.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.toolsets import AbstractToolset

from iobridge.agents.providers import AgentConfigError, check_base_url, values_from_env

logger = logging.getLogger("iobridge.agents")

_KEYS = frozenset({"name", "command", "args", "env", "env_from_env", "cwd", "url", "headers",
                   "headers_env", "timeout", "tool_prefix"})
_STDIO_ONLY = ("command", "args", "env", "env_from_env", "cwd")
_HTTP_ONLY = ("headers", "headers_env")
_VARIABLE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Seconds to connect and to wait for one answer, unless the entry says otherwise.
DEFAULT_TIMEOUT = 30.0


def _strings(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    table = entry.get(key, {})
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise AgentConfigError(f"{where}: '{key}' must be a table of strings")
    return dict(table)


def _values(
    entry: Mapping[str, Any], key: str, environ: Mapping[str, str], where: str
) -> dict[str, str]:
    """``entry[key]`` (plain values) and ``entry[key + "_env"]``-style values read from the
    environment (``env`` → ``env_from_env``, ``headers`` → ``headers_env``; never echoed)."""
    from_env = "env_from_env" if key == "env" else f"{key}_env"
    plain, named = _strings(entry, key, where), _strings(entry, from_env, where)
    twice = sorted(set(plain) & set(named))
    if twice:
        raise AgentConfigError(f"{where}: {twice[0]!r} is in both '{key}' and '{from_env}'")
    out = {}
    for name, value in plain.items():
        match = _VARIABLE.match(value)
        if match is not None:  # the earlier convention, kept for one release
            variable = match.group(1)
            logger.warning(
                "%s: %s value \"${%s}\" is deprecated; name the variable in %s instead "
                "(%s = { %s = \"%s\" })", where, key, variable, from_env, from_env, name,
                variable,
            )
            if not environ.get(variable):
                raise AgentConfigError(f"{where}: environment variable {variable} is not set")
            value = environ[variable]
        out[name] = value
    try:
        return {**out, **values_from_env(named, environ, from_env)}
    except AgentConfigError as exc:
        raise AgentConfigError(f"{where}: {exc.message}") from None


def build_mcp_toolsets(
    entries: Sequence[Any], *, environ: Mapping[str, str]
) -> list[AbstractToolset[Any]]:
    """One toolset per ``mcp_servers`` entry.

    Raises:
        AgentConfigError: a malformed entry, an unset variable, or the extra not installed.
    """
    checked = [_check(entry, index, environ) for index, entry in enumerate(entries)]
    if not checked:
        return []
    try:
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
        from pydantic_ai.mcp import MCPToolset
    except ImportError:
        raise AgentConfigError(
            "mcp_servers needs the MCP client: pip install 'iobridge[mcp]'"
        ) from None
    toolsets: list[AbstractToolset[Any]] = []
    for index, entry in enumerate(checked):
        transport: Any
        if "url" in entry:
            transport = StreamableHttpTransport(entry["url"], headers=entry["headers"])
        else:
            transport = StdioTransport(
                entry["command"], entry["args"], env=entry["env"] or None, cwd=entry["cwd"]
            )
        timeout = entry["timeout"]
        toolset: AbstractToolset[Any] = MCPToolset(
            transport,
            id=entry["name"] or f"mcp-{index}",
            init_timeout=timeout,
            read_timeout=timeout,
        )
        if entry["tool_prefix"]:
            toolset = toolset.prefixed(entry["tool_prefix"])
        toolsets.append(toolset)
    return toolsets


def _check(entry: Any, index: int, environ: Mapping[str, str]) -> dict[str, Any]:
    """One entry, validated and with its variables read."""
    where = f"mcp_servers[{index}]"
    if not isinstance(entry, Mapping):
        raise AgentConfigError(f"{where} must be a table")
    unknown = sorted(k for k in entry if k not in _KEYS)
    if unknown:
        raise AgentConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(_KEYS))}"
        )
    has_url, has_command = "url" in entry, "command" in entry
    if has_url == has_command:
        raise AgentConfigError(f"{where} needs either 'command' (stdio) or 'url' (HTTP)")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise AgentConfigError(f"{where}: 'timeout' must be a positive number of seconds")
    for key in ("name", "tool_prefix", "cwd"):
        if key in entry and not isinstance(entry[key], str):
            raise AgentConfigError(f"{where}: '{key}' must be a string")
    name = entry.get("name")
    if name is not None and not _NAME.match(name):
        raise AgentConfigError(f"{where}: 'name' must be 1-64 letters, digits, '.', '_' or '-'")
    checked: dict[str, Any] = {
        "name": name, "tool_prefix": entry.get("tool_prefix"), "timeout": float(timeout),
    }
    if has_url:
        url = entry["url"]
        if not isinstance(url, str):
            raise AgentConfigError(f"{where}: 'url' must be a string")
        stdio_keys = [k for k in _STDIO_ONLY if k in entry]
        if stdio_keys:
            raise AgentConfigError(f"{where}: '{stdio_keys[0]}' is for stdio servers, not 'url'")
        try:
            check_base_url(url)
        except AgentConfigError as exc:
            message = exc.message.replace("base_url", "url").replace("api_key_env", "headers_env")
            raise AgentConfigError(f"{where}: {message}") from None
        checked.update(url=url, headers=_values(entry, "headers", environ, where))
        return checked
    command, args = entry["command"], entry.get("args", [])
    if not isinstance(command, str) or not command:
        raise AgentConfigError(f"{where}: 'command' must be a non-empty string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise AgentConfigError(f"{where}: 'args' must be a list of strings")
    http_keys = [k for k in _HTTP_ONLY if k in entry]
    if http_keys:
        raise AgentConfigError(f"{where}: '{http_keys[0]}' is for HTTP servers, not 'command'")
    checked.update(
        command=command,
        args=list(args),
        env=_values(entry, "env", environ, where),
        cwd=entry.get("cwd"),
    )
    return checked
