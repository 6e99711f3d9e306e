"""``iobridge npamp keygen`` (``npamp run`` against a real server: ``test_serve.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from iobridge.cli import app
from iobridge.npamp.handshake import load_identity

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
