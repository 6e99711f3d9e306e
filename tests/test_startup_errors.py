"""Every startup failure is one line naming the setting and the fix, with exit status 2."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iobridge.cli import app

pytestmark = pytest.mark.timeout(60)


def _serve(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["serve", *args], env=env)
    return result.exit_code, result.output.strip()


def _one_line(code: int, output: str, *needles: str) -> None:
    assert code == 2, output
    assert len(output.splitlines()) == 1, output
    assert output.startswith("iobridge: ") and "Traceback" not in output
    for needle in needles:
        assert needle in output, output


@pytest.mark.parametrize(
    ("url", "needles"),
    [
        ("mysql://u@h/db", ("database_url", "'mysql' is not supported")),
        ("postgresql://u:secret@127.0.0.1/db", ("write postgresql+asyncpg://",)),
        ("postgresql+psycopg2://u@127.0.0.1/db", ("write postgresql+asyncpg://",)),
        ("not a url", ("database_url is not a database URL",)),
    ],
)
def test_a_bad_database_url(url: str, needles: tuple[str, ...]) -> None:
    code, output = _serve(env={"IOBRIDGE_DATABASE_URL": url})
    _one_line(code, output, *needles)
    assert "secret" not in output


def test_a_sqlite_file_in_a_missing_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing/iobridge.db"
    code, output = _serve(env={"IOBRIDGE_DATABASE_URL": url})
    _one_line(code, output, "database_url", "does not exist")


def test_postgresql_unreachable_and_a_wrong_password(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"postgresql+asyncpg://iobridge:hunter2@127.0.0.1:{port}/iobridge_test"
    code, output = _serve("--port", "0", env={"IOBRIDGE_DATABASE_URL": url})
    _one_line(code, output, "cannot connect to the database", "is it running?")
    assert "hunter2" not in output
    real = os.environ.get("IOBRIDGE_TEST_POSTGRES_URL")
    if real is None:
        if os.environ.get("CI") == "true":
            pytest.fail("IOBRIDGE_TEST_POSTGRES_URL is not set (CI=true)")
        pytest.skip("IOBRIDGE_TEST_POSTGRES_URL is not set")
    wrong = real.replace("iobridge:iobridge@", "iobridge:wrong-password@")
    code, output = _serve("--port", "0", env={"IOBRIDGE_DATABASE_URL": wrong})
    _one_line(code, output, "refused the user or password")
    assert "wrong-password" not in output


def test_ports_in_use() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        code, output = _serve("--port", port, env={"IOBRIDGE_DATABASE_URL": "memory://"})
        _one_line(code, output, f"port: 127.0.0.1:{port} is already in use")
        code, output = _serve("--port", "0", "--npamp-port", port,
                              env={"IOBRIDGE_DATABASE_URL": "memory://"})
        _one_line(code, output, f"npamp.port: 127.0.0.1:{port} is already in use")


def test_an_unset_api_key_variable(tmp_path: Path) -> None:
    config = tmp_path / "iobridge.toml"
    config.write_text(
        'database_url = "memory://"\nport = 0\n[auth]\nmode = "api-key"\n'
        '[[auth.api_keys]]\nkey_env = "NO_SUCH_KEY_VAR"\nprincipal = "a"\n',
        encoding="utf-8",
    )
    code, output = _serve("--config", str(config))
    _one_line(code, output, "auth:", "NO_SUCH_KEY_VAR")


def test_non_json_cors_origins() -> None:
    code, output = _serve(env={"IOBRIDGE_CORS_ORIGINS": "http://a.example"})
    _one_line(code, output, "IOBRIDGE_CORS_ORIGINS: not valid JSON", "take JSON, e.g.")


def test_config_typos_are_refused_with_the_valid_keys(tmp_path: Path) -> None:
    config = tmp_path / "iobridge.toml"
    config.write_text("prot = 8001\n[auht]\nmode = \"none\"\n", encoding="utf-8")
    code, output = _serve("--config", str(config))
    _one_line(code, output, "unknown setting(s)",
              "auht (did you mean auth?), prot (did you mean port?); valid: ", "port")


def test_db_upgrade_with_a_bad_url() -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", "postgres://h/db"])
    _one_line(result.exit_code, result.output.strip(), "write postgresql+asyncpg://")


def test_version_and_help_show_env_names_and_defaults() -> None:
    from iobridge import __version__

    version = CliRunner().invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.strip() == f"iobridge {__version__}"
    help_text = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    for shown in ("env IOBRIDGE_HOST", "default 127.0.0.1", "env IOBRIDGE_PORT", "default 8000",
                  "env IOBRIDGE_NPAMP__PORT", "--no-http", "--log-level"):
        assert shown in help_text, shown


# -- a setting that needs an extra the install lacks ---------------------------------------


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """As if ``modules`` were not installed (a base install without the extra)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_postgresql_without_the_postgres_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "asyncpg")
    url = "postgresql+asyncpg://iobridge:hunter2@127.0.0.1:1/db"
    code, output = _serve("--port", "0", env={"IOBRIDGE_DATABASE_URL": url})
    _one_line(code, output, "database_url", "asyncpg not installed",
              "pip install 'iobridge[postgres]'")
    assert "hunter2" not in output
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", url])
    _one_line(result.exit_code, result.output.strip(), "pip install 'iobridge[postgres]'")


def test_npamp_without_the_npamp_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "cryptography", "google_crc32c")
    code, output = _serve("--port", "0", "--npamp-port", "0",
                          env={"IOBRIDGE_DATABASE_URL": "memory://"})
    _one_line(code, output, "npamp.port", "pip install 'iobridge[npamp]'")
    for command in (["npamp", "keygen", "/nonexistent/key"],
                    ["npamp", "run", "--connect", "127.0.0.1:1", "-m", "hi", "--pin", "x"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            "error: iobridge npamp needs the npamp extra (cryptography, google_crc32c not "
            "installed): pip install 'iobridge[npamp]'"]


def test_jwt_auth_without_the_jwt_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "jwt")
    config = tmp_path / "iobridge.toml"
    config.write_text(
        'database_url = "memory://"\nport = 0\n[auth]\nmode = "jwt"\n[auth.jwt]\n'
        'key = "a-long-enough-secret"\n',
        encoding="utf-8",
    )
    code, output = _serve("--config", str(config))
    _one_line(code, output, 'auth.mode = "jwt"', "pip install 'iobridge[jwt]'")
