"""What an agent yields from ``Agent.run``: high-level outputs, not wire events.

The runtime turns these into AG-UI events (opening and closing text messages, reasoning
spans and steps as needed) and the lifecycle guard makes the result a valid stream. A plain
``str`` yielded by an agent is shorthand for ``TextDelta(delta=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A chunk of assistant text; consecutive deltas form one message."""

    delta: str
    #: Start a new message with this id instead of continuing the open one.
    message_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEnd:
    """Close the open text message now (the next delta starts a new one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    """A chunk of model reasoning; consecutive deltas form one reasoning message."""

    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningEnd:
    """Close the open reasoning message and its reasoning span."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningEncryptedValue:
    """A provider's opaque reasoning artefact (a thinking signature, encrypted reasoning):
    REASONING_ENCRYPTED_VALUE, kept with the thread and sent back to the model that made it.

    It belongs to the open (else the last) reasoning message, opening an empty one if the
    run has none, or, with ``tool_call_id``, to that tool call. ``metadata`` goes on the
    event and the stored message: who produced the value, so it only goes back there.
    """

    value: str
    tool_call_id: str | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted:
    """A named step (e.g. one model round) begins."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFinished:
    """The named step ends."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSnapshot:
    """Replace the shared state with ``snapshot``."""

    snapshot: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class StateDelta:
    """Apply an RFC 6902 JSON Patch to the shared state."""

    patch: list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomEvent:
    """An application-defined CUSTOM event."""

    name: str
    value: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RawEvent:
    """Any AG-UI event object, passed through the guard as is (for advanced agents)."""

    event: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalResult:
    """The run's result, surfaced as ``RUN_FINISHED.result``."""

    value: Any


AgentOutput = (
    str
    | TextDelta
    | TextEnd
    | ReasoningDelta
    | ReasoningEnd
    | ReasoningEncryptedValue
    | StepStarted
    | StepFinished
    | StateSnapshot
    | StateDelta
    | CustomEvent
    | RawEvent
    | FinalResult
)
