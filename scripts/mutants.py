"""Mutation testing, one module group at a time, and the per-module score table.

mutmut reads its settings from ``pyproject.toml`` in the directory it runs in and keeps its
state in ``mutants/`` there, so each group gets its own scratch copy of the project under
``build/mutants/<group>/``: the ``[tool.mutmut]`` table of the real ``pyproject.toml`` (the
shared settings) plus the group's files to mutate and its tests. Groups stay independent:
one group's test selection never decides another group's results.

    python scripts/mutants.py run GROUP --mutate 'src/x/*.py' --tests tests/x [--deselect ID ...]
        [--mutants NAME ...]   (only these mutants: mutmut names or fnmatch patterns)
        [--postgres]           (keep IOBRIDGE_TEST_POSTGRES_URL: the PostgreSQL variants run)
        [--skip 'src/x/y/*' ...] (files the --mutate globs match but mutmut cannot judge)
        [--resume]             (go on with the group's unfinished run, or its record's)
        [--reopen]             (judge the record's survivors and untested mutants again
                                with the test files added since)
        [--carry NODE ...]     (the record's verdicts carried over these changed tests)
        [--check]              (do the group's verdicts still hold for the tree checked out?)
    python scripts/mutants.py record GROUP
    python scripts/mutants.py report GROUP [GROUP ...]

A run leaves its verdicts in ``docs/mutants/<group>.json`` when it ends (``record GROUP``
writes them for a run that was stopped): the commit, a digest of the group's definition, the
counts per module, the judging time, and the names of the mutants that survived, had no
test or are not judged yet. Commit the record: ``build/`` does not outlive a checkout and a
long group outlives a working session, so the check reads the record, and ``--resume`` in a
checkout without the scratch copy judges the record's open mutants in a new one (at any
commit where the record's verdicts still hold) and adds their verdicts to it. ``--reopen``,
once new test files were written for a record's survivors, judges only its survivors and
untested mutants again (a kill holds: new files take no test away) and records the verdicts
at the new commit. ``--carry``, once tests the record was judged with were changed (their
bodies only), carries its verdicts to the new commit by judging again only what the change
can turn (``carry``).

The Makefile (``make mutants``) holds the group list; this script only runs and reads.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "mutants"
RECORDS = ROOT / "docs" / "mutants"
# What the tests read besides themselves (docs/ and examples/ are opened by some tests).
COPIED = ("src", "tests", "docs", "examples")
# mutmut's exit codes (mutmut/stats.py), folded into the table's columns.
STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", 24: "timeout",
          -24: "timeout", 152: "timeout", 255: "timeout", 33: "no tests", 5: "no tests",
          34: "skipped", 37: "killed"}


@dataclass
class Verdicts:
    """What one run of a group judged, at which commit, under which group definition."""

    commit: str
    definition: str  # sha256 of the group's generated pyproject.toml
    modules: dict[str, Counter[str]]
    seconds: float  # the workers' time running the mutants' tests, over every part of the run
    survived: list[str] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    #: The commits and changed tests the verdicts were carried over (``carry``), oldest first.
    carried: list[dict[str, object]] = field(default_factory=list)

    @property
    def open(self) -> int:
        return sum(counts["not judged"] for counts in self.modules.values())

    def record(self) -> str:
        return json.dumps({
            "commit": self.commit, "definition_sha256": self.definition,
            "judging_seconds": round(self.seconds, 1),
            "modules": {name: {status: n for status, n in sorted(counts.items()) if n}
                        for name, counts in self.modules.items()},
            "survived": self.survived, "no_tests": self.untested, "not_judged": self.unjudged,
            **({"carried": self.carried} if self.carried else {}),
        }, indent=1, ensure_ascii=False) + "\n"

    def reopened(self, at: str) -> Verdicts:
        """These verdicts at ``at``, with the mutants that survived or had no test open again."""
        modules = {}
        for name, counts in self.modules.items():
            modules[name] = fresh = Counter(counts)
            fresh["not judged"] += fresh.pop("survived", 0) + fresh.pop("no tests", 0)
        return Verdicts(at, self.definition, modules, self.seconds, [], [],
                        self.unjudged + self.survived + self.untested, self.carried)

    def add(self, later: dict[str, dict[str, str]], seconds: float) -> Verdicts:
        """These verdicts with what ``later`` (a run of this group's open mutants, at a tree
        where these verdicts hold: the same mutants) judged of the mutants open here."""
        open_ = set(self.unjudged)
        modules = {name: Counter(counts) for name, counts in self.modules.items()}
        judged: dict[str, str] = {}
        for module, statuses in later.items():
            for name, status in statuses.items():
                if name in open_ and status != "not judged":
                    modules[module]["not judged"] -= 1
                    modules[module][status] += 1
                    judged[name] = status
        return Verdicts(
            self.commit, self.definition, modules, self.seconds + seconds,
            self.survived + [n for n, status in judged.items() if status == "survived"],
            self.untested + [n for n, status in judged.items() if status == "no tests"],
            [name for name in self.unjudged if name not in judged], self.carried)


def selection_of(tests: list[str], deselect: list[str]) -> list[str]:
    """pytest's arguments for ``tests`` without the ``deselect`` ones."""
    return tests + [arg for node in deselect for arg in ("--deselect", node)]


