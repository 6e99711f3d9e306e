"""The front door: what a new user types from the README and docs works as written.

The docs' project-folder recipe runs verbatim from a fresh clone's folder (a folder holding
``.venv``, as ``make serve`` leaves it, here linked to the suite's virtualenv), with the model
faked at the HTTP boundary; the README's commands run as typed; a misspelt setting gets a
suggestion; the banner says where threads are kept and which agents can run; ``--help`` fits
80 columns; ``check`` and ``chat`` answer a bad or dead URL in one line; an unknown role is a
400 naming the roles; ``make serve`` installs only what serving needs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.agents.fake_openai import FakeOpenAI, calls, text
from tests.helpers import free_port, parse_sse, run_body
from typer.testing import CliRunner

from iobridge.cli import app

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
AGENTS_DOC = ROOT / "docs" / "agents.md"


def _recipe(name: str) -> tuple[dict[str, str], list[str]]:
    """The files (by the path on their first line) and shell lines of a marked docs recipe."""
    text = AGENTS_DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- recipe: {name} -->\n(.*?)<!-- /recipe -->", text, re.S)
    assert found, f"docs/agents.md lost its {name} recipe"
    files: dict[str, str] = {}
    commands: list[str] = []
    for kind, body in re.findall(r"```(\w+)\n(.*?)```", found.group(1), re.S):
        if kind == "sh":
            commands += [line for line in body.splitlines() if line.strip()]
        else:
            first = body.partition("\n")[0]
            files[first.removeprefix("# ").strip()] = body
    return files, commands


def _fresh_clone_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "iobridge"
    folder.mkdir()
    (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return folder


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


class Served:
    """``iobridge serve`` run by the shell from a folder, until the test ends."""

    def __init__(self, command: str, folder: Path, env: dict[str, str]) -> None:
        self.port = int(env["IOBRIDGE_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(  # a group of its own: make and the server it starts
            ["/bin/sh", "-c", f"exec {command}"], cwd=folder, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.lines: list[str] = []
        deadline = time.monotonic() + 30
        while True:
            line = self.process.stdout.readline().decode() if self.process.stdout else ""
            if not line:
                raise AssertionError("the server exited:\n" + "".join(self.lines))
            self.lines.append(line)
            if "HTTP on" in line:
                if self.port == 0:  # the banner names the port the kernel chose
                    found = re.search(r"HTTP on http://[^:]+:(\d+)/", line)
                    assert found, line
                    self.port = int(found.group(1))
                    self.url = f"http://127.0.0.1:{self.port}"
                break
            assert time.monotonic() < deadline, "".join(self.lines)
        while True:  # the port answers once uvicorn is up
            try:
                httpx.get(f"{self.url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "".join(self.lines)
                time.sleep(0.05)

    @property
    def banner(self) -> list[str]:
        return [line.strip() for line in self.lines if line.startswith("iobridge: ")]

    def stop(self) -> str:
        os.killpg(self.process.pid, signal.SIGTERM)
        rest = self.process.communicate(timeout=30)[0].decode()
        return "".join(self.lines) + rest


def _serve_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOBRIDGE_")}
    env.update(IOBRIDGE_PORT=str(free_port()), IOBRIDGE_LOG_LEVEL="warning", **extra)
    return env


def test_the_readme_quick_start_serves_and_answers_its_curl(tmp_path: Path) -> None:
    """``make serve`` as the README types it, from a clone's folder whose ``.venv`` is made
    (its serve stamp newer than the sources: the install itself is
    ``test_make_serve_installs_only_what_serving_needs``), then the README's curl as typed."""
    text = README.read_text(encoding="utf-8")
    quick = re.search(r"## Quick start\n.*?```sh\n(.*?)```", text, re.S)
    assert quick, "the README lost its quick start"
    (make_serve,) = [line.split("#")[0].strip() for line in quick.group(1).splitlines()
                     if line.startswith("make serve")]
    assert make_serve == "make serve"
    curl = re.search(r"```sh\n(curl -N http://127\.0\.0\.1:8000/io-bridge/run .*?)```", text, re.S)
    assert curl, "the README lost its curl example"

    folder = tmp_path / "iobridge"
    for name in ("Makefile", "pyproject.toml", "setup.py", "src/iobridge/npamp/_speedups.c"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes((ROOT / name).read_bytes())
    # Only the command `make serve` runs: an install it should not attempt fails here
    # instead of changing the suite's own virtualenv.
    (folder / ".venv" / "bin").mkdir(parents=True)
    (folder / ".venv" / "bin" / "iobridge").symlink_to(Path(sys.prefix) / "bin" / "iobridge")
    stamp = folder / ".venv" / ".serve-installed"
    stamp.touch()
    os.utime(stamp, (time.time() + 60, time.time() + 60))  # newer than every copied source
    env = _serve_env(MAKEFLAGS="")
    server = Served(make_serve, folder, env)
    try:
        assert f"iobridge: database: SQLite file {folder.resolve()}/iobridge.db" in server.banner
        assert "iobridge: agent demo (default): available" in server.banner
        typed = curl.group(1).replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        answered = subprocess.run(["/bin/sh", "-c", typed], cwd=folder, capture_output=True,
                                  text=True, timeout=30)
    finally:
        output = server.stop()
    assert "pip install" not in output  # nothing was installed: the stamp was current
    assert answered.returncode == 0, answered.stderr
    events = parse_sse(answered.stdout)
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED", events
    results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert len(results) == 2 and any("14" in r for r in results), results
    assert (folder / "iobridge.db").is_file()  # the thread is kept where the banner said
    assert "Traceback" not in output, output


def test_the_docs_project_folder_recipe_runs_verbatim(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    files, commands = _recipe("project-folder")
    assert set(files) == {"myapp/agents.py", "myapp/tools.py", "iobridge.toml"}
    folder = _fresh_clone_folder(tmp_path)
    for path, body in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body, encoding="utf-8")
    # The key comes from the test (the fake model's address with it), the rest as written.
    (serve_line,) = [c for c in commands if not c.startswith("export ")]
    assert [c.split("=")[0] for c in commands if c.startswith("export ")] == [
        "export OPENAI_API_KEY"
    ]
    env = _serve_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=fake_llm.base_url)
    server = Served(serve_line.split("  #")[0].strip(), folder, env)
    try:
        assert "iobridge: agent support (default): available" in server.banner
        assert "iobridge: agent orders: available" in server.banner
        fake_llm.push(calls(("c1", "order_status", '{"order_id": "A-17"}')),
                      text("Order A-17 has shipped."))
        body = run_body("Where is order A-17?", thread_id="t-support")
        events = parse_sse(httpx.post(f"{server.url}/io-bridge/run", json=body, timeout=30).text)
        results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert results == ["order A-17 has shipped"], events
        assert events[-1]["type"] == "RUN_FINISHED"

        fake_llm.push(calls(("c2", "get_order", '{"order_id": "B-2", "include_items": true}')),
                      text("B-2 holds a book."))
        body = run_body("What is in B-2?", thread_id="t-orders")
        body["forwardedProps"] = {"agentId": "orders"}
        events = parse_sse(httpx.post(f"{server.url}/io-bridge/run", json=body, timeout=30).text)
        (result,) = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert json.loads(result) == {"id": "B-2", "status": "shipped", "items": ["book"]}
    finally:
        output = server.stop()
    assert server.process.returncode == 0, output


