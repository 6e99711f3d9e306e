"""``scripts/mutants.py``: a stopped group run goes on only where it was started, the
report sums the time its parts spent judging mutants, and a group's verdicts hold at a later
commit only while nothing they depend on changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import mutants


def test_a_run_resumes_only_at_the_commit_it_was_started_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "store"
    assert mutants.resumable(work) == "no run was started (run it without --resume)"
    (work / "mutants").mkdir(parents=True)
    (work / "commit").write_text("abc1234\n")
    monkeypatch.setattr(mutants, "commit", lambda: "abc1234")
    assert mutants.resumable(work) is None
    monkeypatch.setattr(mutants, "commit", lambda: "def5678")
    assert mutants.resumable(work) == "it was started at abc1234, the tree is at def5678"
    (work / "commit").write_text("abc1234+changes\n")
    monkeypatch.setattr(mutants, "commit", lambda: "abc1234+changes")
    assert mutants.resumable(work) == (
        "the tree has changes not committed (a verdict must name its commit)")


def test_the_judging_time_adds_up_every_file_of_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mutants, "WORK", tmp_path)
    base = tmp_path / "store" / "mutants" / "src" / "x"
    base.mkdir(parents=True)
    (base / "a.py.meta").write_text(json.dumps({"durations_by_key": {"m1": 1.5, "m2": 2.0}}))
    (base / "b.py.meta").write_text(json.dumps({"durations_by_key": {"m3": 0.5}}))
    (base / "c.py.meta").write_text(json.dumps({"exit_code_by_key": {}}))
    assert mutants.judging_seconds("store") == 4.0


def test_verdicts_hold_until_what_they_depend_on_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    for name in ("src/x/a.py", "tests/test_a.py", "tests/helpers.py", "tests/test_b.py",
                 "docs/testing.md"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("one\n")
    monkeypatch.setattr(mutants, "ROOT", repo)
    mutants.git("init", "-q")
    mutants.git("add", ".")
    mutants.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    started_at = mutants.git("rev-parse", "--short", "HEAD")[0]
    work = tmp_path / "work"
    assert mutants.stale(work, "P", ["tests/test_a.py"]) == "no run was started"
    meta = work / "mutants" / "src" / "x" / "a.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": {"m1": 1, "m2": 0, "m3": 33}}))
    (work / "commit").write_text(started_at + "\n")
    (work / "pyproject.toml").write_text("P")
    tests = ["tests/test_a.py::test_one"]
    assert mutants.stale(work, "P", tests) is None
    # Another group's tests and the docs may change, committed or not.
    (repo / "tests/test_b.py").write_text("two\n")
    (repo / "docs/testing.md").write_text("two\n")
    mutants.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "second")
    (repo / "tests/test_c.py").write_text("new\n")
    assert mutants.stale(work, "P", tests) is None
    assert mutants.stale(work, "Q", tests) == (
        "the group's definition (Makefile) or pyproject.toml changed since the run")
    (repo / "tests/helpers.py").write_text("two\n")
    (repo / "src/x/b.py").write_text("new\n")
    (repo / "tests/test_a.py").write_text("two\n")
    assert mutants.stale(work, "P", tests) == (
        f"changed since the run at {started_at}: src/x/b.py, tests/helpers.py, tests/test_a.py")
    mutants.git("checkout", "-q", "--", "tests")
    (repo / "src/x/b.py").unlink()
    assert mutants.stale(work, "P", tests) is None
    meta.write_text(json.dumps({"exit_code_by_key": {"m1": 1, "m2": None, "m3": None}}))
    assert mutants.stale(work, "P", tests) == (
        f"the run at {started_at} has 2 mutants not judged (MUTANT_RESUME=1)")
    (work / "commit").write_text(started_at + "+changes\n")
    assert mutants.stale(work, "P", tests) == (
        f"the run was of {started_at}+changes: a tree with changes not committed")
