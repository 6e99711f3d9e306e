"""``scripts/mutants.py``: a stopped group run goes on only where it was started, the
report sums the time its parts spent judging mutants, and a group's verdicts hold at a later
commit only while nothing they depend on changed; a finished run's verdicts are recorded
where a new checkout finds them; and a record's survivors are judged again, its kills kept,
only when nothing but new test files came since."""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections import Counter
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
    base = tmp_path / "store" / "mutants" / "src" / "x"
    base.mkdir(parents=True)
    (base / "a.py.meta").write_text(json.dumps({"durations_by_key": {"m1": 1.5, "m2": 2.0}}))
    (base / "b.py.meta").write_text(json.dumps({"durations_by_key": {"m3": 0.5}}))
    (base / "c.py.meta").write_text(json.dumps({"exit_code_by_key": {}}))
    assert mutants.judging_seconds_in(tmp_path / "store") == 4.0


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
    tests = ["tests/test_a.py::test_one"]
    assert mutants.stale(None, "P", tests) == "no run is recorded (run the group)"
    verdicts = mutants.Verdicts(started_at, mutants.digest("P"),
                                {"src/x/a.py": Counter(killed=1, survived=1)}, 3.0)
    assert mutants.stale(verdicts, "P", tests) is None
    # Another group's tests and the docs may change, committed or not.
    (repo / "tests/test_b.py").write_text("two\n")
    (repo / "docs/testing.md").write_text("two\n")
    mutants.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "second")
    (repo / "tests/test_c.py").write_text("new\n")
    assert mutants.stale(verdicts, "P", tests) is None
    assert mutants.stale(verdicts, "Q", tests) == (
        "the group's definition (Makefile) or pyproject.toml changed since the run")
    (repo / "tests/helpers.py").write_text("two\n")
    (repo / "src/x/b.py").write_text("new\n")
    (repo / "tests/test_a.py").write_text("two\n")
    assert mutants.stale(verdicts, "P", tests) == (
        f"changed since the run at {started_at}: src/x/b.py, tests/helpers.py, tests/test_a.py")
    mutants.git("checkout", "-q", "--", "tests")
    (repo / "src/x/b.py").unlink()
    assert mutants.stale(verdicts, "P", tests) is None
    verdicts.modules["src/x/a.py"]["not judged"] = 2
    assert mutants.stale(verdicts, "P", tests) == (
        f"the run at {started_at} has 2 mutants not judged (MUTANT_RESUME=1)")
    verdicts.commit = started_at + "+changes"
    assert mutants.stale(verdicts, "P", tests) == (
        f"the run was of {started_at}+changes: a tree with changes not committed")


def test_a_finished_run_is_recorded_and_reported_without_its_scratch_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "build" / "auth"
    assert mutants.of_run(work) is None
    meta = work / "mutants" / "src" / "iobridge" / "auth.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({
        "exit_code_by_key": {"a__mutmut_1": 1, "a__mutmut_2": 0, "a__mutmut_3": 33,
                             "a__mutmut_4": 36, "a__mutmut_5": None},
        "durations_by_key": {"a__mutmut_1": 1.5, "a__mutmut_2": 2.0}}))
    (work / "commit").write_text("abc1234\n")
    (work / "pyproject.toml").write_text("P")
    verdicts = mutants.of_run(work)
    assert verdicts is not None
    assert (verdicts.commit, verdicts.definition, verdicts.seconds) == (
        "abc1234", mutants.digest("P"), 3.5)
    assert verdicts.modules == {"src/iobridge/auth.py": Counter(
        {"killed": 1, "survived": 1, "no tests": 1, "timeout": 1, "not judged": 1})}
    assert (verdicts.survived, verdicts.untested, verdicts.open) == (
        ["a__mutmut_2"], ["a__mutmut_3"], 1)
    record = tmp_path / "auth.json"
    record.write_text(verdicts.record())
    assert mutants.of_record(record) == verdicts
    assert mutants.of_record(tmp_path / "store.json") is None
    for broken in ("{", "[]", '{"commit": "abc1234"}', json.dumps({
            **json.loads(verdicts.record()), "modules": ["src/iobridge/auth.py"]})):
        (tmp_path / "broken.json").write_text(broken)
        with pytest.raises(SystemExit, match=r"broken\.json: not a record this script wrote"):
            mutants.of_record(tmp_path / "broken.json")

    monkeypatch.setattr(mutants, "WORK", tmp_path / "build")
    monkeypatch.setattr(mutants, "RECORDS", tmp_path)
    assert mutants.report(["auth"]) == 0
    assert "at abc1234 (this checkout's run)" in capsys.readouterr().out
    meta.unlink()  # the scratch copy is gone (a new checkout): the record is read
    assert mutants.report(["auth"]) == 0
    out = capsys.readouterr().out
    assert "at abc1234 (docs/mutants/auth.json); the mutants' tests ran for 4 s" in out
    assert "= auth" in out and "40.0%" in out
    assert mutants.report(["store"]) == 1
    assert "store: no results" in capsys.readouterr().out


