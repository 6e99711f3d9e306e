"""Interrupts (AG-UI 1.0) as a thread remembers them, and the check of a run's ``resume``.

A run that needs something from outside finishes with ``RUN_FINISHED.outcome`` ``{type:
"interrupt", interrupts: [...]}``; its thread keeps an *interrupt record*
``{"open": [Interrupt, …], "answered": [ResumeEntry, …]}``. The next run answers with
``RunAgentInput.resume``: every open interrupt exactly once (``resolved`` with a payload, or
``cancelled``), nothing else. ``answered`` holds the answers of the whole series of resumed
runs that led to the open interrupts, in the order the interrupts were raised, so an agent
that is re-run from the start can be given each earlier answer again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.run_limits import DEFAULT_MAX_INTERRUPT_BYTES, INTERRUPTS_TOO_LARGE

#: Error codes of a refused ``resume`` (HTTP 400, before the run starts).
INTERRUPT_NOT_FOUND = "INTERRUPT_NOT_FOUND"
INTERRUPT_ALREADY_ANSWERED = "INTERRUPT_ALREADY_ANSWERED"
INTERRUPT_UNANSWERED = "INTERRUPT_UNANSWERED"
INTERRUPT_EXPIRED = "INTERRUPT_EXPIRED"


def expired(interrupt: Mapping[str, Any], now: datetime) -> bool:
    """Whether the interrupt's ``expiresAt`` (ISO 8601) has passed; a value that is not a
    date never expires (AG-UI leaves the format open)."""
    value = interrupt.get("expiresAt")
    if not isinstance(value, str):
        return False
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when <= now


def open_interrupts(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The interrupts a thread waits on (none without a record)."""
    return list(record.get("open") or []) if record else []


def check_resume(
    record: Mapping[str, Any] | None,
    resume: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_INTERRUPT_BYTES,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Check ``resume`` against the thread's interrupt record.

    The series of answers the thread would keep (earlier ones and this run's) may encode to at
    most ``max_bytes``: a series of resumed runs would otherwise store and rewrite every
    payload it was ever given.

    Returns:
        This run's entries in the order the interrupts were raised, and the whole series
        of answers (earlier resumed runs' first). Both empty when ``resume`` is.

    Raises:
        PayloadTooLarge: the series would exceed ``max_bytes`` (``INTERRUPTS_TOO_LARGE``).
        InputError: an id that no open interrupt has (``INTERRUPT_NOT_FOUND``), one that
            was answered already or twice in this list (``INTERRUPT_ALREADY_ANSWERED``),
            an open interrupt left without an answer (``INTERRUPT_UNANSWERED``), or one
            resolved after its ``expiresAt`` (``INTERRUPT_EXPIRED``; cancelling it is fine).
    """
    if not resume:
        return [], []
    pending = [i["id"] for i in open_interrupts(record)]
    earlier = list(record.get("answered") or []) if record else []
    answered_before = {a.get("interruptId") for a in earlier}
    given: dict[str, Mapping[str, Any]] = {}
    for entry in resume:
        interrupt_id = entry["interruptId"]
        if interrupt_id in given or (
            interrupt_id not in pending and interrupt_id in answered_before
        ):
            raise InputError(
                f"interrupt {interrupt_id!r} is already answered",
                code=INTERRUPT_ALREADY_ANSWERED,
            )
        if interrupt_id not in pending:
            raise InputError(
                f"no open interrupt of this thread has id {interrupt_id!r}",
                code=INTERRUPT_NOT_FOUND,
            )
        given[interrupt_id] = entry
    missing = [i for i in pending if i not in given]
    if missing:
        raise InputError(
            "a resume must answer every open interrupt of the thread",
            code=INTERRUPT_UNANSWERED,
            details={"interruptIds": missing},
        )
    now = now or datetime.now(UTC)
    for interrupt in open_interrupts(record):
        if given[interrupt["id"]].get("status") == "resolved" and expired(interrupt, now):
            raise InputError(
                f"interrupt {interrupt['id']!r} expired at {interrupt['expiresAt']}",
                code=INTERRUPT_EXPIRED,
            )
    ordered = [dict(given[i]) for i in pending]
    series = [*earlier, *ordered]
    if len(orjson.dumps(series)) > max_bytes:
        raise PayloadTooLarge(
            f"the answers to this thread's interrupts would exceed {max_bytes} bytes",
            code=INTERRUPTS_TOO_LARGE,
        )
    return ordered, series


def next_record(
    *,
    raised: Sequence[Mapping[str, Any]],
    answered: Sequence[Mapping[str, Any]],
    resuming: bool,
) -> dict[str, Any] | None:
    """The interrupt record a finished run leaves: what it raised, with the answers that led
    there; after a resumed run that raised nothing, only the answers (so a replayed
    ``resume`` is told it was answered); ``None`` otherwise."""
    if raised:
        return {"open": [dict(i) for i in raised], "answered": [dict(a) for a in answered]}
    if resuming:
        return {"open": [], "answered": [dict(a) for a in answered]}
    return None
