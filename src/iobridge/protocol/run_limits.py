"""Per-run bounds: how much one run may make the server hold or compute.

``RunLimits`` travels from the settings (``Settings.run_limits``) to the run engine, the
lifecycle guard and the agents' ``RunContext``; each bound is checked while the run produces
what it bounds, so no run can grow past it first and be measured afterwards. What answers
each one (a ``RUN_ERROR`` code, or a status before the run starts) is listed in
``docs/security.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH

__all__ = [
    "DEFAULT_MAX_INTERRUPT_BYTES",
    "DEFAULT_MAX_PATCH_OPS",
    "DEFAULT_MAX_RUN_OUTPUT_BYTES",
    "DEFAULT_MAX_SUBAGENT_DEPTH",
    "DEFAULT_MAX_UPSTREAM_ROUND_BYTES",
    "INTERRUPTS_TOO_LARGE",
    "RUN_OUTPUT_TOO_LARGE",
    "RunLimits",
]

#: Default most operations of one ``STATE_DELTA`` patch.
DEFAULT_MAX_PATCH_OPS = 1000
#: Default most bytes of messages one run produces (the transcript the thread stores).
DEFAULT_MAX_RUN_OUTPUT_BYTES = 16 * 1024 * 1024
#: Default most bytes one upstream round keeps for its follow-up run.
DEFAULT_MAX_UPSTREAM_ROUND_BYTES = 16 * 1024 * 1024
#: Default most bytes of a thread's interrupt record (open interrupts, resume answers).
DEFAULT_MAX_INTERRUPT_BYTES = 1024 * 1024

#: Default most levels of subagents one run may nest (a subagent's own subagents count one
#: more): a catalog where agents delegate to each other in a cycle stops there.
DEFAULT_MAX_SUBAGENT_DEPTH = 3

#: RUN_ERROR code: the run produced more than ``max_run_output_bytes`` of messages.
RUN_OUTPUT_TOO_LARGE = "RUN_OUTPUT_TOO_LARGE"
#: RUN_ERROR code / 413 code: an interrupt record over ``max_interrupt_bytes``.
INTERRUPTS_TOO_LARGE = "INTERRUPTS_TOO_LARGE"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLimits:
    """The bounds of one run (the defaults are the settings' defaults)."""

    #: Deepest JSON nesting of anything an upstream agent sends (``protocol.json_limits``)
    #: and of the tool-call arguments any agent produces.
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: Most operations of one STATE_DELTA.
    max_state_patch_ops: int = DEFAULT_MAX_PATCH_OPS
    #: Most bytes of text, reasoning, tool arguments and results one run produces.
    max_run_output_bytes: int = DEFAULT_MAX_RUN_OUTPUT_BYTES
    #: Most bytes an upstream agent's round keeps (``agents.upstream_events``).
    max_upstream_round_bytes: int = DEFAULT_MAX_UPSTREAM_ROUND_BYTES
    #: Most bytes of the interrupts a run raises, and of a thread's interrupt record.
    max_interrupt_bytes: int = DEFAULT_MAX_INTERRUPT_BYTES
    #: Most levels of subagents nested inside one run (``RunContext.subagent``).
    max_subagent_depth: int = DEFAULT_MAX_SUBAGENT_DEPTH
