"""Per-mutant test selection for ``make mutants``: a pytest plugin with two roles.

mutmut runs, for a mutant, every test that called the mutated *function*, in no particular
order, until one fails. A mutant on an error branch of ``Runtime.start`` is thus judged by
the hundred tests that start a run, although only the two that take that branch can see it,
and a survivor costs the whole hundred. This plugin narrows that to the tests that executed
the mutated *statement*, likeliest killers first:

- **Measuring** (``IOBRIDGE_MUTANT_COVERAGE=<file>``): ``scripts/mutants.py`` runs the
  group's tests once, unmutated, under coverage with one context per test (set for every
  thread, so the code a loopback server runs on its own thread counts for the test that
  drove it), and this writes ``{source file: {line: [test ids]}}`` to ``<file>``.
- **Selecting** (inside mutmut's run of one mutant, ``MUTANT_UNDER_TEST`` names it): the
  plugin finds the lines the mutant changed (its copy against the ``__mutmut_orig`` copy in
  mutmut's mutated file), widens each to its whole statement in the original source, keeps
  the collected tests that executed any of those lines, and orders them: first the tests
  that killed other mutants of the same function, then of the same file (each kill is
  appended to ``mutant-kills.jsonl``, shared by mutmut's workers), then the fastest by the
  durations mutmut measured. Each test gets a timeout of ten times its unmutated duration
  (five seconds at least; ``IOBRIDGE_MUTANT_TIMEOUT_FACTOR`` sets the factor), so a mutant
  that hangs one fails it at once. A test that never reaches the changed statement runs
  exactly as it does unmutated, so it cannot kill the mutant: dropping it changes no
  verdict, only the time.
  With no such test left the run collects nothing, which mutmut records as "no tests" (not
  killed). A change in the signature (a default value), a copy that does not line up, a
  file the measurement does not know, or a statement only run outside any test (at import,
  as a route decorator's arguments: each mutant's test process imports the module afresh)
  keeps all of mutmut's tests.

``scripts/mutants.py`` installs this file as the scratch project's root ``conftest.py``.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

COVERAGE_ENV = "IOBRIDGE_MUTANT_COVERAGE"
LINES_FILE = "mutant-lines.json"  # written next to this conftest by scripts/mutants.py
KILLS_FILE = "mutant-kills.jsonl"  # which test killed a mutant of which function
# A test runs under a mutant for at most TIMEOUT_FACTOR times its unmutated duration, and
# never less than MIN_TIMEOUT seconds: a mutant that hangs it fails it then.
# ``IOBRIDGE_MUTANT_TIMEOUT_FACTOR`` lowers the factor for a group whose mutants hang many
# tests (the cluster's mirror loop: a hang costs its test's whole timeout).
TIMEOUT_FACTOR = float(os.environ.get("IOBRIDGE_MUTANT_TIMEOUT_FACTOR", "10"))
MIN_TIMEOUT = 5.0
_MARK = "__mutmut_"
#: The context of what runs outside any test (coverage's default, empty).
OUTSIDE = ""


# -- measuring ----------------------------------------------------------------------------


class _Measure:
    """Coverage with the running test's id as the context of every line it executes."""

    def __init__(self, out: Path, source: list[str]) -> None:
        import coverage

        self.out = out
        self.cov = coverage.Coverage(data_file=None, source=source, branch=False)
        self.cov.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.cov.switch_context(item.nodeid)
        yield
        self.cov.switch_context("")

    def pytest_unconfigure(self) -> None:
        self.cov.stop()
        data = self.cov.get_data()
        root = Path.cwd()
        lines: dict[str, dict[str, list[str]]] = {}
        for path in data.measured_files():
            by_line = data.contexts_by_lineno(path)
            # A line only run outside every test (at import: a decorator's arguments) keeps
            # the empty context, OUTSIDE: every test process runs it when it imports.
            tests = {str(n): sorted(c for c in ctx if c) or sorted(set(ctx) & {OUTSIDE})
                     for n, ctx in by_line.items()}
            lines[str(Path(path).resolve().relative_to(root))] = {
                n: t for n, t in tests.items() if t}
        self.out.write_text(json.dumps(lines))


# -- selecting ----------------------------------------------------------------------------


def _split(mutant: str, root: Path) -> tuple[Path, list[str], str] | None:
    """``pkg.mod.xǁClsǁmeth__mutmut_3`` → (``pkg/mod.py``, [``Cls``, ``meth``], mangled)."""
    head, _, number = mutant.rpartition(_MARK)
    if not number.isdigit():
        return None
    module, _, mangled = head.rpartition(".")
    if mangled.startswith("xǁ"):
        names = mangled[2:].split("ǁ")
    elif mangled.startswith("x_"):
        names = [mangled[2:]]
    else:
        return None
    path = Path("src", *module.split("."))
    return (path / "__init__.py" if (root / path).is_dir() else path.with_suffix(".py")), \
        names, head