def digest(pyproject: str) -> str:
    return hashlib.sha256(pyproject.encode()).hexdigest()


def of_run(work: Path) -> Verdicts | None:
    """The verdicts of the run in a group's scratch copy (``None``: none was started), with
    those of the record it was resumed from (``base.json``)."""
    if not (work / "commit").exists() or not (work / "pyproject.toml").exists():
        return None
    statuses = statuses_in(work)
    base = of_record(work / "base.json")
    if base is not None:
        return base.add(statuses, judging_seconds_in(work))
    names: dict[str, list[str]] = {"survived": [], "no tests": [], "not judged": []}
    for module in statuses.values():
        for name, status in module.items():
            if status in names:
                names[status].append(name)
    return Verdicts(commit_of(work), digest((work / "pyproject.toml").read_text()),
                    {module: Counter(s.values()) for module, s in statuses.items()},
                    judging_seconds_in(work), names["survived"], names["no tests"],
                    names["not judged"])


def of_record(path: Path) -> Verdicts | None:
    """The verdicts a finished run left in ``docs/mutants/`` (``None``: none is there)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Verdicts(data["commit"], data["definition_sha256"],
                        {name: Counter(counts) for name, counts in data["modules"].items()},
                        data["judging_seconds"], data["survived"], data["no_tests"],
                        data.get("not_judged", []), data.get("carried", []))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # Written only by this script; a merge or a hand edit can still break one.
        sys.exit(f"mutants: {path}: not a record this script wrote ({type(error).__name__}: "
                 f"{error}); restore it from git or run the group again")


def toml_value(value: object) -> str:
    """The TOML spelling of the scalars and string lists mutmut's table uses."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | list):
        return json.dumps(value)  # JSON strings and string arrays are valid TOML
    raise TypeError(f"unsupported value in [tool.mutmut]: {value!r}")


def group_pyproject(mutate: list[str], tests: list[str], skip: list[str] | None = None) -> str:
    """The project's pyproject.toml with its [tool.mutmut] table narrowed to one group."""
    text = (ROOT / "pyproject.toml").read_text()
    settings = dict(tomllib.loads(text).get("tool", {}).get("mutmut", {}))
    settings["only_mutate"] = mutate
    if skip:
        settings["do_not_mutate"] = [*settings.get("do_not_mutate", []), *skip]
    settings["pytest_add_cli_args_test_selection"] = tests
    # The selection plugin (scripts/mutant_tests.py) sits at the root of mutmut's copy.
    settings["also_copy"] = [*settings.get("also_copy", []), "conftest.py"]
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            kept.append(line)
    table = "\n".join(f"{key} = {toml_value(value)}" for key, value in settings.items())
    return "\n".join(kept) + "\n\n[tool.mutmut]\n" + table + "\n"


