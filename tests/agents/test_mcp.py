"""MCP servers on an agent: a real MCP server (the ``mcp`` SDK) over stdio and streamable HTTP."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import FakeOpenAI, calls, text
from tests.helpers import free_port, parse_sse, run_body

from iobridge.agents.base import Agent
from iobridge.agents.definitions import load_agents
from iobridge.agents.mcp import build_mcp_toolsets
from iobridge.agents.providers import AgentConfigError

SERVER = str(Path(__file__).with_name("mcp_server.py"))
TOKEN = "test-token-123"


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[str]:
    """The test MCP server over streamable HTTP on a free loopback port; yields its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port), TOKEN])
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the MCP test server did not start") from None
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(timeout=10)


def model_agent(fake: FakeOpenAI, server: dict[str, Any], environ: dict[str, str]) -> Agent:
    (agent,), errors = load_agents(
        [{"id": "mcp", "model": "openai:gpt-4o", "base_url": fake.base_url,
          "model_settings": {"max_retries": 0}, "mcp_servers": [server]}],
        environ=environ,
    )
    assert errors == {}
    return agent


async def run_and_replay(
    serve: Any, fake: FakeOpenAI, agent: Agent, tool: str = "forecast"
) -> list[dict[str, Any]]:
    """One run that calls ``tool``, then a second run on the same thread; the first's events.

    Checks that the call's result is stored with the thread and replayed to the next run's
    model request.
    """
    fake.push(calls(("c1", tool, '{"city": "Oslo"}')), text("Sunny."), text("Again."))
    server = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        first = await client.post("/io-bridge/run", json=run_body("weather?", agentId="mcp"))
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
        second = await client.post(
            "/io-bridge/run", json=run_body("and now?", run_id="r2", agentId="mcp")
        )
    events = parse_sse(first.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert parse_sse(second.text)[-1]["type"] == "RUN_FINISHED"
    tool_messages = [m for m in stored["messages"] if m["role"] == "tool"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    call_id = result["toolCallId"]  # minted by the bridge (the model said c1)
    assert [(m["toolCallId"], m["content"]) for m in tool_messages] == [
        (call_id, result["content"])
    ]
    # The next run's model request replays the MCP call and its result from the thread.
    history = fake.requests[-1]["messages"]
    assert {"role": "tool", "tool_call_id": call_id, "content": result["content"]} in history
    called = [tc["function"]["name"] for m in history if m["role"] == "assistant"
              for tc in m.get("tool_calls") or []]
    assert called == [tool]
    return events


@pytest.mark.parametrize("form", ["env_from_env", "deprecated ${NAME}"])
async def test_mcp_stdio_tool_is_called_streamed_stored_and_replayed(
    serve: Any, fake_openai: FakeOpenAI, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    secrets: dict[str, Any] = (
        {"env_from_env": {"FORECAST_PREFIX": "TEST_FORECAST"}} if form == "env_from_env"
        else {"env": {"FORECAST_PREFIX": "${TEST_FORECAST}"}}
    )
    server = {"command": sys.executable, "args": [SERVER, "stdio"], **secrets}
    with caplog.at_level(logging.WARNING, logger="iobridge.agents"):
        agent = model_agent(fake_openai, server, {"TEST_FORECAST": "from-env"})
    warned = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    if form == "env_from_env":
        assert warned == []
    else:  # still read, for one release, with a warning that says what to write instead
        assert warned == ['mcp_servers[0]: env value "${TEST_FORECAST}" is deprecated; name the '
                          'variable in env_from_env instead (env_from_env = { FORECAST_PREFIX = '
                          '"TEST_FORECAST" })']
    events = await run_and_replay(serve, fake_openai, agent)
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "forecast" and start["toolCallId"] != "c1"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "from-env: sunny in Oslo"
    # The model was offered the MCP server's tool with its schema.
    offered = fake_openai.requests[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["forecast"]


async def test_mcp_http_tool_is_called_with_headers_streamed_stored_and_replayed(
    serve: Any, fake_openai: FakeOpenAI, mcp_http: str
) -> None:
    server = {"url": mcp_http, "headers_env": {"Authorization": "MCP_AUTH"}, "name": "weather",
              "tool_prefix": "wx"}
    agent = model_agent(fake_openai, server, {"MCP_AUTH": f"Bearer {TOKEN}"})
    events = await run_and_replay(serve, fake_openai, agent, tool="wx_forecast")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "plain: sunny in Oslo"


async def test_mcp_http_server_refusing_the_headers_fails_the_run_without_leaking_them(
    serve: Any, fake_openai: FakeOpenAI, mcp_http: str
) -> None:
    agent = model_agent(fake_openai, {"url": mcp_http, "headers": {"Authorization": "Bearer no"}},
                        {})
    srv = serve(agents=[agent])
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        response = await client.post("/io-bridge/run", json=run_body("weather?", agentId="mcp"))
        stored = (await client.get("/io-bridge/threads/t1/messages?format=agui")).json()
    last = parse_sse(response.text)[-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "AGENT_ERROR"
    assert "Bearer" not in response.text
    assert fake_openai.requests == []  # no model request was made without the tools
    assert [m["role"] for m in stored["messages"]] == ["user"]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({}, "mcp_servers[0] needs either 'command' (stdio) or 'url' (HTTP)"),
        ({"command": "x", "url": "http://h/mcp"},
         "mcp_servers[0] needs either 'command' (stdio) or 'url' (HTTP)"),
        ({"command": "x", "port": 1},
         "mcp_servers[0]: unknown key(s) port; known keys: args, command, cwd, env, "
         "env_from_env, headers, headers_env, name, timeout, tool_prefix, url"),
        ({"command": "x", "args": "a b"}, "mcp_servers[0]: 'args' must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "mcp_servers[0]: 'env' must be a table of strings"),
        ({"command": "x", "env": {"A": "${NOT_SET_ANYWHERE}"}},
         "mcp_servers[0]: environment variable NOT_SET_ANYWHERE is not set"),
        ({"command": "x", "env_from_env": {"A": "NOT_SET_ANYWHERE"}},
         "mcp_servers[0]: environment variable NOT_SET_ANYWHERE is not set (env_from_env A)"),
        ({"url": "http://h/mcp", "headers_env": {"Authorization": "Bearer abc"}},
         "mcp_servers[0]: headers_env 'Authorization' must name an environment variable, not "
         "hold the value"),
        ({"url": "http://h/mcp", "headers": {"X": "1"}, "headers_env": {"X": "HOME"}},
         "mcp_servers[0]: 'X' is in both 'headers' and 'headers_env'"),
        ({"command": "x", "headers_env": {}},
         "mcp_servers[0]: 'headers_env' is for HTTP servers, not 'command'"),
        ({"url": "http://h/mcp", "env_from_env": {}},
         "mcp_servers[0]: 'env_from_env' is for stdio servers, not 'url'"),
        ({"command": "x", "headers": {}},
         "mcp_servers[0]: 'headers' is for HTTP servers, not 'command'"),
        ({"url": "http://h/mcp", "env": {}},
         "mcp_servers[0]: 'env' is for stdio servers, not 'url'"),
        ({"url": "ftp://h/mcp"}, "mcp_servers[0]: url must be an http:// or https:// URL"),
        ({"url": "http://u:p@h/mcp"},
         "mcp_servers[0]: url must not contain credentials; name the key with headers_env "
         "instead"),
        ({"command": "x", "timeout": 0},
         "mcp_servers[0]: 'timeout' must be a positive number of seconds"),
        ({"command": "x", "name": "a b"},
         "mcp_servers[0]: 'name' must be 1-64 letters, digits, '.', '_' or '-'"),
        ("x", "mcp_servers[0] must be a table"),
    ],
)
def test_bad_mcp_server_entries_are_refused_with_one_line(entry: Any, reason: str) -> None:
    with pytest.raises(AgentConfigError) as info:
        build_mcp_toolsets([entry], environ={})
    assert info.value.message == reason
    agents, errors = load_agents(
        [{"id": "a", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1",
          "mcp_servers": [entry]}],
        environ={},
    )
    assert agents == [] and errors == {"a": reason}


def test_mcp_servers_must_be_a_list_of_tables() -> None:
    agents, errors = load_agents(
        [{"id": "a", "model": "openai:gpt-4o", "mcp_servers": {"command": "x"}}], environ={}
    )
    assert agents == []
    assert errors == {"a": "'mcp_servers' must be a list of tables ([[agents.mcp_servers]])"}


def test_without_the_mcp_extra_the_agent_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastmcp.client.transports", None)
    agents, errors = load_agents(
        [{"id": "a", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1",
          "mcp_servers": [{"command": "x"}]}],
        environ={},
    )
    assert agents == []
    assert errors == {"a": "mcp_servers needs the MCP client: pip install 'iobridge[mcp]'"}