def _copy(lines: list[str], start: int) -> list[str]:
    """The function copy whose ``def`` is ``lines[start]``: up to the first line indented
    less than the ``def``, or as much but not closing its signature (``) -> T:``)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines):
        text = lines[end]
        depth = len(text) - len(text.lstrip())
        closing = depth == indent and text.lstrip().startswith(")")
        if text.strip() and depth <= indent and not closing:
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _def_line(lines: list[str], name: str) -> int | None:
    for prefix in ("def ", "async def "):
        needle = f"{prefix}{name}("
        for index, text in enumerate(lines):
            if text.lstrip().startswith(needle):
                return index
    return None


def _function(tree: ast.Module, names: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    body: list[ast.stmt] = tree.body
    found: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for name in names:
        found = next((n for n in body if isinstance(n, ast.ClassDef | ast.FunctionDef
                                                     | ast.AsyncFunctionDef)
                      and n.name == name), None)
        if found is None:
            return None
        body = found.body
    return found if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _statement_lines(function: ast.AST, line: int) -> range | None:
    """The lines of the innermost statement holding ``line`` (a compound statement's
    header only); None when ``line`` is in the signature or outside any statement."""
    holding = [node for node in ast.walk(function) if isinstance(node, ast.stmt)
               and node is not function and node.end_lineno is not None
               and node.lineno <= line <= node.end_lineno]
    # Nested statements start at or after their parent: the innermost starts last.
    best = max(holding, key=lambda n: (n.lineno, -(n.end_lineno or n.lineno)), default=None)
    if best is None:
        return None
    end = best.end_lineno or best.lineno
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        inner = getattr(best, field, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.AST):
            first = getattr(inner[0], "lineno", None)
            if isinstance(first, int) and best.lineno <= line < first:
                end = min(end, first - 1)
    return range(best.lineno, end + 1)


def changed_statement_lines(mutant: str, root: Path, mutated_root: Path) -> set[int] | None:
    """The lines of ``root``'s source whose execution a test needs to see ``mutant`` (in
    mutmut's copy under ``mutated_root``); None when they cannot be told."""
    split = _split(mutant, root)
    if split is None:
        return None
    relative, names, head = split
    original_path = root / relative
    mutated_path = mutated_root / relative
    if not original_path.is_file() or not mutated_path.is_file():
        return None
    mangled = head.rpartition(".")[2]
    mutated = mutated_path.read_text().splitlines()
    at_orig, at_mutant = _def_line(mutated, mangled + "__mutmut_orig"), _def_line(
        mutated, mutant.rpartition(".")[2])
    original_text = original_path.read_text()
    function = _function(ast.parse(original_text), names)
    if at_orig is None or at_mutant is None or function is None:
        return None
    source = original_text.splitlines()[function.lineno - 1:(function.end_lineno or 0)]
    orig, changed = _copy(mutated, at_orig), _copy(mutated, at_mutant)
    if orig[1:] != source[1:]:
        return None  # the copy does not line up with the source the lines were measured on
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, orig[1:], changed[1:], autojunk=False)
    for tag, first, last, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        # A deletion or replacement changes orig[first:last]; an insertion lands before first.
        for offset in range(first, max(last, first + 1)):
            span = _statement_lines(function, function.lineno + 1 + min(offset, len(orig) - 2))
            if span is None:
                return None
            lines.update(span)
    body_start = function.body[0].lineno
    if not lines or min(lines) < body_start:
        return None  # the change is in the signature (or was not found): keep every test
    return lines


def reaching_tests(mutant: str, root: Path, mutated_root: Path) -> set[str] | None:
    """The tests that executed a statement ``mutant`` changes, from the measurement in
    ``root``; None when that cannot be told (then all of mutmut's tests run)."""
    measured = root / LINES_FILE
    split = _split(mutant, root)
    if split is None or not measured.is_file():
        return None
    lines = changed_statement_lines(mutant, root, mutated_root)
    by_line = json.loads(measured.read_text()).get(str(split[0]))
    if lines is None or by_line is None:
        return None
    reached = {test for n in lines for test in by_line.get(str(n), ())}
    return None if OUTSIDE in reached else reached


def _kills(root: Path, function: str, source: Path) -> tuple[Counter[str], Counter[str]]:
    """How often each test killed a mutant of ``function``, and of its source file."""
    same_function: Counter[str] = Counter()
    same_file: Counter[str] = Counter()
    path = root / KILLS_FILE
    for line in path.read_text().splitlines() if path.is_file() else ():
        kill = json.loads(line)
        if kill["function"] == function:
            same_function[kill["test"]] += 1
        if kill["source"] == str(source):
            same_file[kill["test"]] += 1
    return same_function, same_file


class _Select:
    def __init__(self, mutant: str, root: Path) -> None:
        self.mutant = mutant
        self.root = root
        split = _split(mutant, root)
        self.source = split[0] if split else Path()
        self.function = split[2] if split else mutant

    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        # mutmut runs pytest in its ``mutants/`` copy, next to its measured durations.
        stats = Path("mutmut-stats.json")
        durations: dict[str, float] = (json.loads(stats.read_text()).get("duration_by_test", {})
                                       if stats.is_file() else {})
        reaching = reaching_tests(self.mutant, self.root, Path.cwd())
        if reaching is not None:
            dropped = [item for item in items if item.nodeid not in reaching]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [item for item in items if item.nodeid in reaching]
        same_function, same_file = _kills(self.root, self.function, self.source)
        items.sort(key=lambda item: (-same_function[item.nodeid], -same_file[item.nodeid],
                                     durations.get(item.nodeid, 0.0)))
        for item in items:
            item.add_marker(pytest.mark.timeout(max(
                MIN_TIMEOUT, TIMEOUT_FACTOR * durations.get(item.nodeid, MIN_TIMEOUT))))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            line = json.dumps({"function": self.function, "source": str(self.source),
                               "test": report.nodeid}) + "\n"
            # One short O_APPEND write: whole lines, whichever worker writes at the same time.
            fd = os.open(self.root / KILLS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(COVERAGE_ENV)
    if out:
        source = [str(Path(p).resolve()) for p in os.environ.get(
            COVERAGE_ENV + "_SOURCE", "src").split(os.pathsep)]
        config.pluginmanager.register(_Measure(Path(out), source), "mutant-measure")
        return
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if _MARK in mutant:
        # cwd is mutmut's ``mutants/`` copy; the measured project is its parent.
        root = Path(__file__).resolve().parent
        root = root.parent if root.name == "mutants" else root
        config.pluginmanager.register(_Select(mutant, root), "mutant-select")
