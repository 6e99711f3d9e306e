"""SafetyLabel policy helpers (NPAMP-BRIDGE §7; NPAMP-MAP-AGUI §6).

Two rules drive everything here:

* **Fail-safe on absence.** A state-mutating request without a SafetyLabel is treated as
  ``destructive``, never as ``read_only``. Starting an AG-UI run is always state-mutating
  (MAP-AGUI §6), so :func:`effective_effect` maps ``None`` to :attr:`Effect.DESTRUCTIVE`.
* **A label is not authorization.** The label is the sender's declared intent. :func:`check`
  only lets local policy *refuse* a request whose declared (or fail-safe) effect is above what a
  principal may do; passing it grants nothing. The caller must still run its own authorization
  where the run starts and where each tool executes (MAP-AGUI §6.2, CC-STREAM §12).
"""

from __future__ import annotations

from iobridge.npamp.bridge.envelope import Effect, SafetyLabel, SafetyPolicyViolation

__all__ = ["DEFAULT_RUN_LABEL", "check", "effective_effect"]

#: The label a sender attaches to an AG-UI run when it cannot bound the agent's effect
#: (MAP-AGUI §6.1: tools of arbitrary effect → destructive).
DEFAULT_RUN_LABEL = SafetyLabel(effect=Effect.DESTRUCTIVE)


def effective_effect(label: SafetyLabel | None) -> Effect:
    """The effect class to enforce for a state-mutating request.

    Args:
        label: The request's SafetyLabel, or ``None`` when the sender attached none.

    Returns:
        The label's effect, or :attr:`Effect.DESTRUCTIVE` when it is missing (fail-safe).
    """
    return Effect.DESTRUCTIVE if label is None else label.effect


def check(label: SafetyLabel | None, max_effect: Effect) -> Effect:
    """Refuse a request whose effect exceeds the principal's maximum.

    This is a ceiling, not a grant: returning normally does NOT authorize the request.

    Args:
        label: The request's SafetyLabel (``None`` counts as destructive).
        max_effect: The most severe effect local policy allows this principal.

    Returns:
        The effective effect, for logging and for the caller's own authorization step.

    Raises:
        SafetyPolicyViolation: The effective effect is above ``max_effect``; answer with
            BRIDGE_ERROR SafetyPolicy (code 5).
    """
    effect = effective_effect(label)
    if effect > max_effect:
        declared = "missing label (treated as destructive)" if label is None else effect.name
        raise SafetyPolicyViolation(
            f"effect {declared} exceeds the allowed maximum {max_effect.name}"
        )
    return effect