NAMES = [f"x.a.f__mutmut_{i}" for i in range(1, 7)]


def commit_all(message: str) -> None:
    mutants.git("add", ".")
    mutants.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


class FakeMutmut:
    """mutmut at the subprocess boundary, in a throwaway repository: it judges the mutants it
    is given by name, or every open one, each as ``verdict_of`` says, and stops after
    ``stop_after`` (a stop leaves some open)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.repo = repo = tmp_path / "repo"
        for name in ("src/x/a.py", "tests/test_a.py", "docs/testing.md", "examples/e.toml"):
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text("one\n")
        (repo / "scripts").mkdir()
        (repo / "scripts/mutant_tests.py").write_text("")
        (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        # The scratch copies and the records stay out of the commits this test makes.
        (repo / ".gitignore").write_text("build/\ndocs/mutants/\n")
        monkeypatch.setattr(mutants, "ROOT", repo)
        monkeypatch.setattr(mutants, "WORK", repo / "build")
        monkeypatch.setattr(mutants, "RECORDS", repo / "docs" / "mutants")
        mutants.git("init", "-q")
        commit_all("first")
        monkeypatch.setattr(mutants, "measure", lambda *args: 0)
        monkeypatch.setattr(mutants.subprocess, "call", self)
        self.verdict_of = dict(zip(NAMES, (1, 0, 33, 36, 0, 1), strict=True))
        self.calls: list[list[str]] = []
        self.stop_after = 3
        self.exit_code = 0

    def __call__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
        given = argv[4:]
        self.calls.append(given)
        meta = cwd / "mutants" / "src" / "x" / "a.py.meta"
        meta.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(meta.read_text()) if meta.exists() else {
            "exit_code_by_key": dict.fromkeys(NAMES), "durations_by_key": {}}
        codes = data["exit_code_by_key"]
        todo = [name for name in codes if any(fnmatch.fnmatch(name, g) for g in given)] \
            if given else [name for name, code in codes.items() if code is None]
        for name in todo[:self.stop_after]:  # stopped there
            codes[name] = self.verdict_of[name]
            data["durations_by_key"][name] = 1.0
        meta.write_text(json.dumps(data))
        return self.exit_code


ARGS = ("x", ["src/x/*.py"], ["tests/test_a.py"], [], 2, [])


def test_a_stopped_run_goes_on_from_its_record_in_a_new_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeMutmut(tmp_path, monkeypatch)
    repo, calls, names, args = fake.repo, fake.calls, NAMES, ARGS
    fake.stop_after, fake.exit_code = 0, 1  # its clean tests fail: nothing judged or recorded
    assert mutants.run(*args) == 1
    assert not (repo / "docs/mutants/x.json").exists()
    fake.stop_after, fake.exit_code = 3, 0
    calls.clear()
    assert mutants.run(*args) == 0
    first = mutants.of_record(repo / "docs/mutants/x.json")
    assert first is not None and calls == [[]]
    assert (first.unjudged, first.open, first.survived, first.untested) == (
        names[3:], 3, [names[1]], [names[2]])
    # A new checkout (no build/), a later commit that changed only the docs.
    shutil.rmtree(repo / "build")
    (repo / "docs/testing.md").write_text("two\n")
    commit_all("docs")
    fake.stop_after = 2
    assert mutants.run(*args, resume=True) == 0
    assert calls[1] == names[3:]
    assert f"judging the 3 mutants the run at {first.commit} left open" in capsys.readouterr().out
    second = mutants.of_record(repo / "docs/mutants/x.json")
    assert second is not None and second.commit == first.commit
    assert (second.unjudged, second.open, second.seconds) == ([names[5]], 1, 5.0)
    # Stopped again: the scratch copy of this checkout goes on, with the one still open.
    assert mutants.run(*args, resume=True) == 0
    assert calls[2] == [names[5]]
    assert "resuming the run at" in capsys.readouterr().out
    done = mutants.of_record(repo / "docs/mutants/x.json")
    assert done is not None
    assert (done.commit, done.definition, done.seconds) == (first.commit, first.definition, 6.0)
    assert done.modules == {"src/x/a.py": Counter(
        {"killed": 2, "survived": 2, "no tests": 1, "timeout": 1})}
    assert (done.survived, done.untested, done.unjudged) == ([names[1], names[4]], [names[2]], [])
    assert mutants.stale(done, (repo / "build/x/pyproject.toml").read_text(), args[2]) is None
    # Nothing left to judge (mutmut, given no name, would judge all again); and a record
    # whose code changed cannot be gone on with.
    assert mutants.run(*args, resume=True) == 0
    assert mutants.of_record(repo / "docs/mutants/x.json") == done
    shutil.rmtree(repo / "build")
    with pytest.raises(SystemExit, match="no mutant is left to judge"):
        mutants.run(*args, resume=True)
    (repo / "docs/mutants/x.json").write_text(first.record())
    (repo / "src/x/a.py").write_text("two\n")
    with pytest.raises(SystemExit, match=r"changed since the run at \w+: src/x/a\.py"):
        mutants.run(*args, resume=True)
    assert len(calls) == 3


def test_survivors_are_judged_again_with_the_test_files_added_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeMutmut(tmp_path, monkeypatch)
    fake.stop_after = 6
    args = (*ARGS[:2], ["tests"], *ARGS[3:])  # a new test file there is one of the group's
    assert mutants.run(*args) == 0
    first = mutants.of_record(fake.repo / "docs/mutants/x.json")
    assert first is not None
    assert (first.survived, first.untested) == ([NAMES[1], NAMES[4]], [NAMES[2]])
    with pytest.raises(SystemExit, match=r"cannot reopen .*: no run is recorded"):
        mutants.run("y", *args[1:], reopen=True)
    # A new test file kills one survivor and covers the untested mutant.
    (fake.repo / "tests/test_more.py").write_text("new\n")
    with pytest.raises(SystemExit, match="the tree has changes not committed"):
        mutants.run(*args, reopen=True)
    commit_all("tests")
    now = mutants.commit()
    fake.verdict_of.update({NAMES[1]: 1, NAMES[2]: 0})
    fake.stop_after = 1  # stopped after one: the rest goes on from the record
    shutil.rmtree(fake.repo / "build")
    assert mutants.run(*args, reopen=True) == 0
    assert fake.calls[-1] == [NAMES[1], NAMES[4], NAMES[2]]  # the kills are not judged again
    assert f"judging again the 3 mutants that survived or had no test at {first.commit}, " \
        f"at {now}" in capsys.readouterr().out
    shutil.rmtree(fake.repo / "build")
    fake.stop_after = 6
    assert mutants.run(*args, resume=True) == 0
    assert fake.calls[-1] == [NAMES[4], NAMES[2]]
    again = mutants.of_record(fake.repo / "docs/mutants/x.json")
    assert again is not None and again.commit == now and again.definition == first.definition
    assert again.modules == {"src/x/a.py": Counter(
        {"killed": 3, "survived": 2, "timeout": 1})}
    assert (sorted(again.survived), again.untested, again.unjudged) == (
        [NAMES[2], NAMES[4]], [], [])
    assert again.seconds == first.seconds + 3
    # A test file that was there changed, or a new helper: a kill may not hold; refused.
    for name in ("tests/test_a.py", "tests/conftest.py"):
        (fake.repo / name).write_text("two\n")
        commit_all(name)
        with pytest.raises(SystemExit, match=f"cannot reopen .*changed since the run at "
                                             f"{now}: {name}"):
            mutants.run(*args, reopen=True)
        mutants.git("reset", "-q", "--hard", "HEAD~1")


class FakeCarry(FakeMutmut):
    """The same, where each part of ``carry`` gets the verdicts of its own tests: the changed
    tests alone as they are now (``now``), as they were (``before``, the script of the
    record's commit in a worktree), and the whole selection again (``again``)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(tmp_path, monkeypatch)
        (self.repo / "tests/test_a.py").write_text(
            "def test_one():\n    assert True\n\n\ndef test_two():\n    assert True\n")
        commit_all("two tests")
        self.stop_after = 6
        self.whole = dict(self.verdict_of)
        self.now: dict[str, int] = {}
        self.before: dict[str, int] = {}
        self.again: dict[str, int] = {}

    def __call__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
        if argv[1].endswith("scripts/mutants.py"):  # the record's commit, its tests as they were
            assert argv[2:4] == ["run", "x.before"] and "tests/test_a.py::test_one" in argv
            self.verdict_of = self.before
            given = argv[argv.index("--mutants") + 1:]
            return super().__call__(["mutmut", "run", "--max-children", "2", *given],
                                    cwd / "build" / "mutants" / "x.before")
        self.verdict_of = {"x.changed": self.now, "x.carried": self.again}.get(
            cwd.name, self.whole)
        return super().__call__(argv, cwd, env)


def test_a_record_is_carried_over_a_changed_test_judging_only_what_it_can_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeCarry(tmp_path, monkeypatch)
    repo, names = fake.repo, NAMES
    args = (*ARGS[:2], ["tests/test_a.py"], *ARGS[3:])
    assert mutants.run(*args) == 0
    first = mutants.of_record(repo / "docs/mutants/x.json")
    assert first is not None
    assert first.modules == {"src/x/a.py": Counter(
        {"killed": 2, "survived": 2, "no tests": 1, "timeout": 1})}
    node = "tests/test_a.py::test_one"
    # Only test_one's body changed.
    (repo / "tests/test_a.py").write_text(
        "def test_one():\n    assert 1\n\n\ndef test_two():\n    assert True\n")
    commit_all("test_one")
    assert mutants.run(*args, check=True) == 1
    assert f"changed since the run at {first.commit}: tests/test_a.py" in capsys.readouterr().out
    now = mutants.commit()
    # The changed test alone: kills the first as before, a survivor now (turned), passes
    # where the record had a timeout, hangs on the other survivor (a timeout: turned), and
    # no longer runs for the last kill.
    fake.now = dict(zip(names, (1, 1, 33, 0, 36, 33), strict=True))
    # As it was: it made the timeout (judged again in full: it survives now), not the last.
    fake.before = {names[3]: 36, names[5]: 0}
    fake.again = {names[3]: 0}
    calls = len(fake.calls)
    assert mutants.run(*args, carried=[node]) == 0
    assert fake.calls[calls:] == [["*"], [names[3], names[5]], [names[3]]]
    assert (f"verdicts of {first.commit} carried to {now}: 6 mutants judged by the changed "
            "tests alone, 2 by them as they were, 1 again in full; 3 turned"
            ) in capsys.readouterr().out
    carried = mutants.of_record(repo / "docs/mutants/x.json")
    assert carried is not None
    assert (carried.commit, carried.definition) == (now, first.definition)
    # names[1] survived -> killed, names[4] survived -> timeout; names[3] (a kill, the
    # record does not say which were timeouts: taken from the killed) -> survived.
    assert carried.modules == {"src/x/a.py": Counter(
        {"killed": 2, "survived": 1, "no tests": 1, "timeout": 2})}
    assert (carried.survived, carried.untested) == ([names[3]], [names[2]])
    assert carried.seconds == first.seconds + 6 + 2 + 1
    assert not (repo / "build/x.before-tree").exists()  # its worktree is gone
    assert mutants.git("worktree", "list", "--porcelain").count("worktree") == 1
    assert carried.carried == [{
        "from": first.commit, "tests": [node], "judged_alone": 6, "judged_as_before": 2,
        "judged_again": 1, "turned": {names[1]: "survived -> killed",
                                      names[3]: "killed -> survived",
                                      names[4]: "survived -> timeout"}}]
    assert mutants.stale(carried, (repo / "build/x/pyproject.toml").read_text(),
                         args[2]) is None
    # Carried again over a later change, where the test alone fails wherever the record has a
    # kill: nothing else is judged, and the first carry's scratch copies add no time.
    (repo / "tests/test_a.py").write_text(
        "def test_one():\n    assert 2\n\n\ndef test_two():\n    assert True\n")
    commit_all("test_one again")
    fake.now = dict(zip(names, (1, 1, 33, 0, 36, 1), strict=True))
    calls = len(fake.calls)
    assert mutants.run(*args, carried=[node]) == 0
    assert fake.calls[calls:] == [["*"]]
    again = mutants.of_record(repo / "docs/mutants/x.json")
    assert again is not None and again.modules == carried.modules
    assert again.seconds == carried.seconds + 6
    assert [entry["turned"] for entry in again.carried] == [carried.carried[0]["turned"], {}]


def test_a_record_is_not_carried_over_more_than_the_bodies_of_the_tests_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCarry(tmp_path, monkeypatch)
    repo = fake.repo
    args = (*ARGS[:2], ["tests/test_a.py"], *ARGS[3:])
    assert mutants.run(*args) == 0
    record = (repo / "docs/mutants/x.json").read_text()
    node = "tests/test_a.py::test_one"
    for path, text, why in (
            ("tests/test_a.py", "X = 1\n\n\ndef test_one():\n    assert 1\n\n\n"
             "def test_two():\n    assert True\n", "tests/test_a.py changed outside test_one"),
            ("tests/test_a.py", "def test_two():\n    assert True\n",
             "tests/test_a.py has no test test_one at both"),
            ("src/x/a.py", "two\n", r"changed since the run at \w+: src/x/a\.py")):
        (repo / path).write_text(text)
        commit_all(path)
        with pytest.raises(SystemExit, match=f"cannot carry docs/mutants/x.json: {why}"):
            mutants.run(*args, carried=[node])
        mutants.git("reset", "-q", "--hard", "HEAD~1")
        assert (repo / "docs/mutants/x.json").read_text() == record
    with pytest.raises(SystemExit, match="is not file::function"):
        mutants.run(*args, carried=["tests/test_a.py"])
    (repo / "tests/test_a.py").write_text("def test_one():\n    assert 1\n")  # not committed
    with pytest.raises(SystemExit, match="the tree has changes not committed"):
        mutants.run(*args, carried=[node])
    assert (repo / "docs/mutants/x.json").read_text() == record
