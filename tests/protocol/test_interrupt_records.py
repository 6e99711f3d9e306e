"""Interrupt records and the check of ``resume`` (sans-IO), and ``RunContext.interrupt``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from iobridge.agents.context import MAX_INTERRUPT_SERIES, Interrupted, Resume, RunContext
from iobridge.errors import AgentError, InputError
from iobridge.protocol.guard import MAX_INTERRUPTS, LifecycleGuard
from iobridge.protocol.interrupts import check_resume, next_record

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def record(*ids: str, answered: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {"open": [{"id": i, "reason": "r", **extra} for i in ids],
            "answered": [{"interruptId": a, "status": "resolved"} for a in answered]}


def entry(interrupt_id: str, status: str = "resolved") -> dict[str, Any]:
    return {"interruptId": interrupt_id, "status": status}


def code_of(rec: dict[str, Any] | None, *entries: dict[str, Any]) -> str:
    with pytest.raises(InputError) as refused:
        check_resume(rec, list(entries), NOW)
    return refused.value.code


def test_answers_come_back_in_the_order_the_interrupts_were_raised() -> None:
    ordered, series = check_resume(record("a", "b", answered=("x",)),
                                   [entry("b"), entry("a", "cancelled")], NOW)
    assert ordered == [entry("a", "cancelled"), entry("b")]
    assert [e["interruptId"] for e in series] == ["x", "a", "b"]


def test_no_resume_checks_nothing() -> None:
    assert check_resume(record("a"), [], NOW) == ([], [])


def test_refusals() -> None:
    assert code_of(None, entry("a")) == "INTERRUPT_NOT_FOUND"
    assert code_of(record("a"), entry("z")) == "INTERRUPT_NOT_FOUND"
    assert code_of(record("a"), entry("a"), entry("a")) == "INTERRUPT_ALREADY_ANSWERED"
    assert code_of(record(answered=("a",)), entry("a")) == "INTERRUPT_ALREADY_ANSWERED"
    assert code_of(record("a", "b"), entry("a")) == "INTERRUPT_UNANSWERED"


def test_an_expired_interrupt_can_be_cancelled_but_not_resolved() -> None:
    past = record("a", expiresAt="2026-12-01T11:59:59Z")
    assert code_of(past, entry("a")) == "INTERRUPT_EXPIRED"
    assert check_resume(past, [entry("a", "cancelled")], NOW)[0] == [entry("a", "cancelled")]
    for later in ("2026-12-01T12:00:01+00:00", "2026-12-01T12:00:01", "next tuesday"):
        assert check_resume(record("a", expiresAt=later), [entry("a")], NOW)[0]


def test_the_record_a_run_leaves() -> None:
    raised = [{"id": "n", "reason": "r"}]
    assert next_record(raised=raised, answered=[entry("a")], resuming=True) == {
        "open": raised, "answered": [entry("a")]}
    assert next_record(raised=[], answered=[entry("a")], resuming=True) == {
        "open": [], "answered": [entry("a")]}
    assert next_record(raised=[], answered=[], resuming=False) is None


class _NoSession:
    def emit(self, output: Any) -> None: ...


def context(answers: list[str]) -> RunContext:
    return RunContext(thread_id="t", run_id="r", messages=[], session=_NoSession(),  # type: ignore[arg-type]
                      answered=[Resume(interrupt_id=a, status="resolved", payload=a)
                                for a in answers])


async def test_interrupt_replays_answers_by_position_or_id_then_asks() -> None:
    ctx = context(["first", "named"])
    assert (await ctx.interrupt("r")).payload == "first"
    assert (await ctx.interrupt("r", id="named")).payload == "named"
    with pytest.raises(Interrupted) as asked:
        await ctx.interrupt("approval", message="m", metadata={"k": 1}, tool_call_id="c")
    interrupt = asked.value.interrupt
    assert interrupt["reason"] == "approval" and interrupt["message"] == "m"
    assert interrupt["metadata"] == {"k": 1} and interrupt["toolCallId"] == "c"
    assert "responseSchema" not in interrupt and isinstance(interrupt["id"], str)
    assert not isinstance(asked.value, Exception)  # an agent's except Exception lets it out


async def test_a_series_stops_at_its_limit() -> None:
    almost = context([str(i) for i in range(MAX_INTERRUPT_SERIES - 1)])
    for _ in range(MAX_INTERRUPT_SERIES - 1):
        await almost.interrupt("r")
    with pytest.raises(Interrupted):
        await almost.interrupt("r")
    full = context([str(i) for i in range(MAX_INTERRUPT_SERIES)])
    for _ in range(MAX_INTERRUPT_SERIES):
        await full.interrupt("r")
    with pytest.raises(AgentError) as refused:
        await full.interrupt("r")
    assert refused.value.code == "TOO_MANY_INTERRUPTS"


def test_a_run_finishes_with_at_most_max_interrupts() -> None:
    def finish(count: int) -> dict[str, Any]:
        guard = LifecycleGuard("t", "r")
        interrupts = [{"id": f"i{n}", "reason": "r"} for n in range(count)]
        return guard.finish(outcome={"type": "interrupt", "interrupts": interrupts})[-1]

    assert finish(MAX_INTERRUPTS)["type"] == "RUN_FINISHED"
    assert finish(MAX_INTERRUPTS + 1)["code"] == "INVALID_INTERRUPT"
