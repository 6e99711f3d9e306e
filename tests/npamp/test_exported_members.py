"""Each N-PAMP package's ``__all__`` is sorted and is exactly its public names (HTTPX style)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import iobridge.npamp

PACKAGES = [
    "iobridge.npamp",
    "iobridge.npamp.aio",
    "iobridge.npamp.association",
    "iobridge.npamp.bridge",
    "iobridge.npamp.handshake",
    "iobridge.npamp.record",
    "iobridge.npamp.wire",
]
# Everything below the asyncio shell is sans-IO (style-anchors §6.1).
SANS_IO = [name for name in PACKAGES if name not in ("iobridge.npamp", "iobridge.npamp.aio")]
IO_MODULES = {"asyncio", "socket", "ssl", "time"}


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff RUF022 order: SCREAMING_SNAKE_CASE, then CamelCase, then the rest."""
    group = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return group, name


def test_every_subpackage_is_listed() -> None:
    found = {
        f"iobridge.npamp.{info.name}"
        for info in pkgutil.iter_modules(iobridge.npamp.__path__)
        if info.ispkg
    }
    assert found == set(PACKAGES) - {"iobridge.npamp"}


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_equals_the_public_names(name: str) -> None:
    package = importlib.import_module(name)
    public = {
        member
        for member, value in vars(package).items()
        if not member.startswith("_") and not isinstance(value, ModuleType)
    }
    assert package.__all__ == sorted(public, key=_isort_key)


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("name", SANS_IO)
def test_sans_io_subpackage_modules_import_no_io(name: str) -> None:
    package = importlib.import_module(name)
    files = sorted(Path(package.__path__[0]).glob("*.py"))
    assert len(files) >= 2
    offenders = {str(path.name): _imported_roots(path) & IO_MODULES for path in files}
    assert {module: bad for module, bad in offenders.items() if bad} == {}


def test_importing_every_sans_io_subpackage_loads_no_event_loop_or_socket() -> None:
    # ``time`` is loaded by the interpreter itself, so only the AST check above covers it.
    code = (
        "import sys, importlib;"
        f"[importlib.import_module(n) for n in {SANS_IO!r}];"
        "bad = {'asyncio', 'socket', 'ssl'} & set(sys.modules);"
        "print(*sorted(bad)); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