def run(group: str, mutate: list[str], tests: list[str], deselect: list[str],
        max_children: int, mutants: list[str], postgres: bool = False,
        skip: list[str] | None = None, resume: bool = False, check: bool = False,
        reopen: bool = False, carried: list[str] | None = None) -> int:
    for pattern in [*mutate, *(skip or [])]:
        if not any(fnmatch.fnmatch(str(p.relative_to(ROOT)), pattern)
                   for p in (ROOT / "src").rglob("*.py")):
            sys.exit(f"mutants: {group}: {pattern!r} matches no file (moved? update the Makefile)")
    for path in tests + deselect:
        if not (ROOT / path.split("::")[0]).exists():
            sys.exit(f"mutants: {group}: test path {path!r} does not exist")
    work = WORK / group
    selection = selection_of(tests, deselect)
    pyproject = group_pyproject(mutate, selection, skip)
    if check:
        recorded = of_record(RECORDS / f"{group}.json")
        problem = stale(recorded, pyproject, tests)
        print(f"mutants: {group}: " + (problem or f"the verdicts of {recorded and recorded.commit}"
                                                  f" hold at {commit()} (nothing they depend on "
                                                  "changed)"))
        return 1 if problem else 0
    if carried:
        return carry(group, mutate, tests, deselect, max_children, carried, postgres, skip or [])
    # The sqlite variants only: mutants are judged by the in-process suite, not by CI's matrix;
    # a group whose code runs only on PostgreSQL (the store's) keeps the URL with --postgres.
    dropped = ("CI",) if postgres else ("CI", "IOBRIDGE_TEST_POSTGRES_URL")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    started = time.monotonic()
    base: Verdicts | None = None
    if reopen:
        base = of_record(RECORDS / f"{group}.json")
        now = commit()
        why = ("the tree has changes not committed (a verdict must name its commit)"
               if now.endswith("+changes") else
               stale(base, pyproject, tests, open_ok=True, new_tests_ok=True))
        if base is None or why:
            sys.exit(f"mutants: {group}: cannot reopen docs/mutants/{group}.json: {why}")
        print(f"mutants: {group}: judging again the {len(base.survived) + len(base.untested)} "
              f"mutants that survived or had no test at {base.commit}, at {now}")
        base = base.reopened(now)
    elif resume:
        # mutmut keeps every verdict it reached and judges only the mutants still open.
        problem = resumable(work)
        if problem is None:
            print(f"mutants: {group}: resuming the run at {commit_of(work)}")
        else:
            # No run to go on with here (a new checkout): the record's open mutants, anew.
            base = of_record(RECORDS / f"{group}.json")
            why = stale(base, pyproject, tests, open_ok=True) or (
                None if base is None or base.unjudged else "no mutant is left to judge")
            if base is None or why:
                sys.exit(f"mutants: {group}: cannot resume: {problem}; docs/mutants/{group}"
                         f".json: {why}")
            print(f"mutants: {group}: judging the {len(base.unjudged)} mutants the run at "
                  f"{base.commit} left open (docs/mutants/{group}.json)")
    if not resume or base is not None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        ignore = shutil.ignore_patterns("__pycache__", "node_modules", ".hypothesis", "*.pyc")
        for name in COPIED:
            shutil.copytree(ROOT / name, work / name, ignore=ignore)
        (work / "pyproject.toml").write_text(pyproject)
        shutil.copy(ROOT / "scripts" / "mutant_tests.py", work / "conftest.py")
        code = measure(work, mutate, selection, env)
        if code != 0:
            print(f"mutants: {group}: the unmutated tests failed (pytest exited {code})")
            return code
        print(f"mutants: {group}: statement coverage per test measured in "
              f"{time.monotonic() - started:.0f} s")
        (work / "commit").write_text(commit() + "\n")
        if base is not None:
            (work / "base.json").write_text(base.record(), encoding="utf-8")
    sample = bool(mutants)  # a sample's verdicts are not the group's: not recorded
    base = of_record(work / "base.json")
    if base is not None:
        # mutmut judges every mutant it is not given by name: give it the record's open ones.
        judged = {name for statuses in statuses_in(work).values()
                  for name, status in statuses.items() if status != "not judged"}
        mutants = [name for name in base.unjudged if name not in judged]
    code = 0
    if base is None or mutants:
        mutmut = Path(sys.executable).with_name("mutmut")
        code = subprocess.call([str(mutmut), "run", "--max-children", str(max_children),
                                *mutants], cwd=work, env=env)
        print(f"mutants: {group}: mutmut exited {code} after "
              f"{time.monotonic() - started:.0f} s")
    # A run mutmut could not finish (its clean tests failed) is not recorded over the last
    # one; a run that was stopped is recorded with `record`.
    if not sample and code == 0:
        record(group)
    return code


#: The statuses of a mutant whose tests failed (a timeout counts as killed, as in the score).
FAILED = ("killed", "timeout")


