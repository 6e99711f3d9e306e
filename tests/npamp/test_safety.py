"""SafetyLabel policy: fail-safe on absence, a ceiling that never grants."""

from __future__ import annotations

import pytest

from iobridge.npamp.bridge import (
    Effect,
    SafetyLabel,
    SafetyPolicyViolation,
    TransportErrorCode,
    safety,
)


def test_missing_label_is_destructive() -> None:
    assert safety.effective_effect(None) is Effect.DESTRUCTIVE


@pytest.mark.parametrize("effect", list(Effect))
def test_present_label_keeps_its_effect(effect: Effect) -> None:
    assert safety.effective_effect(SafetyLabel(effect=effect)) is effect


def test_clause6_missing_label_refused_by_a_restrictive_maximum() -> None:
    with pytest.raises(SafetyPolicyViolation) as info:
        safety.check(None, Effect.NON_IDEMPOTENT_WRITE)
    assert info.value.transport_code is TransportErrorCode.SAFETY_POLICY
    assert "destructive" in str(info.value)


@pytest.mark.parametrize("label_effect", list(Effect))
@pytest.mark.parametrize("max_effect", list(Effect))
def test_check_is_a_ceiling(label_effect: Effect, max_effect: Effect) -> None:
    label = SafetyLabel(effect=label_effect, scope="thread-1")
    if label_effect > max_effect:
        with pytest.raises(SafetyPolicyViolation):
            safety.check(label, max_effect)
    else:
        assert safety.check(label, max_effect) is label_effect


def test_default_run_label_is_destructive() -> None:
    """MAP-AGUI §6.1: a sender that cannot bound the run's effect labels it destructive."""
    assert SafetyLabel(effect=Effect.DESTRUCTIVE) == safety.DEFAULT_RUN_LABEL
