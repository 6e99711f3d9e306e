"""``scripts/mutant_tests.py``: which tests ``make mutants`` runs against a mutant.

Dropping a test that could have killed a mutant would inflate the score, so these check
that the selection keeps every test reaching the changed statement and falls back to all
of mutmut's tests whenever the change cannot be placed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scripts.mutant_tests import COVERAGE_ENV, LINES_FILE, changed_statement_lines, reaching_tests

ROOT = Path(__file__).resolve().parents[1]

ORIGINAL = '''\
class Box:
    def put(self, value, limit=3):
        if value > limit:
            raise ValueError(
                "too big",
            )
        total = (
            value
            + 1
        )
        return total
'''

BODY = ORIGINAL.split("\n", 2)[2]  # the method's body, after ``class`` and ``def`` lines


def mutated_copy(variants: dict[str, tuple[str, str]]) -> str:
    """mutmut's layout: the trampoline, the ``__mutmut_orig`` copy, then each variant."""
    text = "class Box:\n    def put(self, value, limit=3):\n        return 0\n\n"
    copies = {"orig": ("value, limit=3", BODY), **variants}
    for name, (signature, body) in copies.items():
        text += f"    def xǁBoxǁput__mutmut_{name}(self, {signature}):\n{body}\n"
    return text


def layout(tmp_path: Path) -> tuple[Path, Path]:
    root, mutated = tmp_path / "project", tmp_path / "project" / "mutants"
    (root / "src" / "pkg").mkdir(parents=True)
    (mutated / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text(ORIGINAL)
    (mutated / "src" / "pkg" / "mod.py").write_text(mutated_copy({
        "1": ("value, limit=3", BODY.replace("value > limit", "value >= limit")),
        "2": ("value, limit=3", BODY.replace('"too big"', '"XXtoo bigXX"')),
        "3": ("value, limit=4", BODY),
        # libcst writes a changed multi-line expression on one line: the copy is shorter.
        "4": ("value, limit=3", BODY.replace("(\n            value\n            + 1\n        )",
                                             "(value - 1)")),
    }))
    return root, mutated


def test_a_change_is_placed_on_its_whole_statement_in_the_original(tmp_path: Path) -> None:
    root, mutated = layout(tmp_path)
    lines = {n: changed_statement_lines(f"pkg.mod.xǁBoxǁput__mutmut_{n}", root, mutated)
             for n in "1234"}
    assert lines["1"] == {3}  # a compound statement: its header only, not its body
    assert lines["2"] == {4, 5, 6}  # the raise, whichever of its lines changed
    assert lines["3"] is None  # a default value: every call sees it, keep all tests
    assert lines["4"] == {7, 8, 9, 10}  # line count changed: still the one statement


def test_only_tests_reaching_the_statement_are_kept(tmp_path: Path) -> None:
    root, mutated = layout(tmp_path)
    (root / LINES_FILE).write_text(json.dumps({"src/pkg/mod.py": {
        "3": ["t.py::a", "t.py::b"], "4": ["t.py::a"], "8": ["t.py::b"], "11": ["t.py::b"]}}))
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_1", root, mutated) == {"t.py::a", "t.py::b"}
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_2", root, mutated) == {"t.py::a"}
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_4", root, mutated) == {"t.py::b"}
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_3", root, mutated) is None


def test_a_statement_run_only_outside_tests_keeps_every_test(tmp_path: Path) -> None:
    """Run at import (a decorator's arguments), it is run by every test process: the
    selection cannot narrow it, and dropping every test would call it untested."""
    root, mutated = layout(tmp_path)
    (root / LINES_FILE).write_text(json.dumps({"src/pkg/mod.py": {
        "3": [""], "4": ["t.py::a"], "8": ["t.py::b"]}}))
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_1", root, mutated) is None
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_2", root, mutated) == {"t.py::a"}


def test_without_a_measurement_or_a_known_function_all_tests_are_kept(tmp_path: Path) -> None:
    root, mutated = layout(tmp_path)
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_1", root, mutated) is None  # no file yet
    (root / LINES_FILE).write_text(json.dumps({"src/pkg/other.py": {"1": ["t.py::a"]}}))
    assert reaching_tests("pkg.mod.xǁBoxǁput__mutmut_1", root, mutated) is None
    assert reaching_tests("pkg.mod.xǁBoxǁgone__mutmut_1", root, mutated) is None
    assert reaching_tests("pkg.mod.not_a_mutant", root, mutated) is None


def test_the_measurement_credits_a_line_run_on_another_thread_to_its_test(
        tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "src" / "pkg" / "mod.py").write_text(
        "def direct():\n    return 1\n\n\ndef threaded():\n    return 2\n\n\n"
        "def at_import():\n    return 3\n\n\nCONSTANT = at_import()\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pkg.py").write_text(
        "import threading\nfrom pkg import mod\n\n\n"
        "def test_direct():\n    assert mod.direct() == 1\n\n\n"
        "def test_threaded():\n    t = threading.Thread(target=mod.threaded)\n"
        "    t.start()\n    t.join()\n")
    (tmp_path / "conftest.py").write_bytes((ROOT / "scripts" / "mutant_tests.py").read_bytes())
    out = tmp_path / LINES_FILE
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "src"), **{
        COVERAGE_ENV: str(out), COVERAGE_ENV + "_SOURCE": str(tmp_path / "src" / "pkg")})
    env.pop("MUTANT_UNDER_TEST", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = json.loads(out.read_text())["src/pkg/mod.py"]
    assert lines["2"] == ["tests/test_pkg.py::test_direct"]
    assert lines["6"] == ["tests/test_pkg.py::test_threaded"]
    assert lines["10"] == [""]  # only run at import, outside every test
