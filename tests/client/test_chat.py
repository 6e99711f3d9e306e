"""``iobridge chat`` in a real pseudo-terminal (pexpect) against a live server on loopback."""

from __future__ import annotations

import hashlib
import io
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest

from iobridge.auth import ApiKeyEntry, AuthSettings

CHAT = str(Path(sys.executable).with_name("iobridge"))


def _spawn(*args: str) -> pexpect.spawn:
    env = {**os.environ, "TERM": "dumb", "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("IOBRIDGE_API_KEY", None)
    child = pexpect.spawn(CHAT, ["chat", *args], env=env, encoding="utf-8", timeout=20,
                          dimensions=(50, 200))
    child.logfile_read = io.StringIO()  # the whole screen, for assertions over all of it
    return child


def _screen(child: pexpect.spawn) -> str:
    return str(child.logfile_read.getvalue())


def _messages(url: str, thread_id: str, **headers: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/io-bridge/threads/{thread_id}/messages",
                       params={"format": "agui"}, headers=headers)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


def test_a_frontend_tool_is_answered_at_the_prompt_and_the_run_goes_on(serve: Any) -> None:
    server = serve()
    child = _spawn(server.url, "--thread", "t-one")
    child.expect_exact("thread t-one")
    child.expect_exact("you> ")
    child.sendline('get_weather {"city": "Oslo"}')
    child.expect_exact('tool get_weather {"city":"Oslo"}')
    child.expect_exact("result> ")
    child.sendline('{"sky": "clear"}')
    child.expect_exact('The tool get_weather returned {"sky":"clear"}.')
    child.expect_exact("you> ")
    child.sendline("What is 2 + 3 * 4?")
    child.expect_exact("server tool calculate")
    child.expect_exact("2 + 3 * 4 = 14.")
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    tool = [m for m in _messages(server.url, "t-one") if m["role"] == "tool"]
    assert tool[0]["content"] == '{"sky":"clear"}'  # then calculate's result


def test_threads_are_listed_switched_and_kept_apart(serve: Any) -> None:
    server = serve()
    child = _spawn(server.url, "--thread", "t-first")
    child.expect_exact("you> ")
    child.sendline("hello first")
    child.expect_exact("You said: hello first.")
    child.expect_exact("you> ")
    child.sendline("/new")
    child.expect(r"thread ([0-9a-f-]{36}) \(new\)")
    second = child.match.group(1)
    child.expect_exact("you> ")
    child.sendline("hello second")
    child.expect_exact("You said: hello second.")
    child.expect_exact("you> ")
    child.sendline("/threads")
    child.expect_exact(f"{second} *")
    child.expect_exact("t-first")
    child.expect_exact("you> ")
    child.sendline("/thread t-first")
    child.expect_exact("thread t-first (2 recent messages)")
    child.expect_exact("you: hello first")
    child.expect_exact("you> ")
    child.sendline("back again")
    child.expect_exact("You said: back again.")
    child.expect_exact("you> ")
    child.sendline("/thread nope")
    child.expect_exact("error: 404 THREAD_NOT_FOUND")
    child.expect_exact("you> ")
    child.sendline("/agent")
    child.expect_exact("demo: Demo agent")
    child.expect_exact("you> ")
    child.sendline("/agent missing")
    child.expect_exact("error: 404 AGENT_NOT_FOUND")
    child.expect_exact("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    users = [m["content"] for m in _messages(server.url, "t-first") if m["role"] == "user"]
    assert users == ["hello first", "back again"]
    users = [m["content"] for m in _messages(server.url, second) if m["role"] == "user"]
    assert users == ["hello second"]


@pytest.mark.parametrize("flag", ["--api-key", "--header"])
def test_credentials_from_the_command_line_reach_the_server(serve: Any, flag: str) -> None:
    key = "chat-key"
    auth = AuthSettings(mode="api-key", api_keys=[
        ApiKeyEntry(sha256=hashlib.sha256(key.encode()).hexdigest(), principal="alice")])
    server = serve(auth=auth)
    value = key if flag == "--api-key" else f"X-API-Key: {key}"
    child = _spawn(server.url, flag, value, "--thread", "t-auth", "--agent", "demo")
    child.expect_exact("agent demo")
    child.expect_exact("you> ")
    child.sendline("hi")
    child.expect_exact("You said: hi.")
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    users = [m["content"] for m in _messages(server.url, "t-auth", **{"X-API-Key": key})
             if m["role"] == "user"]
    assert users == ["hi"]


def test_without_credentials_the_error_is_one_line_and_the_chat_goes_on(serve: Any) -> None:
    key = "chat-key"
    auth = AuthSettings(mode="api-key", api_keys=[
        ApiKeyEntry(sha256=hashlib.sha256(key.encode()).hexdigest(), principal="alice")])
    server = serve(auth=auth)
    child = _spawn(server.url)
    child.expect_exact("you> ")
    child.sendline("hi")
    child.expect_exact("error: 401 UNAUTHORIZED")
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    screen = _screen(child)
    assert screen.count("error: 401 UNAUTHORIZED") == 1
    assert "Traceback" not in screen


def test_an_empty_answer_fails_the_tool_and_the_agent_says_so(serve: Any) -> None:
    server = serve()
    child = _spawn(server.url, "--thread", "t-empty", "--tool", "pick_color:choose a color")
    child.expect_exact("you> ")
    child.sendline("pick_color")
    child.expect_exact("tool pick_color {}")
    child.expect_exact("result> ")
    child.sendline("")
    child.expect_exact("The tool pick_color reported an error: no result was given.")
    child.expect_exact("you> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    assert "Traceback" not in _screen(child)
