"""Check results and their three renderings: a Rich table, JSON and JUnit XML.

A result names the rule it grades (an id such as ``L1.terminal-last`` and the spec section it
comes from), its outcome, and on failure what was wrong and the first offending event, so a
failure can be read without re-running the check.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Failed", "Outcome", "Report", "Result", "render_table", "to_json", "to_junit"]

#: Characters of an offending event kept in a report (a huge event stays readable).
MAX_EVENT_CHARS = 2000


class Failed(Exception):
    """A step of a multi-step check went wrong: what, and the response or event that shows it."""

    def __init__(self, detail: str, event: Any = None) -> None:
        super().__init__(detail)
        self.detail, self.event = detail, event


class Outcome(StrEnum):
    """How one rule fared."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Result:
    """One graded rule."""

    rule: str
    level: str
    spec: str
    title: str
    outcome: Outcome
    detail: str = ""
    #: The first offending event (or response), as the backend sent it.
    event: Any = None


def _clip(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= MAX_EVENT_CHARS else text[:MAX_EVENT_CHARS] + "…"


@dataclass(slots=True)
class Report:
    """Every result of one ``iobridge check`` run, in the order they were graded."""

    target: str
    results: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> Result:
        self.results.append(result)
        return result

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if r.outcome is Outcome.FAILED]

    @property
    def ok(self) -> bool:
        """True when nothing failed (skips are not failures, and are listed)."""
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {o.value: sum(1 for r in self.results if r.outcome is o) for o in Outcome}


def to_json(report: Report) -> dict[str, Any]:
    """The report as one JSON object (``--json``)."""
    return {
        "target": report.target,
        "ok": report.ok,
        "counts": report.counts(),
        "results": [
            {
                "rule": r.rule,
                "level": r.level,
                "spec": r.spec,
                "title": r.title,
                "outcome": r.outcome.value,
                **({"detail": r.detail} if r.detail else {}),
                **({"event": _clip(r.event)} if r.event is not None else {}),
            }
            for r in report.results
        ],
    }


def to_junit(report: Report) -> bytes:
    """JUnit XML: one test suite per level, one test case per rule (``--junit FILE``)."""
    suites = ET.Element("testsuites", name=f"iobridge check {report.target}")
    by_level: dict[str, list[Result]] = {}
    for result in report.results:
        by_level.setdefault(result.level, []).append(result)
    for level, results in by_level.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=level,
            tests=str(len(results)),
            failures=str(sum(r.outcome is Outcome.FAILED for r in results)),
            skipped=str(sum(r.outcome is Outcome.SKIPPED for r in results)),
        )
        for r in results:
            case = ET.SubElement(suite, "testcase", classname=level, name=f"{r.rule}: {r.title}")
            if r.outcome is Outcome.FAILED:
                failure = ET.SubElement(case, "failure", message=f"[{r.spec}] {r.detail}")
                if r.event is not None:
                    failure.text = json.dumps(_clip(r.event), ensure_ascii=False, default=str)
            elif r.outcome is Outcome.SKIPPED:
                ET.SubElement(case, "skipped", message=r.detail)
    return bytes(ET.tostring(suites, encoding="utf-8", xml_declaration=True))


def render_table(report: Report) -> Any:
    """A Rich table of the results (imported lazily: only the CLI renders)."""
    from rich.table import Table
    from rich.text import Text

    styles = {Outcome.PASSED: "green", Outcome.FAILED: "bold red", Outcome.SKIPPED: "yellow"}
    counts = report.counts()
    table = Table(
        title=f"iobridge check {report.target}",
        caption=", ".join(f"{n} {name}" for name, n in counts.items()),
        show_lines=False,
    )
    for column in ("rule", "outcome"):
        table.add_column(column, no_wrap=True)
    table.add_column("spec", overflow="fold", ratio=1)
    table.add_column("check", overflow="fold", ratio=2)
    for r in report.results:
        text = r.title + (f"\n{r.detail}" if r.detail else "")
        if r.outcome is Outcome.FAILED and r.event is not None:
            text += "\nfirst offending: " + json.dumps(_clip(r.event), ensure_ascii=False)
        table.add_row(Text(r.rule), Text(r.outcome.value, style=styles[r.outcome]),
                      Text(r.spec.removeprefix("io-agent-protocol: ")), Text(text))
    return table
