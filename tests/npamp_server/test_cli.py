"""``iobridge npamp keygen`` (``npamp run`` against a real server: ``test_serve.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.helpers import free_port
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.npamp.handshake import load_identity

from .conftest import StartHarness

pytestmark = pytest.mark.timeout(30)


def test_keygen_prints_the_fingerprint_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "id")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == load_identity(tmp_path / "id").fingerprint
    assert (tmp_path / "id.pub").is_file()
    again = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "id")])
    assert again.exit_code == 2
    bad = runner.invoke(app, ["npamp", "keygen", str(tmp_path / "x"), "--scheme", "rsa"])
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()


def _one_line_error(result: object, *needles: str) -> str:
    """The CLI failed with exactly one ``error: ...`` line and no traceback."""
    stderr: str = result.stderr  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.exception is None or isinstance(result.exception, SystemExit)  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("error: ")
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


def test_keygen_into_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["npamp", "keygen", str(tmp_path / "nope" / "server.key")])
    assert result.exit_code == 2
    _one_line_error(result, "does not exist")
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("problem", ["ml-dsa-87 key", "missing file", "not a key"])
def test_run_with_an_unusable_identity_is_a_one_line_error(tmp_path: Path, problem: str) -> None:
    runner = CliRunner()
    key = tmp_path / "client.key"
    if problem == "ml-dsa-87 key":
        made = runner.invoke(app, ["npamp", "keygen", str(key), "--scheme", "ml-dsa-87"])
        assert made.exit_code == 0
    elif problem == "not a key":
        key.write_text("not a PEM file\n")
    result = runner.invoke(
        app,
        ["npamp", "run", "--connect", f"127.0.0.1:{free_port()}", "--pin", "sha256:" + "0" * 64,
         "-m", "hi", "--identity", str(key)],
    )
    assert result.exit_code == 2  # refused before any connection is attempted
    needle = {"ml-dsa-87 key": "Ed25519", "missing file": "client.key", "not a key": "PEM"}
    _one_line_error(result, "--identity", needle[problem])


async def test_run_prints_the_refusal_it_received(
    harness: StartHarness, tmp_path: Path
) -> None:
    runner = CliRunner()
    key = tmp_path / "client.key"
    assert runner.invoke(app, ["npamp", "keygen", str(key)]).exit_code == 0
    async with harness(npamp={"agui_peers": []}) as h:  # trusted, never agreed on 0x35
        args = ["npamp", "run", "--connect", f"127.0.0.1:{h.port}", "--pin",
                h.server_key.fingerprint, "-m", "hi", "--identity", str(key), "--timeout", "10"]
        result = await asyncio.to_thread(runner.invoke, app, args)
    assert result.exit_code == 1
    line = _one_line_error(result, "the server refused the run: ProtocolUnsupported")
    assert "agui_peers" in line


@pytest.mark.parametrize(
    ("flag", "env", "loop_module"),
    [
        (None, None, "uvloop"),  # auto: uvloop is installed (uvicorn[standard]), as for serve
        ("asyncio", None, "asyncio"),
        (None, "asyncio", "asyncio"),  # the server's own setting, IOBRIDGE_EVENT_LOOP
        ("uvloop", "asyncio", "uvloop"),  # the flag wins over the environment
    ],
)
def test_run_picks_its_event_loop_like_the_server(
    monkeypatch: pytest.MonkeyPatch, flag: str | None, env: str | None, loop_module: str
) -> None:
    from iobridge.npamp_server import cli as npamp_cli

    seen: list[str] = []

    async def record(*args: object) -> int:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])
        return 0

    monkeypatch.setattr(npamp_cli, "_run", record)
    if env is None:
        monkeypatch.delenv("IOBRIDGE_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("IOBRIDGE_EVENT_LOOP", env)
    args = ["npamp", "run", "--connect", "127.0.0.1:1", "--pin", "sha256:" + "0" * 64, "-m", "hi"]
    result = CliRunner().invoke(app, args + (["--event-loop", flag] if flag else []))
    assert result.exit_code == 0, result.output
    assert seen == [loop_module]


def test_run_without_uvloop_installed_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    key = tmp_path / "client.key"
    assert CliRunner().invoke(app, ["npamp", "keygen", str(key)]).exit_code == 0
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    args = ["npamp", "run", "--connect", "127.0.0.1:1", "--pin", "sha256:" + "0" * 64,
            "-m", "hi", "--identity", str(key), "--event-loop", "uvloop"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    _one_line_error(result, "uvloop is not installed")
