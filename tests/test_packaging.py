"""The sdist is complete (docs, examples, LICENSE, CHANGELOG, web assets, tests) and builds
a wheel that carries the playground and docs assets; provider SDKs are extras.

Built with ``python -m build --no-isolation`` (the dev extra installs ``build`` and a
setuptools new enough for the SPDX license field), so no download is needed.
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
NAME = "iobridge-0.1.0"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _files(folder: str, pattern: str = "*") -> set[str]:
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / folder).rglob(pattern)
        if p.is_file() and "__pycache__" not in p.parts and "node_modules" not in p.parts
    }


def test_sdist_is_complete(dist: Path) -> None:
    with tarfile.open(dist / f"{NAME}.tar.gz") as sdist:
        members = {m.name.removeprefix(f"{NAME}/") for m in sdist.getmembers() if m.isfile()}
        pkg_info = sdist.extractfile(f"{NAME}/PKG-INFO")
        assert pkg_info is not None
        info = email.message_from_bytes(pkg_info.read())
    expected = {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "MANIFEST.in"}
    expected |= _files("docs") | _files("examples") | _files("src/iobridge/web")
    expected |= _files("src/iobridge/store/migrations", "*.py") | {"src/iobridge/py.typed"}
    expected |= _files("tests", "*.py")
    assert expected - members == set()
    leaked = [m for m in members if any(part in m for part in (
        "node_modules/", "tests/web/artifacts/", ".venv/", "__pycache__", ".db"))]
    assert leaked == []
    assert info["License-Expression"] == "Apache-2.0"
    assert info.get_all("License-File") == ["LICENSE"]
    assert {"openai", "anthropic", "google", "all", "mcp"} <= set(info.get_all("Provides-Extra"))
    base = [r for r in info.get_all("Requires-Dist") if "extra ==" not in r]
    assert "pydantic-ai-slim[openai]>=2.68" in base
    assert not [r for r in base if "anthropic" in r or "google]" in r or "google," in r]


def test_wheel_carries_the_web_and_migration_files(dist: Path) -> None:
    # One wheel, tagged for this platform: it carries the compiled N-PAMP frame path
    # (iobridge.npamp._speedups, built by setup.py; the pure-Python path stays the reference).
    (path,) = dist.glob(f"{NAME}-*.whl")
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
    assert any(n.startswith("iobridge/npamp/_speedups.") and n.endswith(".so") for n in names)
    web = {f"iobridge/web/{p.name}" for p in (ROOT / "src/iobridge/web").iterdir() if p.is_file()}
    assert web - names == set()
    assert "iobridge/store/migrations/env.py" in names
    assert f"{NAME}.dist-info/licenses/LICENSE" in names


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text


#: What the extras bring; the default ``iobridge serve`` must import none of it.
EXTRA_MODULES = ("asyncpg", "greenlet", "cryptography", "google_crc32c", "jwt", "aiosqlite")

SERVE_WITHOUT_EXTRAS = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from starlette.testclient import TestClient

import iobridge.cli
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app

app = create_app(Backend(Settings(database_url="sqlite:///" + sys.argv[1])))
with TestClient(app, base_url="http://127.0.0.1") as client:
    body = {{"threadId": "t1", "runId": "r1", "tools": [], "context": [],
            "messages": [{{"id": "m1", "role": "user", "content": "2 + 3 * 4?"}}]}}
    events = client.post("/io-bridge/run", json=body).text
    thread = client.get("/io-bridge/threads/t1").json()
assert "RUN_FINISHED" in events and "14" in events, events
assert thread["id"] == "t1", thread
print("served without", sorted(m for m in {blocked!r} if m not in sys.modules))
"""


def test_the_default_serve_path_needs_no_extra(tmp_path: Path) -> None:
    """The base install serves the demo agent on the SQLite store over HTTP with every
    extra's modules missing (imports of them fail, as in a fresh ``pip install .``)."""
    code = SERVE_WITHOUT_EXTRAS.format(blocked=EXTRA_MODULES)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "served without" in done.stdout


def test_the_base_install_requires_no_extra() -> None:
    """``pip install iobridge`` pulls none of the extras' packages."""
    from importlib.metadata import requires

    base = [r for r in requires("iobridge") or [] if "extra ==" not in r]
    for package in ("asyncpg", "cryptography", "google-crc32c", "pyjwt", "aiosqlite"):
        assert not [r for r in base if r.lower().startswith(package)], base
    assert not [r for r in base if r.startswith("sqlalchemy[")], base
