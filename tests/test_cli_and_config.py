"""Settings precedence and the command line (``iobridge serve`` / ``db upgrade``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.config import Settings, is_loopback

runner = CliRunner()


def test_file_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "iobridge.toml"
    config.write_text(
        'port = 9001\nprefix = "/from-file"\nping_interval = 3\n[auth]\nmode = "none"\n'
    )
    monkeypatch.setenv("IOBRIDGE_PORT", "9002")
    monkeypatch.setenv("IOBRIDGE_TOOL_TIMEOUT", "12")
    settings = Settings.load(config, prefix="/from-flag")
    assert settings.port == 9002  # the environment beats the file
    assert settings.prefix == "/from-flag"  # a flag beats both
    assert settings.ping_interval == 3  # the file beats the default
    assert settings.tool_timeout == 12


def test_config_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "other.toml"
    config.write_text('prefix = "/env-named"\n')
    monkeypatch.setenv("IOBRIDGE_CONFIG", str(config))
    assert Settings.load().prefix == "/env-named"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "config file not found"),
        ("port = [", "not valid TOML"),
        ("port = 70000", "invalid configuration: port"),
        ('tool_result_mode = "sometimes"', "invalid configuration: tool_result_mode"),
        ('[auth]\nmode = "magic"', "invalid configuration: auth.mode"),
        ('redis_url = "localhost:6379"', "redis_url: Value error, redis_url must be a redis://"),
        ("heartbeat_seconds = 3\nowner_lost_seconds = 5",
         "owner_lost_seconds must be at least twice heartbeat_seconds"),
        ("owner_lost_seconds = 61", "invalid configuration: owner_lost_seconds"),
    ],
)
def test_bad_configuration_is_one_clear_line(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    config = tmp_path / "iobridge.toml"
    if content is not None:
        config.write_text(content)
    result = runner.invoke(app, ["db", "upgrade", "--config", str(config)])
    assert result.exit_code == 2
    assert expected in result.output
    assert "Traceback" not in result.output


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    result = runner.invoke(app, ["db", "upgrade", "--database-url", f"sqlite+aiosqlite:///{db}"])
    assert result.exit_code == 0, result.output
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"iobridge_threads", "iobridge_messages", "iobridge_alembic_version"} <= tables
    again = runner.invoke(app, ["db", "upgrade", "--database-url", f"sqlite+aiosqlite:///{db}"])
    assert again.exit_code == 0  # idempotent


def test_serve_documents_its_flags() -> None:
    result = runner.invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--host", "--port", "--prefix", "--config", "--npamp-port"):
        assert flag in result.output


@pytest.mark.parametrize(("choice", "loop_module"), [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_serve_runs_on_the_chosen_event_loop(
    monkeypatch: pytest.MonkeyPatch, choice: str, loop_module: str
) -> None:
    """``auto`` picks uvloop (installed with uvicorn[standard]), as uvicorn itself would."""
    import asyncio

    import uvicorn
    from typer.testing import CliRunner

    from iobridge.cli import app as cli_app
    from iobridge.http import server as http_server

    seen: list[str] = []

    async def record(self: uvicorn.Server, sockets: Any = None) -> None:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    monkeypatch.setattr(http_server._Server, "serve", record)
    monkeypatch.setenv("IOBRIDGE_DATABASE_URL", "memory://")
    monkeypatch.setenv("IOBRIDGE_EVENT_LOOP", choice)
    result = CliRunner().invoke(cli_app, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert seen == [loop_module]


@pytest.mark.parametrize("command", ["chat", "check"])
@pytest.mark.parametrize("value", ["no-colon", ": empty name"])
def test_a_bad_header_option_is_refused_before_connecting(command: str, value: str) -> None:
    """``iobridge chat`` and ``iobridge check`` read ``--header`` alike (one parser)."""
    result = CliRunner().invoke(app, [command, "http://127.0.0.1:9", "--header", value])
    assert result.exit_code == 2
    assert "is not 'Name: value'" in result.output and "--header" in result.output


def test_header_options_are_parsed_with_names_and_values_stripped() -> None:
    from iobridge.client.header_option import parse_headers

    assert parse_headers([" X-API-Key : k1 ", "Authorization: Bearer a:b"]) == {
        "X-API-Key": "k1", "Authorization": "Bearer a:b"}


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("LocalHost", True), ("127.0.0.1", True), ("127.9.9.9", True),
    ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
    ("example.com", False), ("", False),
])
def test_one_loopback_rule_for_allowed_hosts_and_npamp_agree(host: str, loopback: bool) -> None:
    # ``allowed_hosts`` and ``serve --npamp-agree`` decide with the same function (the CLI's
    # own copy missed ``[::1]`` and upper-case ``localhost``).
    assert is_loopback(host) is loopback
    import iobridge.cli

    assert not hasattr(iobridge.cli, "_is_loopback")
