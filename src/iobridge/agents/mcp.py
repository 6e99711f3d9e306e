"""``mcp_servers`` of an ``[[agents]]`` table: MCP servers as pydantic-ai toolsets.

Each entry is a stdio server (``command``, ``args``, ``env``, ``cwd``) or a streamable-HTTP
server (``url``, ``headers``), connected through pydantic-ai's MCP client (``MCPToolset``,
the ``iobridge[mcp]`` extra). Their tools are the agent's own tools, so calls are announced
and stored like server tools. A run connects to its servers (a stdio server is started) and
disconnects when it ends.

Secrets stay out of the file: an ``env`` or ``headers`` value ``"${NAME}"`` is read from the
environment variable ``NAME`` when the agent is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.toolsets import AbstractToolset

from iobridge.agents.providers import AgentConfigError, check_base_url

_KEYS = frozenset({"name", "command", "args", "env", "cwd", "url", "headers", "timeout",
                   "tool_prefix"})
_STDIO_ONLY = ("command", "args", "env", "cwd")
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


def _expand(values: Mapping[str, str], environ: Mapping[str, str], where: str) -> dict[str, str]:
    """``"${NAME}"`` values read from the environment (never echoed)."""
    out = {}
    for key, value in values.items():
        match = _VARIABLE.match(value)
        if match is not None:
            name = match.group(1)
            if not environ.get(name):
                raise AgentConfigError(f"{where}: environment variable {name} is not set")
            value = environ[name]
        out[key] = value
    return out


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
            raise AgentConfigError(f"{where}: {exc.message.replace('base_url', 'url')}") from None
        checked.update(url=url, headers=_expand(_strings(entry, "headers", where), environ, where))
        return checked
    command, args = entry["command"], entry.get("args", [])
    if not isinstance(command, str) or not command:
        raise AgentConfigError(f"{where}: 'command' must be a non-empty string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise AgentConfigError(f"{where}: 'args' must be a list of strings")
    if "headers" in entry:
        raise AgentConfigError(f"{where}: 'headers' is for HTTP servers, not 'command'")
    checked.update(
        command=command,
        args=list(args),
        env=_expand(_strings(entry, "env", where), environ, where),
        cwd=entry.get("cwd"),
    )
    return checked