def carry(group: str, mutate: list[str], tests: list[str], deselect: list[str],
          max_children: int, nodes: list[str], postgres: bool, skip: list[str]) -> int:
    """Carry the group's record to the commit checked out, where only the bodies of the
    tests ``nodes`` (``file::function``) changed since its run.

    A mutant is killed when one of the tests mutmut runs for it (the selection's tests that
    execute its lines) fails; the other tests are the same, so a verdict can turn only where
    the changed tests fail differently. They are run alone against every mutant, as they are
    now (``<group>.changed``) and, where a recorded kill is not a failure of theirs, as they
    were (``<group>.before``, in a worktree at the record's commit). A kill the old tests did
    not make came from another test and holds; a survivor the new tests kill is killed; the
    rest (a kill that was theirs and is not, a line they newly run, a status that is none
    of these) is judged again with the whole selection (``<group>.carried``). A timeout is
    a failure, as in mutmut's verdicts (its limit is CPU time, which load does not spend)."""
    selection = selection_of(tests, deselect)
    base = of_record(RECORDS / f"{group}.json")
    now = commit()
    why = ("the tree has changes not committed (a verdict must name its commit)"
           if now.endswith("+changes") else
           stale(base, group_pyproject(mutate, selection, skip), tests,
                 carried=frozenset(node.split("::")[0] for node in nodes)))
    if base is None or why or (why := bodies_only(base.commit, nodes)):
        sys.exit(f"mutants: {group}: cannot carry docs/mutants/{group}.json: {why}")
    changed, seconds = sampled(f"{group}.changed", mutate, nodes, [], max_children, postgres,
                               skip)
    now_statuses = flat(changed)
    recorded = {**{n: "survived" for n in base.survived}, **{n: "no tests" for n in base.untested}}
    suspects, again, turned = [], [], {}
    for name, status in now_statuses.items():
        was = recorded.get(name, "killed")  # or a timeout: the record names survivors only
        if was == "killed" and status not in FAILED:
            suspects.append(name)
        elif was == "survived" and status in FAILED:
            turned[name] = status
        elif status not in (*FAILED, "survived", "no tests") or (
                was == "no tests" and status != "no tests"):
            again.append(name)
    if suspects:
        before, part = sampled_before(group, base.commit, mutate, nodes, suspects,
                                      max_children, postgres, skip)
        seconds += part
        again += [name for name in suspects if before[name] not in ("survived", "no tests")]
    if again:
        full, part = sampled(f"{group}.carried", mutate, tests, deselect, max_children,
                             postgres, skip, again)
        seconds += part
        turned |= {name: status for name, status in flat(full).items() if name in again
                   and not (recorded.get(name, "killed") == "killed" and status in FAILED)
                   and recorded.get(name) != status}  # else it held after all
    modules = {module: Counter(counts) for module, counts in base.modules.items()}
    module_of = {name: module for module, statuses in changed.items() for name in statuses}
    survived, untested = set(base.survived), set(base.untested)
    for name, status in turned.items():
        was = recorded.get(name, "killed")
        counts = modules[module_of[name]]
        if was == "killed" and not counts["killed"]:
            was = "timeout"  # the record does not say which kills were timeouts
        counts[was] -= 1
        counts[status] += 1
        survived.discard(name)
        untested.discard(name)
        if status == "survived":
            survived.add(name)
        elif status == "no tests":
            untested.add(name)
    note = {"from": base.commit, "tests": nodes, "judged_alone": len(now_statuses),
            "judged_as_before": len(suspects), "judged_again": len(again),
            "turned": {name: f"{recorded.get(name, 'killed')} -> {status}"
                       for name, status in sorted(turned.items())}}
    carried = Verdicts(now, base.definition, modules, base.seconds + seconds,
                       sorted(survived), sorted(untested), [], [*base.carried, note])
    (RECORDS / f"{group}.json").write_text(carried.record(), encoding="utf-8")
    print(f"mutants: {group}: verdicts of {base.commit} carried to {now}: {len(now_statuses)} "
          f"mutants judged by the changed tests alone, {len(suspects)} by them as they were, "
          f"{len(again)} again in full; {len(turned)} turned (docs/mutants/{group}.json)")
    return 0


