"""The N-PAMP association state machine, as data (no bytes, no keys).

Theory of operation. An association first runs the handshake (driven by
:mod:`iobridge.npamp.handshake.machine`, whose own machine lives in :mod:`.handshake_state`), then
carries encrypted frames until one side closes it. Every legal move is an entry of
:data:`TRANSITIONS`, keyed by ``(state, input)``; inputs come in SEND_/RECV_ pairs and are the
same whichever role we play. A pair missing from the table is fatal: the association enters
``ERROR`` and every later call raises (h11/h2 discipline)::

    HANDSHAKING ──RECV_HANDSHAKE_DONE──▶ OPEN ──SEND_CLOSE──▶ CLOSING ──RECV_CLOSE_ACK──▶ CLOSED
         │                                │                    │
         │                                └─RECV_CLOSE/ERROR───┴──RECV_CLOSE/ERROR────▶ CLOSED
         └──────────────── any violation, from any state ──────────────────────────────▶ ERROR

While CLOSING we still accept the peer's data, key updates and pings: they may have been in
flight before the peer saw our CLOSE. We stop sending anything but the replies the protocol
requires (PONG, KEY_UPDATE_ACK).
"""

from __future__ import annotations

from iobridge.npamp._enum import IdentityEnum

__all__ = [
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AssociationInput",
    "AssociationState",
    "state_diagram",
]


class AssociationState(IdentityEnum):
    """Where an association is."""

    #: Waiting for the N-PAMP handshake to complete; only handshake frames move.
    HANDSHAKING = "HANDSHAKING"
    #: Established: encrypted frames both ways on the enabled channels.
    OPEN = "OPEN"
    #: We sent CLOSE and wait for CLOSE_ACK.
    CLOSING = "CLOSING"
    #: Closed gracefully (or by the peer's ERROR). Terminal.
    CLOSED = "CLOSED"
    #: A rule was broken (by either side). Terminal.
    ERROR = "ERROR"


class AssociationInput(IdentityEnum):
    """What can happen to an association."""

    SEND_HANDSHAKE = "SEND_HANDSHAKE"
    RECV_HANDSHAKE = "RECV_HANDSHAKE"
    RECV_HANDSHAKE_DONE = "RECV_HANDSHAKE_DONE"
    SEND_DATA = "SEND_DATA"
    RECV_DATA = "RECV_DATA"
    SEND_PING = "SEND_PING"
    RECV_PING = "RECV_PING"
    RECV_PONG = "RECV_PONG"
    SEND_KEY_UPDATE = "SEND_KEY_UPDATE"
    RECV_KEY_UPDATE = "RECV_KEY_UPDATE"
    RECV_KEY_UPDATE_ACK = "RECV_KEY_UPDATE_ACK"
    SEND_CLOSE = "SEND_CLOSE"
    RECV_CLOSE = "RECV_CLOSE"
    RECV_CLOSE_ACK = "RECV_CLOSE_ACK"
    RECV_ERROR = "RECV_ERROR"


S = AssociationState
I = AssociationInput  # noqa: E741

#: Every legal transition; anything else is fatal.
TRANSITIONS: dict[tuple[AssociationState, AssociationInput], AssociationState] = {
    (S.HANDSHAKING, I.SEND_HANDSHAKE): S.HANDSHAKING,
    (S.HANDSHAKING, I.RECV_HANDSHAKE): S.HANDSHAKING,
    (S.HANDSHAKING, I.RECV_HANDSHAKE_DONE): S.OPEN,
    (S.OPEN, I.SEND_DATA): S.OPEN,
    (S.OPEN, I.RECV_DATA): S.OPEN,
    (S.OPEN, I.SEND_PING): S.OPEN,
    (S.OPEN, I.RECV_PING): S.OPEN,
    (S.OPEN, I.RECV_PONG): S.OPEN,
    (S.OPEN, I.SEND_KEY_UPDATE): S.OPEN,
    (S.OPEN, I.RECV_KEY_UPDATE): S.OPEN,
    (S.OPEN, I.RECV_KEY_UPDATE_ACK): S.OPEN,
    (S.OPEN, I.SEND_CLOSE): S.CLOSING,
    (S.OPEN, I.RECV_CLOSE): S.CLOSED,
    (S.OPEN, I.RECV_ERROR): S.CLOSED,
    (S.CLOSING, I.RECV_DATA): S.CLOSING,
    (S.CLOSING, I.RECV_PING): S.CLOSING,
    (S.CLOSING, I.RECV_PONG): S.CLOSING,
    (S.CLOSING, I.RECV_KEY_UPDATE): S.CLOSING,
    (S.CLOSING, I.RECV_KEY_UPDATE_ACK): S.CLOSING,
    (S.CLOSING, I.RECV_CLOSE_ACK): S.CLOSED,
    (S.CLOSING, I.RECV_CLOSE): S.CLOSED,
    (S.CLOSING, I.RECV_ERROR): S.CLOSED,
}

del S, I

#: States nothing leaves.
TERMINAL_STATES = frozenset({AssociationState.CLOSED, AssociationState.ERROR})


def state_diagram() -> str:
    """Render :data:`TRANSITIONS` as a Mermaid ``stateDiagram-v2`` (for ``docs/npamp.md``).

    Generated from the table so the picture cannot drift from the code. Self-loops are folded
    into one edge per state; every pair absent from the table leads to ``ERROR``.
    """
    lines = ["stateDiagram-v2", f"    [*] --> {AssociationState.HANDSHAKING.name}"]
    loops: dict[AssociationState, list[str]] = {}
    for (state, event), target in TRANSITIONS.items():
        if state is target:
            loops.setdefault(state, []).append(event.name)
        else:
            lines.append(f"    {state.name} --> {target.name}: {event.name}")
    for state, names in loops.items():
        lines.append(f"    {state.name} --> {state.name}: {', '.join(names)}")
    lines.append("    note right of ERROR: any other (state, input) pair, or a failed check")
    lines += [f"    {s.name} --> [*]" for s in AssociationState if s in TERMINAL_STATES]
    return "\n".join(lines) + "\n"
