"""``scripts/mutants.py``: a stopped group run goes on only where it was started, and the
report sums the time its parts spent judging mutants."""

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
