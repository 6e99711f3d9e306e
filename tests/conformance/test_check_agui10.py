"""The AG-UI 1.0 graders of ``iobridge check`` on their own: capabilities against the closed 1.0
schema, and subagent attribution in a stream."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.conformance.check.agui10 import capability_problems, subagent_problem


def test_a_full_declaration_validates() -> None:
    assert capability_problems({
        "identity": {"name": "a", "metadata": {"anything": [1]}},
        "tools": {"supported": True, "items": [{"name": "t", "description": "d",
                                                "parameters": {"type": "object", "x": 1}}]},
        "multiAgent": {"subagents": [{"name": "helper", "description": "helps"}]},
        "multimodal": {"input": {"image": True, "pdf": False}, "output": {"audio": False}},
        "execution": {"maxIterations": 5},
        "custom": {"vendor": {"deep": True}},
    }) == []


@pytest.mark.parametrize(("declared", "says"), [
    ({"tols": {}}, "unknown member tols"),
    ({"multimodal": {"input": {"pdff": True}}}, "unknown member multimodal.input.pdff"),
    ({"tools": {"supported": "yes"}}, "tools.supported"),
    ({"multiAgent": {"subagents": [{"description": "nameless"}]}}, "multiAgent.subagents.0.name"),
    ({"execution": {"maxExecutionTime": -1}}, "execution.maxExecutionTime"),
    ("everything", "not an object"),
])
def test_a_broken_declaration_is_named(declared: Any, says: str) -> None:
    assert any(says in problem for problem in capability_problems(declared)), (
        capability_problems(declared))


def started(run: str, **extra: Any) -> dict[str, Any]:
    return {"type": "SUBAGENT_STARTED", "subagentRunId": run, "name": "h", **extra}


def finished(run: str) -> dict[str, Any]:
    return {"type": "SUBAGENT_FINISHED", "subagentRunId": run}


def step(run: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "STEP_STARTED", "stepName": "s"}
    if run is not None:
        event["subagentRunId"] = run
    return event


RUN = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}


def test_attribution_inside_nested_subagents_passes() -> None:
    assert subagent_problem([RUN, started("a"), step("a"), started("b", parentSubagentRunId="a"),
                             step("b"), finished("b"), step("a"), finished("a"), step(),
                             {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}]) is None


@pytest.mark.parametrize(("events", "index", "says"), [
    ([RUN, step("a")], 1, "'a', which is not open"),
    ([RUN, started("a"), finished("a"), step("a")], 3, "not open"),
    ([RUN, started("a"), finished("a"), started("a")], 3, "started twice"),
    ([RUN, started("b", parentSubagentRunId="x")], 1, "parent subagent run 'x'"),
    ([RUN, finished("a")], 1, "which is not open"),
    ([RUN, started("a"), {"type": "RUN_FINISHED", "subagentRunId": "a"}], 2, "run-scoped"),
    ([RUN, started("a"), {"type": "MESSAGES_SNAPSHOT", "messages": [], "subagentRunId": "a"}],
     2, "run-scoped"),
])
def test_attribution_breaks_are_found_at_their_event(
    events: list[dict[str, Any]], index: int, says: str
) -> None:
    found = subagent_problem(events)
    assert found is not None and found[0] == index and says in found[1], found