def bodies_only(at: str, nodes: list[str]) -> str | None:
    """Why the files of ``nodes`` differ from ``at`` in more than those module-level test
    functions (``None``: they do not)."""
    by_file: dict[str, set[str]] = {}
    for node in nodes:
        path, _, name = node.partition("::")
        if not name or "::" in name or "[" in name:
            return f"{node!r} is not file::function"
        by_file.setdefault(path, set()).add(name)
    for path, names in by_file.items():
        trees = [ast.parse(source) for source in (
            subprocess.run(["git", "show", f"{at}:{path}"], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout,
            (ROOT / path).read_text(encoding="utf-8"))]
        for tree in trees:
            functions = {node.name for node in tree.body
                         if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
            if names - functions:
                return f"{path} has no test {', '.join(sorted(names - functions))} at both"
            tree.body = [node for node in tree.body if getattr(node, "name", None) not in names]
        if ast.dump(trees[0]) != ast.dump(trees[1]):
            return f"{path} changed outside {', '.join(sorted(names))} since {at}"
    return None


def sampled(name: str, mutate: list[str], tests: list[str], deselect: list[str],
            max_children: int, postgres: bool, skip: list[str],
            mutants: list[str] | None = None) -> tuple[dict[str, dict[str, str]], float]:
    """The statuses of a sample run in this tree, ``mutants`` (default all) judged by
    ``tests``, and its judging time. A finished run of all in ``build/mutants/<name>`` is
    reused while nothing it depends on changed."""
    work = WORK / name
    selection = selection_of(tests, deselect)
    if mutants is None and (work / "commit").exists() and (work / "pyproject.toml").exists():
        at = commit_of(work)
        statuses = flat(statuses_in(work))
        if (not at.endswith("+changes") and not changed_since(at, tests) and statuses
                and "not judged" not in statuses.values()
                and (work / "pyproject.toml").read_text() == group_pyproject(
                    mutate, selection, skip)):
            print(f"mutants: {name}: the run at {at} holds (reused)")
            return statuses_in(work), judging_seconds_in(work)
    code = run(name, mutate, tests, deselect, max_children, mutants or ["*"], postgres, skip)
    if code != 0:
        sys.exit(f"mutants: {name}: the sample run failed ({code})")
    return statuses_in(work), judging_seconds_in(work)


def sampled_before(group: str, at: str, mutate: list[str], nodes: list[str],
                   mutants: list[str], max_children: int, postgres: bool,
                   skip: list[str]) -> tuple[dict[str, str], float]:
    """Each of ``mutants``' status judged by the tests ``nodes`` as they were at ``at`` (a
    worktree there, removed after, runs its own copy of this script), and the judging time."""
    tree = WORK / f"{group}.before-tree"

    def remove() -> None:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                       capture_output=True, check=False)

    remove()
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), at], cwd=ROOT,
                   capture_output=True, check=True)
    try:
        code = subprocess.call([
            sys.executable, str(tree / "scripts" / "mutants.py"), "run", f"{group}.before",
            "--mutate", *mutate, "--tests", *nodes, "--max-children", str(max_children),
            "--mutants", *mutants, *(["--postgres"] if postgres else []),
            *(["--skip", *skip] if skip else [])], cwd=tree)
        if code != 0:
            sys.exit(f"mutants: {group}.before: the sample run at {at} failed ({code})")
        work = tree / "build" / "mutants" / f"{group}.before"
        return flat(statuses_in(work)), judging_seconds_in(work)
    finally:
        remove()


def flat(statuses: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each mutant's status, over the modules."""
    return {name: status for module in statuses.values() for name, status in module.items()}


def record(group: str) -> int:
    """Write the verdicts of the group's run in this checkout to ``docs/mutants/``."""
    verdicts = of_run(WORK / group)
    if verdicts is None or not verdicts.modules:
        print(f"mutants: {group}: no run to record")
        return 1
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / f"{group}.json").write_text(verdicts.record(), encoding="utf-8")
    print(f"mutants: {group}: verdicts of the run at {verdicts.commit} ({verdicts.open} not "
          f"judged) recorded in docs/mutants/{group}.json (commit it)")
    return 0


def commit() -> str:
    """The commit the run judges: HEAD, with ``+changes`` when the tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
    # The records are the runs' output, read by no test.
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *COPIED, ":!docs/mutants"],
                           cwd=ROOT, text=True, capture_output=True, check=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def commit_of(work: Path) -> str:
    """The commit a group's run was started at."""
    return (work / "commit").read_text().strip()


