"""The N-PAMP handshake state machine, as data (spec/10 §1).

Theory of operation. Both roles share one machine; a role only decides where it starts
(``CLIENT_START`` or ``SERVER_EXPECT_CLIENT_HELLO``). Every state is named after what it waits
for, and every transition is an entry of :data:`TRANSITIONS`, keyed by ``(state, input)``. An
input missing from the table for the current state is a protocol violation: the machine moves
to ``ERROR`` and stays there, and every later input raises too.

Flights (all on the Control channel, seq 0)::

    client                                         server
    CLIENT_START
      SEND_CLIENT_HELLO ──── CLIENT_HELLO ────▶    SERVER_EXPECT_CLIENT_HELLO
    CLIENT_EXPECT_SERVER_HELLO                        RECV_CLIENT_HELLO
      RECV_SERVER_HELLO ◀─── SERVER_HELLO ─────    (sends SERVER_HELLO + SERVER_AUTH)
    CLIENT_EXPECT_SERVER_AUTH                      SERVER_EXPECT_CLIENT_AUTH
      RECV_SERVER_AUTH  ◀─── SERVER_AUTH ──────
    ESTABLISHED (sends CLIENT_AUTH) ─ CLIENT_AUTH ─▶  RECV_CLIENT_AUTH
                                                   ESTABLISHED

The server is established only after verifying CLIENT_AUTH (the master secret is bound to
``TH_cCV``). This module never sees bytes; :mod:`iobridge.npamp.handshake.machine` maps frames
to inputs.
"""

from __future__ import annotations

from iobridge.npamp._enum import IdentityEnum
from iobridge.npamp.errors import InvalidState

__all__ = [
    "RECV_INPUTS",
    "TRANSITIONS",
    "HandshakeInput",
    "HandshakeState",
    "HandshakeStateMachine",
    "state_diagram",
]


class HandshakeState(IdentityEnum):
    """Where a handshake is, named after what it waits for."""

    #: Client created, CLIENT_HELLO not sent yet (``initiate()`` pending).
    CLIENT_START = "CLIENT_START"
    #: Client sent CLIENT_HELLO and waits for SERVER_HELLO.
    CLIENT_EXPECT_SERVER_HELLO = "CLIENT_EXPECT_SERVER_HELLO"
    #: Client read SERVER_HELLO and waits for the encrypted SERVER_AUTH.
    CLIENT_EXPECT_SERVER_AUTH = "CLIENT_EXPECT_SERVER_AUTH"
    #: Server waits for CLIENT_HELLO.
    SERVER_EXPECT_CLIENT_HELLO = "SERVER_EXPECT_CLIENT_HELLO"
    #: Server sent SERVER_HELLO and SERVER_AUTH and waits for CLIENT_AUTH.
    SERVER_EXPECT_CLIENT_AUTH = "SERVER_EXPECT_CLIENT_AUTH"
    #: Both peers authenticated; the master secret exists. Terminal.
    ESTABLISHED = "ESTABLISHED"
    #: A rule was broken; the handshake is dead. Terminal.
    ERROR = "ERROR"


class HandshakeInput(IdentityEnum):
    """What can happen to a handshake."""

    SEND_CLIENT_HELLO = "SEND_CLIENT_HELLO"
    RECV_CLIENT_HELLO = "RECV_CLIENT_HELLO"
    RECV_SERVER_HELLO = "RECV_SERVER_HELLO"
    RECV_SERVER_AUTH = "RECV_SERVER_AUTH"
    RECV_CLIENT_AUTH = "RECV_CLIENT_AUTH"


S = HandshakeState
I = HandshakeInput  # noqa: E741

#: Every legal transition; anything else is fatal.
TRANSITIONS: dict[tuple[HandshakeState, HandshakeInput], HandshakeState] = {
    (S.CLIENT_START, I.SEND_CLIENT_HELLO): S.CLIENT_EXPECT_SERVER_HELLO,
    (S.CLIENT_EXPECT_SERVER_HELLO, I.RECV_SERVER_HELLO): S.CLIENT_EXPECT_SERVER_AUTH,
    (S.CLIENT_EXPECT_SERVER_AUTH, I.RECV_SERVER_AUTH): S.ESTABLISHED,
    (S.SERVER_EXPECT_CLIENT_HELLO, I.RECV_CLIENT_HELLO): S.SERVER_EXPECT_CLIENT_AUTH,
    (S.SERVER_EXPECT_CLIENT_AUTH, I.RECV_CLIENT_AUTH): S.ESTABLISHED,
}

#: Control-channel frame type → receive input (spec/10 §1.1).
RECV_INPUTS: dict[int, HandshakeInput] = {
    0x0100: I.RECV_CLIENT_HELLO,
    0x0101: I.RECV_SERVER_HELLO,
    0x0102: I.RECV_SERVER_AUTH,
    0x0103: I.RECV_CLIENT_AUTH,
}

del S, I

TERMINAL_STATES = frozenset({HandshakeState.ESTABLISHED, HandshakeState.ERROR})


class HandshakeStateMachine:
    """Applies :data:`TRANSITIONS`; knows nothing about bytes or roles."""

    __slots__ = ("state",)

    def __init__(self, initial: HandshakeState) -> None:
        """Start in ``initial`` (``CLIENT_START`` or ``SERVER_EXPECT_CLIENT_HELLO``)."""
        self.state = initial

    def next_state(self, event: HandshakeInput) -> HandshakeState:
        """Return the state ``event`` leads to, without moving.

        Raises:
            InvalidState: The machine is already in ``ERROR`` (every later call raises).
            KeyError: ``event`` is not legal in the current state; the caller turns it into
                the protocol error that fits (local misuse or unexpected peer frame).
        """
        if self.state is HandshakeState.ERROR:
            raise InvalidState("handshake already failed")
        return TRANSITIONS[(self.state, event)]

    def fail(self) -> None:
        """Enter ``ERROR``; nothing leaves it."""
        self.state = HandshakeState.ERROR


def state_diagram() -> str:
    """Render :data:`TRANSITIONS` as a Mermaid ``stateDiagram-v2`` (for ``docs/``).

    Generated from the table so the picture cannot drift from the code; every state not in a
    transition's key moves to ``ERROR`` on any input, which the diagram states once.
    """
    lines = ["stateDiagram-v2"]
    lines += [
        f"    [*] --> {s.name}"
        for s in (HandshakeState.CLIENT_START, HandshakeState.SERVER_EXPECT_CLIENT_HELLO)
    ]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.name} --> {target.name}: {event.name}")
    lines.append("    note right of ERROR: any other (state, input) pair, or a failed check")
    lines.append("    ESTABLISHED --> [*]")
    lines.append("    ERROR --> [*]")
    return "\n".join(lines) + "\n"