def test_started_elsewhere_the_recipe_says_where_it_looked(tmp_path: Path) -> None:
    files, _ = _recipe("project-folder")
    project = _fresh_clone_folder(tmp_path)
    for path, body in files.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(body, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _serve_env(OPENAI_API_KEY="sk-test", IOBRIDGE_CONFIG=str(project / "iobridge.toml"))
    server = Served(f"{project}/.venv/bin/iobridge serve", elsewhere, env)
    try:
        assert (
            "iobridge: agent support (default): unavailable: pydantic_ai "
            "'myapp.agents:support_agent': no module named 'myapp' in the working directory "
            f"{elsewhere} or the installed packages (start iobridge from the folder that holds "
            "myapp/ or myapp.py, or install it)"
        ) in server.banner
        assert any(line.startswith("iobridge: agent orders: unavailable: tool "
                                   "'myapp.tools:get_order': no module named 'myapp'")
                   for line in server.banner), server.banner
    finally:
        server.stop()


def test_the_banner_names_the_database_agents_and_unknown_variables(tmp_path: Path) -> None:
    folder = _fresh_clone_folder(tmp_path)
    (folder / "iobridge.toml").write_text(
        '[[agents]]\nid = "gpt"\nmodel = "openai:gpt-4o-mini"\napi_key_env = "NO_SUCH_KEY"\n',
        encoding="utf-8",
    )
    env = _serve_env(IOBRIDGE_PROT="9000", IOBRIDGE_AUHT__MODE="none")
    server = Served(".venv/bin/iobridge serve", folder, env)
    try:
        banner = server.banner
    finally:
        server.stop()
    assert banner[:5] == [
        f"iobridge: database: SQLite file {folder.resolve()}/iobridge.db",
        "iobridge: agent demo: available",
        "iobridge: agent gpt (default): unavailable: environment variable NO_SUCH_KEY is not "
        "set (API key for openai)",
        "iobridge: warning: IOBRIDGE_AUHT__MODE names no setting and is ignored (did you mean "
        "IOBRIDGE_AUTH?)",
        "iobridge: warning: IOBRIDGE_PROT names no setting and is ignored (did you mean "
        "IOBRIDGE_PORT?)",
    ]
    assert banner[5].startswith(f"iobridge: HTTP on http://127.0.0.1:{server.port}/io-bridge")


def test_port_0_serves_on_a_free_port_and_the_banner_names_it(tmp_path: Path) -> None:
    folder = _fresh_clone_folder(tmp_path)
    server = Served(".venv/bin/iobridge serve --port 0", folder,
                    {**_serve_env(), "IOBRIDGE_PORT": "0"})
    try:
        assert server.port != 0
        reply = httpx.post(f"{server.url}/io-bridge/run", json=run_body("hi"), timeout=30)
        assert reply.status_code == 200
        assert parse_sse(reply.text)[-1]["type"] == "RUN_FINISHED"
    finally:
        server.stop()


def test_every_readme_command_runs_as_typed(tmp_path: Path, serve: Any) -> None:
    """Each ``.venv/bin/iobridge …`` the README shows names a real command; the ones that
    talk to a server run against one (on a free port instead of 8000)."""
    text = README.read_text(encoding="utf-8")
    # An example has arguments; "`iobridge serve`" alone in a sentence is the command's name.
    spans = re.findall(r"(?:^|`)(iobridge (?:serve|check|chat|db|npamp)\b[^`\n]*)", text, re.M)
    bare = [span for span in spans if re.search(r"[-/:0-9]", span)]
    assert bare == [], f"README commands must be runnable as typed (.venv/bin/iobridge): {bare}"
    commands = sorted(set(re.findall(r"\.venv/bin/iobridge [^`\n#]*", text)))
    assert len(commands) >= 8, commands
    folder = _fresh_clone_folder(tmp_path)
    server = serve()
    for command in commands:
        words = shlex.split(command.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}"))
        subcommand = [w for w in words[1:3] if not w.startswith("-") and w.isalpha()]
        shown = subprocess.run(
            [".venv/bin/iobridge", *subcommand, "--help"], cwd=folder, capture_output=True,
            text=True, timeout=30,
        )
        assert shown.returncode == 0, (command, shown.stderr)
        if words[1] == "check" and words[2].startswith("http"):
            graded = subprocess.run([*words, "--level", "1"], cwd=folder, capture_output=True,
                                    text=True, timeout=60)
            assert graded.returncode == 0, (command, graded.stdout, graded.stderr)
        if words[1] == "chat":
            chatted = subprocess.run(words, cwd=folder, input="2 + 2\n/quit\n",
                                     capture_output=True, text=True, timeout=60)
            assert chatted.returncode == 0, chatted.stderr
            assert "2 + 2 = 4." in chatted.stdout


@pytest.mark.parametrize("command", ["check", "chat"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:8000", "is not an http"),
        ("htp:/x", "is not an http"),
        ("http://", "is not an http"),
        ("http://127.0.0.1:99999", "the port must be 1-65535"),
        ("http://u:secret@127.0.0.1:1", "no credentials in the URL"),
        ("http://127.0.0.1:8000/?x=1", "takes no query or fragment"),
        ("dead", "cannot connect to http://127.0.0.1:"),
    ],
)
def test_check_and_chat_answer_a_bad_or_dead_url_in_one_line(
    command: str, url: str, says: str
) -> None:
    if url == "dead":
        url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, [command, url], input="/quit\n")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iobridge: "), result.output
    assert says in lines[0]
    assert "secret" not in result.output


