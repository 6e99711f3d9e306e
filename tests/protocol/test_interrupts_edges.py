"""The check of ``resume`` at its edges: exact refusals, the instant of expiry, the clock it
reads by default, and the series' size at its limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.interrupts import check_resume, expired

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def record(*ids: str, answered: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {"open": [{"id": i, "reason": "r", **extra} for i in ids],
            "answered": [{"interruptId": a, "status": "resolved"} for a in answered]}


def entry(interrupt_id: str, status: str = "resolved", **extra: Any) -> dict[str, Any]:
    return {"interruptId": interrupt_id, "status": status, **extra}


def refusal(rec: dict[str, Any] | None, *entries: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as refused:
        check_resume(rec, list(entries), NOW)
    return refused.value


def test_refusals_say_which_interrupt() -> None:
    again = refusal(record("a"), entry("a"), entry("a"))
    assert again.message == "interrupt 'a' is already answered"
    unknown = refusal(record("a"), entry("z"))
    assert unknown.message == "no open interrupt of this thread has id 'z'"
    missing = refusal(record("a", "b", "c"), entry("b"))
    assert (missing.code, missing.message) == (
        "INTERRUPT_UNANSWERED", "a resume must answer every open interrupt of the thread")
    assert missing.details == {"interruptIds": ["a", "c"]}
    late = refusal(record("a", expiresAt="2026-12-01T11:00:00Z"), entry("a"))
    assert late.message == "interrupt 'a' expired at 2026-12-01T11:00:00Z"


def test_an_interrupt_expires_at_its_instant() -> None:
    assert expired({"expiresAt": "2026-12-01T12:00:00+00:00"}, NOW)
    assert expired({"expiresAt": "2026-12-01T12:00:00"}, NOW)
    assert not expired({"expiresAt": "2026-12-01T12:00:00.000001+00:00"}, NOW)
    assert refusal(record("a", expiresAt="2026-12-01T12:00:00Z"), entry("a")).code == (
        "INTERRUPT_EXPIRED")


def test_expiry_is_judged_against_the_current_time_by_default() -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    gone = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    assert check_resume(record("a", expiresAt=soon), [entry("a")])[0] == [entry("a")]
    with pytest.raises(InputError) as refused:
        check_resume(record("a", expiresAt=gone), [entry("a")])
    assert refused.value.code == "INTERRUPT_EXPIRED"


def test_the_series_may_encode_to_exactly_max_bytes() -> None:
    rec = record("a", answered=("x",))
    answer = entry("a", payload={"text": "y" * 50})
    size = len(orjson.dumps([*rec["answered"], answer]))
    ordered, series = check_resume(rec, [answer], NOW, max_bytes=size)
    assert ordered == [answer] and len(orjson.dumps(series)) == size
    with pytest.raises(PayloadTooLarge) as refused:
        check_resume(rec, [answer], NOW, max_bytes=size - 1)
    assert refused.value.code == "INTERRUPTS_TOO_LARGE" and refused.value.status == 413
    assert refused.value.message == (
        f"the answers to this thread's interrupts would exceed {size - 1} bytes")