def git(*args: str) -> list[str]:
    return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True,
                          check=True).stdout.split()


def stale(verdicts: Verdicts | None, pyproject: str, tests: list[str],
          open_ok: bool = False, new_tests_ok: bool = False,
          carried: frozenset[str] = frozenset()) -> str | None:
    """Why ``verdicts`` do not hold for the tree checked out now (``None``: they do), given
    the group's generated ``pyproject.toml`` and its tests. A verdict depends on the code
    (all of ``src/``: a mutant's fate can turn on code it calls), on the group's tests and
    the helpers under ``tests/`` they may import, on the selection plugin, and on the group's
    definition and ``pyproject.toml`` (both in the group's generated ``pyproject.toml``).
    Other groups' tests and the docs may change: so groups measured at different commits can
    all hold at one. ``open_ok``: mutants not judged yet are no reason; ``new_tests_ok``:
    nor are test files added since (they take no test away: every kill holds); ``carried``:
    nor are changes to these test files (``carry`` judges what they can turn)."""
    if verdicts is None:
        return "no run is recorded (run the group)"
    started_at = verdicts.commit
    if started_at.endswith("+changes"):
        return f"the run was of {started_at}: a tree with changes not committed"
    if verdicts.definition != digest(pyproject):
        return "the group's definition (Makefile) or pyproject.toml changed since the run"
    changed = changed_since(started_at, tests) - carried
    if new_tests_ok:
        changed -= {name for name in git("diff", "--name-only", "--diff-filter=A", started_at,
                                         "--", "tests")
                    if Path(name).name.startswith("test_")}
    if changed:
        return f"changed since the run at {started_at}: {', '.join(sorted(changed))}"
    if verdicts.open and not open_ok:
        return f"the run at {started_at} has {verdicts.open} mutants not judged (MUTANT_RESUME=1)"
    return None


def changed_since(started_at: str, tests: list[str]) -> set[str]:
    """What a verdict of ``started_at`` judged with ``tests`` depends on and the tree checked
    out changed since: ``src/``, the selection plugin, those tests, the helpers under
    ``tests/``."""
    paths = ["src", "scripts/mutant_tests.py", *dict.fromkeys(t.split("::")[0] for t in tests)]
    changed = {*git("diff", "--name-only", started_at, "--", *paths),
               *git("ls-files", "--others", "--exclude-standard", "--", *paths)}
    return changed | {
        name for name in (*git("diff", "--name-only", started_at, "--", "tests"),
                          *git("ls-files", "--others", "--exclude-standard", "--", "tests"))
        if name.endswith(".py") and not Path(name).name.startswith("test_")}


def resumable(work: Path) -> str | None:
    """Why the run in ``work`` cannot go on (``None``: it can): it must have been measured
    and started, at the commit checked out now with no changes."""
    if not (work / "commit").exists() or not (work / "mutants").is_dir():
        return "no run was started (run it without --resume)"
    started_at, now = commit_of(work), commit()
    if now.endswith("+changes"):
        return "the tree has changes not committed (a verdict must name its commit)"
    if started_at != now:
        return f"it was started at {started_at}, the tree is at {now}"
    return None


def measure(work: Path, mutate: list[str], selection: list[str], env: dict[str, str]) -> int:
    """One unmutated run of the group's tests recording which test executes which line
    (``mutant_tests.py``), which mutmut's runs then narrow each mutant's tests with."""
    files = {p.parent for pattern in mutate for p in work.glob(pattern)}
    env = dict(env, PYTHONPATH=str(work / "src"), IOBRIDGE_MUTANT_COVERAGE=str(
        work / "mutant-lines.json"), IOBRIDGE_MUTANT_COVERAGE_SOURCE=os.pathsep.join(
        str(p) for p in sorted(files)))
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-x", *selection], cwd=work, env=env, stdout=subprocess.DEVNULL)