def test_check_answers_a_dead_npamp_peer_in_one_line() -> None:
    pin = "sha256:" + "a" * 64
    result = CliRunner().invoke(
        app, ["check", f"npamp://127.0.0.1:{free_port()}", "--pin", pin, "--timeout", "5"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith("iobridge: cannot connect to 127.0.0.1:")
    assert len(result.output.strip().splitlines()) == 1


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    import typer.main

    command = typer.main.get_command(group) if not prefix else group
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*prefix, name))


def test_help_fits_80_columns_and_cuts_no_variable_name() -> None:
    names = list(_commands(app))
    assert ("serve",) in names and ("npamp", "run") in names and ("db", "upgrade") in names
    for words in names:
        shown = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, words
        too_long = [line for line in shown.output.splitlines() if len(line) > 80]
        assert too_long == [], (words, too_long)
        assert "…" not in shown.output
        # Every variable a command's own help names is shown whole.
        import typer.main

        command = typer.main.get_command(app)
        for word in words:
            command = command.commands[word]  # type: ignore[attr-defined]
        named = {n for p in command.params for n in re.findall(r"IOBRIDGE_\w+", p.help or "")}
        for name in named:
            assert re.search(rf"\b{name}\b", shown.output), (words, name)


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ("prot = 8001\n", "unknown setting(s) in {path}: prot (did you mean port?); valid: "),
        ("[npamp]\nprot = 7443\n",
         "invalid configuration: npamp.prot: Extra inputs are not permitted (did you mean port?)"),
        ('[auth]\nmod = "none"\n',
         "invalid configuration: auth.mod: Extra inputs are not permitted (did you mean mode?)"),
        ('[[auth.api_keys]]\nsha25 = "x"\nprincipal = "p"\n',
         "auth.api_keys.0.sha25: Extra inputs are not permitted (did you mean sha256?)"),
        ("[metrics]\nenabeld = true\n",
         "metrics.enabeld: Extra inputs are not permitted (did you mean enabled?)"),
    ],
)
def test_config_typos_get_a_did_you_mean(tmp_path: Path, toml: str, says: str) -> None:
    path = tmp_path / "iobridge.toml"
    path.write_text(toml, encoding="utf-8")
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert says.format(path=path) in result.output


def test_an_agent_key_typo_gets_a_did_you_mean() -> None:
    from iobridge.agents.definitions import load_agents

    _, errors = load_agents([{"id": "a", "mdoel": "openai:x"},
                             {"id": "u", "agui_url": "http://x", "timout": 3}])
    assert errors["a"].startswith("unknown key(s) mdoel (did you mean model?); known keys: ")
    assert errors["u"].startswith(
        "unknown key(s) timout (did you mean timeout?) for an agui_url agent; known keys: "
    )


@pytest.mark.parametrize("role", ["human", "bot", "USER"])
def test_a_message_with_an_unknown_role_is_a_400_naming_the_roles(
    serve: Any, role: str
) -> None:
    server = serve()
    body = run_body("hello", thread_id="t-role", run_id="r-role")
    body["messages"].append({"id": "m-odd", "role": role, "content": "hi"})
    with httpx.Client(base_url=f"{server.url}/io-bridge") as client:
        answer = client.post("/run", json=body)
        stored = client.get("/threads/t-role")
        alive = client.post("/run", json=run_body("2 + 2", thread_id="t-role", run_id="r-ok"))
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert error["code"] == "INVALID_REQUEST"
    assert error["details"] == [{
        "loc": ["messages", 1, "role"],
        "message": f"unknown role {role!r}; a message's role is one of activity, assistant, "
                   "developer, reasoning, system, tool, user",
    }]
    assert stored.status_code == 404  # nothing was stored, not even the valid message
    assert parse_sse(alive.text)[-1]["type"] == "RUN_FINISHED"


def test_make_serve_installs_only_what_serving_needs() -> None:
    """The serve install is the package alone; the dev install marks it done too."""
    def planned(target: str) -> list[str]:
        done = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout.splitlines()

    serve = planned(".venv/.serve-installed")
    installs = [line for line in serve if "pip install" in line]
    assert installs == [
        ".venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -e ."
    ]
    assert "touch .venv/.serve-installed" in serve
    dev = planned(".venv/.installed")
    assert any("-e '.[dev]'" in line for line in dev)
    assert "touch .venv/.installed .venv/.serve-installed" in dev
    rule = subprocess.run(["make", "-n", "serve"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, check=True, env={**os.environ, "MAKEFLAGS": ""})
    assert "[dev]" not in rule.stdout