def statuses_in(work: Path) -> dict[str, dict[str, str]]:
    """Each mutant's status per mutated source file, from mutmut's ``.meta`` files."""
    base = work / "mutants"
    statuses: dict[str, dict[str, str]] = {}
    for meta in sorted(base.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            statuses[str(meta.relative_to(base))[: -len(".meta")]] = {
                name: "not judged" if code is None else STATUS.get(code, "suspicious")
                for name, code in codes.items()}
    return statuses


def judging_seconds_in(work: Path) -> float:
    """The time mutmut's workers spent running tests against the group's mutants, over
    every part of a resumed run (wall time is about this over the worker count)."""
    return sum(sum(json.loads(meta.read_text()).get("durations_by_key", {}).values())
               for meta in (work / "mutants").rglob("*.py.meta"))


def report(groups: list[str]) -> int:
    columns = ("killed", "survived", "timeout", "no tests", "other")
    header = f"{'module':<44}" + "".join(f"{c:>9}" for c in columns) + f"{'total':>7}{'killed':>9}"
    print(header)
    print("-" * len(header))
    missing = 0
    for group in groups:
        # The scratch copy's run (perhaps still going), else the recorded one.
        verdicts, source = of_run(WORK / group), "this checkout's run"
        if verdicts is None or not verdicts.modules:
            verdicts, source = of_record(RECORDS / f"{group}.json"), f"docs/mutants/{group}.json"
        if verdicts is None or not verdicts.modules:
            print(f"{group}: no results (run `make mutants` first)")
            missing += 1
            continue
        group_total: Counter[str] = Counter()
        for module, counts in verdicts.modules.items():
            group_total.update(counts)
            print(row(module.removeprefix("src/iobridge/"), counts, columns))
        print(row(f"= {group}", group_total, columns))
        print(f"  at {verdicts.commit} ({source}); "
              f"the mutants' tests ran for {verdicts.seconds:.0f} s in all")
        print()
    return 1 if missing else 0


def row(name: str, counts: Counter[str], columns: tuple[str, ...]) -> str:
    known = {"killed", "survived", "timeout", "no tests"}
    values = {c: counts[c] for c in columns[:-1]}
    values["other"] = sum(n for status, n in counts.items() if status not in known)
    total = sum(counts.values())
    # A timeout counts as killed (the mutant hung the tests), as mutmut's own score does.
    score = 100 * (counts["killed"] + counts["timeout"]) / total if total else 0.0
    return (f"{name:<44}" + "".join(f"{values[c]:>9}" for c in columns)
            + f"{total:>7}{score:>8.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="mutation-test one module group")
    run_parser.add_argument("group")
    run_parser.add_argument("--mutate", nargs="+", required=True, help="globs under src/")
    run_parser.add_argument("--tests", nargs="+", required=True, help="pytest paths")
    run_parser.add_argument("--deselect", nargs="*", default=[],
                            help="test node ids left out (too slow for every mutant)")
    run_parser.add_argument("--max-children", type=int, default=1)
    run_parser.add_argument("--mutants", nargs="*", default=[],
                            help="only these mutants (names or fnmatch patterns; a sample)")
    run_parser.add_argument("--postgres", action="store_true",
                            help="keep IOBRIDGE_TEST_POSTGRES_URL (PostgreSQL variants run)")
    run_parser.add_argument("--resume", action="store_true",
                            help="go on with this group's unfinished run (same commit only)")
    run_parser.add_argument("--reopen", action="store_true",
                            help="judge the record's survivors and untested mutants again "
                                 "with the test files added since")
    run_parser.add_argument("--carry", nargs="+", default=[], metavar="NODE",
                            help="carry the record's verdicts over these changed tests "
                                 "(file::function; only their bodies changed)")
    run_parser.add_argument("--check", action="store_true",
                            help="only say whether the group's verdicts hold for this tree")
    run_parser.add_argument("--skip", nargs="*", default=[],
                            help="globs under src/ that --mutate matches but are not mutated "
                                 "(code mutmut cannot judge; say why in the Makefile)")
    record_parser = sub.add_parser("record", help="write a stopped run's verdicts to docs/")
    record_parser.add_argument("group")
    report_parser = sub.add_parser("report", help="print the per-module score table")
    report_parser.add_argument("groups", nargs="+")
    args = parser.parse_args()
    if args.command == "run":
        return run(args.group, args.mutate, args.tests, args.deselect, args.max_children,
                   args.mutants, args.postgres, args.skip, args.resume, args.check,
                   args.reopen, args.carry)
    if args.command == "record":
        return record(args.group)
    return report(args.groups)


if __name__ == "__main__":
    sys.exit(main())
