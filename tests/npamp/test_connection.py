"""Tests for the sans-IO association: client and server cores wired together in memory."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from iobridge.npamp.association import (
    AssociationConfig,
    CloseReceived,
    ConnectionTerminated,
    Event,
    FrameDropped,
    FrameReceived,
    HandshakeCompleted,
    KeyUpdated,
    NpampConnection,
    PongReceived,
)
from iobridge.npamp.association.state import TRANSITIONS, AssociationInput, AssociationState
from iobridge.npamp.errors import (
    AeadFailure,
    CrcMismatch,
    ErrorCode,
    InvalidState,
    KeyUpdateError,
    LocalProtocolError,
    NpampError,
    PayloadTooLarge,
    PeerReportedError,
    ReplayedSequence,
    SequenceGap,
    UnencryptedFrame,
    UnexpectedFrame,
    UnsupportedFlag,
)
from iobridge.npamp.handshake import (
    ClientHandshake,
    HandshakeConfig,
    IdentityKey,
    PinnedPeers,
    Profile,
    ServerHandshake,
    SignatureScheme,
)
from iobridge.npamp.record import keyschedule as ks
from iobridge.npamp.record.cipher import LAST_DATA_SEQUENCE, RecordCipher, seal_frame
from iobridge.npamp.wire import TlvType, push_tlv
from iobridge.npamp.wire.frame import (
    MAX_SEQUENCE,
    Flags,
    FrameReader,
    FrameType,
    push_frame,
    push_frame_header,
)

BRIDGE, INTERACTION, DISCOVERY = 0x000D, 0x000F, 0x0010
ED = IdentityKey.generate(SignatureScheme.ED25519)
ED_SERVER = IdentityKey.generate(SignatureScheme.ED25519)
MLDSA = IdentityKey.generate(SignatureScheme.MLDSA87)
MLDSA_SERVER = IdentityKey.generate(SignatureScheme.MLDSA87)


def handshake_configs(
    profile: Profile = Profile.STANDARD, *, trust_client: bool = True
) -> tuple[HandshakeConfig, HandshakeConfig]:
    """Matching client/server handshake configs that pin each other."""
    client_ids, server_ids = (
        ([ED], [ED_SERVER]) if profile is Profile.STANDARD else ([MLDSA], [MLDSA_SERVER])
    )
    client_pins, server_pins = PinnedPeers(), PinnedPeers()
    for key in server_ids:
        client_pins.add_key(key.public_key)
    if trust_client:
        for key in client_ids:
            server_pins.add_key(key.public_key)
    return (
        HandshakeConfig(identities=client_ids, peer_verifier=client_pins, profiles=(profile,)),
        HandshakeConfig(identities=server_ids, peer_verifier=server_pins, profiles=(profile,)),
    )


def make_pair(
    profile: Profile = Profile.STANDARD,
    client_config: AssociationConfig | None = None,
    server_config: AssociationConfig | None = None,
    *,
    establish: bool = True,
) -> tuple[NpampConnection, NpampConnection]:
    c_hs, s_hs = handshake_configs(profile)
    client = NpampConnection(ClientHandshake(c_hs), config=client_config)
    server = NpampConnection(ServerHandshake(s_hs), config=server_config)
    if establish:
        client.initiate()
        server.initiate()
        exchange(client, server)
        assert client.state is server.state is AssociationState.OPEN
    return client, server


def exchange(a: NpampConnection, b: NpampConnection) -> tuple[list[Event], list[Event]]:
    """Shuttle bytes until both sides are quiet; return events seen by (a, b)."""
    seen_a: list[Event] = []
    seen_b: list[Event] = []
    for _ in range(10):
        out_a, out_b = a.data_to_send(), b.data_to_send()
        if not out_a and not out_b:
            break
        if out_a and b.state is not AssociationState.ERROR:
            seen_b += b.receive_data(out_a)
        if out_b and a.state is not AssociationState.ERROR:
            seen_a += a.receive_data(out_b)
    return seen_a, seen_b


def terminated(events: list[Event]) -> ConnectionTerminated:
    assert events and isinstance(events[-1], ConnectionTerminated), events
    return events[-1]


@pytest.mark.parametrize("profile", list(Profile), ids=lambda p: p.name)
def test_handshake_then_frames_both_ways_on_several_channels(profile: Profile) -> None:
    c_hs, s_hs = handshake_configs(profile)
    client = NpampConnection(ClientHandshake(c_hs))
    server = NpampConnection(ServerHandshake(s_hs))
    client.initiate()
    server.initiate()
    seen_client, seen_server = exchange(client, server)
    assert [type(e) for e in seen_client] == [HandshakeCompleted]
    assert [type(e) for e in seen_server] == [HandshakeCompleted]
    assert client.handshake_result is not None and server.handshake_result is not None
    assert client.handshake_result.profile is profile
    assert client.handshake_result.peer_identity == s_hs.identities[0].public_key
    assert server.handshake_result.peer_identity == c_hs.identities[0].public_key

    for channel in (0x0000, BRIDGE, INTERACTION, DISCOVERY):
        client.send_frame(channel, 0x0200, b"to server %d" % channel)
        server.send_frame(channel, 0x0201, b"to client %d" % channel, urgent=True)
    seen_client, seen_server = exchange(client, server)
    assert [(e.channel, e.payload, e.seq) for e in seen_server if isinstance(e, FrameReceived)] == [
        (ch, b"to server %d" % ch, 0) for ch in (0, BRIDGE, INTERACTION, DISCOVERY)
    ]
    assert all(isinstance(e, FrameReceived) and e.urgent for e in seen_client)
    assert len(seen_client) == 4


def test_handshake_frames_in_one_chunk_with_application_data() -> None:
    client, server = make_pair(establish=False)
    client.initiate()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())  # client now OPEN, CLIENT_AUTH queued
    client.send_frame(BRIDGE, 0x0100, b"early")
    events = server.receive_data(client.data_to_send())  # CLIENT_AUTH + data together
    assert [type(e) for e in events] == [HandshakeCompleted, FrameReceived]


def test_ping_pong() -> None:
    client, server = make_pair()
    client.ping(BRIDGE, b"nonce")
    seen_client, seen_server = exchange(client, server)
    assert seen_server == []
    assert seen_client == [PongReceived(channel=BRIDGE, payload=b"nonce")]


def test_key_update_survives_and_is_acked() -> None:
    client, server = make_pair()
    client.send_frame(BRIDGE, 0x0100, b"epoch 0")
    client.key_update(BRIDGE)
    client.send_frame(BRIDGE, 0x0100, b"epoch 1")
    seen_client, seen_server = exchange(client, server)
    assert seen_server[0] == FrameReceived(
        channel=BRIDGE, frame_type=0x0100, payload=b"epoch 0", seq=0
    )
    assert seen_server[1] == KeyUpdated(channel=BRIDGE, epoch=1, local=False)
    assert seen_server[2] == FrameReceived(
        channel=BRIDGE, frame_type=0x0100, payload=b"epoch 1", seq=0
    )
    assert seen_client == [KeyUpdated(channel=BRIDGE, epoch=1, local=True)]
    server.send_frame(BRIDGE, 0x0101, b"reply")  # other direction still on epoch 0
    assert exchange(client, server)[0][0].payload == b"reply"  # type: ignore[union-attr]


def test_automatic_key_update_at_interval() -> None:
    config = AssociationConfig(key_update_interval=2)
    client, server = make_pair(client_config=config)
    for i in range(5):
        client.send_frame(BRIDGE, 0x0100, b"%d" % i)
    seen_client, seen_server = exchange(client, server)
    data = [e for e in seen_server if isinstance(e, FrameReceived)]
    assert [e.payload for e in data] == [b"0", b"1", b"2", b"3", b"4"]
    assert [e.seq for e in data] == [0, 1, 0, 1, 0]
    assert [e.epoch for e in seen_server if isinstance(e, KeyUpdated)] == [1, 2]
    assert [e.epoch for e in seen_client if isinstance(e, KeyUpdated)] == [1, 2]


def test_graceful_close() -> None:
    client, server = make_pair()
    client.send_frame(BRIDGE, 0x0100, b"last words")
    client.close()
    assert client.state is AssociationState.CLOSING
    seen_client, seen_server = exchange(client, server)
    assert [type(e) for e in seen_server] == [FrameReceived, CloseReceived, ConnectionTerminated]
    assert terminated(seen_server).error is None
    assert seen_client == [ConnectionTerminated(error=None)]
    assert client.state is server.state is AssociationState.CLOSED
    assert client.receive_data(b"ignored after close") == []
    with pytest.raises(InvalidState):
        client.send_frame(BRIDGE, 0x0100, b"too late")


def test_simultaneous_close() -> None:
    client, server = make_pair()
    client.close()
    server.close()
    seen_client, seen_server = exchange(client, server)
    assert [type(e) for e in seen_client] == [CloseReceived, ConnectionTerminated]
    assert [type(e) for e in seen_server] == [CloseReceived, ConnectionTerminated]


def test_data_received_while_closing_is_delivered() -> None:
    client, server = make_pair()
    client.close()
    server.send_frame(BRIDGE, 0x0101, b"in flight")
    events = client.receive_data(server.data_to_send())
    assert [e.payload for e in events] == [b"in flight"]  # type: ignore[union-attr]
    assert client.state is AssociationState.CLOSING


def test_grease_and_disabled_channels_dropped() -> None:
    client, server = make_pair(server_config=AssociationConfig(channels=frozenset({BRIDGE})))
    client.send_frame(INTERACTION, 0x0100, b"not enabled on the server")
    wire = client.data_to_send() + push_frame(1, 0xF0F0, 0, b"grease", Flags.ENC)
    client.send_frame(BRIDGE, 0x0100, b"ok")
    events = server.receive_data(wire + client.data_to_send())
    assert events == [
        FrameDropped(channel=INTERACTION, frame_type=0x0100, reason="channel not enabled"),
        FrameDropped(channel=0xF0F0, frame_type=1, reason="grease"),
        FrameReceived(channel=BRIDGE, frame_type=0x0100, payload=b"ok", seq=0),
    ]


def test_grease_during_handshake_ignored() -> None:
    client, server = make_pair(establish=False)
    client.initiate()
    grease = push_frame(0x0100, 0xFFFE, 0, b"")
    assert server.receive_data(grease + client.data_to_send()) == [
        FrameDropped(channel=0xFFFE, frame_type=0x0100, reason="grease")
    ]
    exchange(client, server)
    assert server.state is AssociationState.OPEN


# --- rejected input: error reported, nothing delivered, association dead ---------------------


def _data_frame(client: NpampConnection, payload: bytes = b"secret") -> bytes:
    client.send_frame(BRIDGE, 0x0100, payload)
    return client.data_to_send()


def _assert_rejected(server: NpampConnection, wire: bytes, error: type[NpampError]) -> None:
    events = server.receive_data(wire)
    assert len(events) == 1, events
    assert isinstance(terminated(events).error, error)
    assert server.state is AssociationState.ERROR
    with pytest.raises(InvalidState):
        server.receive_data(b"")
    with pytest.raises(InvalidState):
        server.send_frame(BRIDGE, 0x0100, b"")


@pytest.mark.parametrize(
    ("index", "error"),
    [(10, CrcMismatch), (40, AeadFailure), (-1, AeadFailure)],
    ids=["header", "ciphertext", "tag"],
)
def test_flipped_bit_rejected(index: int, error: type[NpampError]) -> None:
    client, server = make_pair()
    wire = bytearray(_data_frame(client))
    wire[index] ^= 0x80
    _assert_rejected(server, bytes(wire), error)


def test_replayed_frame_rejected() -> None:
    client, server = make_pair()
    wire = _data_frame(client)
    assert len(server.receive_data(wire)) == 1
    _assert_rejected(server, wire, ReplayedSequence)


def test_skipped_frame_rejected() -> None:
    client, server = make_pair()
    _data_frame(client)  # lost
    _assert_rejected(server, _data_frame(client), SequenceGap)


def _app_cipher(conn: NpampConnection, direction: int, channel: int) -> RecordCipher:
    result = conn.handshake_result
    assert result is not None
    key, iv = ks.application_keys(
        result.master_secret, direction, 0, result.aead_suite, channel, result.hash_name
    )
    return RecordCipher(result.aead_suite, key, iv)


def test_frame_sealed_with_other_channels_key_rejected() -> None:
    client, server = make_pair()
    wire = seal_frame(
        _app_cipher(client, 0, INTERACTION),
        frame_type=0x0100,
        channel=BRIDGE,
        seq=0,
        plaintext=b"x",
    )
    _assert_rejected(server, wire, AeadFailure)


def test_frame_sealed_with_wrong_direction_key_rejected() -> None:
    client, server = make_pair()
    wire = seal_frame(
        _app_cipher(client, 1, BRIDGE), frame_type=0x0100, channel=BRIDGE, seq=0, plaintext=b"x"
    )
    _assert_rejected(server, wire, AeadFailure)


def test_cleartext_frame_after_handshake_rejected() -> None:
    _, server = make_pair()
    _assert_rejected(server, push_frame(0x0100, BRIDGE, 0, b"plain"), UnencryptedFrame)


def test_forged_close_not_honoured() -> None:
    _, server = make_pair()
    forged = seal_frame(
        RecordCipher(1, bytes(32), bytes(12)),
        frame_type=FrameType.CLOSE,
        channel=0,
        seq=0,
        plaintext=b"",
    )
    events = server.receive_data(forged)
    assert not any(isinstance(e, CloseReceived) for e in events)
    assert isinstance(terminated(events).error, AeadFailure)
    assert server.data_to_send() == b""  # no CLOSE_ACK, and no ERROR under broken integrity


def test_compression_flag_rejected_with_error_frame() -> None:
    client, server = make_pair()
    wire = seal_frame(
        _app_cipher(client, 0, BRIDGE),
        frame_type=0x0100,
        channel=BRIDGE,
        seq=0,
        plaintext=b"x",
        flags=Flags.ENC | Flags.COMP,
    )
    _assert_rejected(server, wire, UnsupportedFlag)
    events = client.receive_data(server.data_to_send())
    end = terminated(events)
    assert isinstance(end.error, PeerReportedError)
    assert end.remote_code == ErrorCode.UNSUPPORTED_FLAG
    assert client.state is AssociationState.CLOSED


def _seal_as_client(conn: NpampConnection, channel: int, frame_type: int, payload: bytes) -> bytes:
    """Seal a frame with the client's real epoch-0 key, bypassing its API checks."""
    cipher = _app_cipher(conn, 0, channel)
    return seal_frame(cipher, frame_type=frame_type, channel=channel, seq=0, plaintext=payload)


@pytest.mark.parametrize(
    "payload",
    [
        push_tlv(TlvType.KEY_UPDATE_MARKER, (2).to_bytes(8, "big")),  # skips epoch 1
        push_tlv(TlvType.KEY_UPDATE_MARKER, (1).to_bytes(4, "big")),  # wrong size
        b"",
        push_tlv(0x8123, b""),  # unknown critical TLV
    ],
    ids=["skip-epoch", "short-marker", "empty", "critical"],
)
def test_bad_key_update_rejected(payload: bytes) -> None:
    client, server = make_pair()
    wire = _seal_as_client(client, BRIDGE, FrameType.KEY_UPDATE, payload)
    _assert_rejected(server, wire, NpampError)
    assert server.data_to_send()  # an ERROR frame was queued


def test_unsolicited_key_update_ack_rejected() -> None:
    client, server = make_pair()
    marker = push_tlv(TlvType.KEY_UPDATE_MARKER, (1).to_bytes(8, "big"))
    wire = _seal_as_client(client, BRIDGE, FrameType.KEY_UPDATE_ACK, marker)
    _assert_rejected(server, wire, KeyUpdateError)


@pytest.mark.parametrize("frame_type", [FrameType.CLOSE_ACK, FrameType.CLIENT_HELLO])
def test_unexpected_control_frames_rejected(frame_type: int) -> None:
    client, server = make_pair()
    wire = _seal_as_client(client, 0, frame_type, b"")
    _assert_rejected(server, wire, UnexpectedFrame)


def test_close_on_other_channel_is_channel_data() -> None:
    client, server = make_pair()
    client.send_frame(BRIDGE, FrameType.CLOSE, b"")
    events = server.receive_data(client.data_to_send())
    assert events == [FrameReceived(channel=BRIDGE, frame_type=FrameType.CLOSE, payload=b"", seq=0)]
    assert server.state is AssociationState.OPEN


def test_untrusted_client_fails_handshake() -> None:
    c_hs, s_hs = handshake_configs(trust_client=False)
    client = NpampConnection(ClientHandshake(c_hs))
    server = NpampConnection(ServerHandshake(s_hs))
    client.initiate()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    events = server.receive_data(client.data_to_send())
    assert isinstance(terminated(events).error, NpampError)
    assert terminated(events).error.code is ErrorCode.UNTRUSTED_PEER  # type: ignore[union-attr]
    assert server.handshake_result is None


def test_garbage_before_handshake_terminates() -> None:
    _, server = make_pair(establish=False)
    _assert_rejected(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(20), CrcMismatch)


# --- local misuse ---------------------------------------------------------------------------


def test_argument_errors_do_not_change_state() -> None:
    client, _ = make_pair(client_config=AssociationConfig(max_payload_length=2000))
    with pytest.raises(LocalProtocolError):
        client.send_frame(0x0001, 0x0100, b"")  # Memory channel not enabled
    with pytest.raises(LocalProtocolError):
        client.send_frame(BRIDGE, 0, b"")
    with pytest.raises(PayloadTooLarge):
        client.send_frame(BRIDGE, 0x0100, bytes(1985))
    client.send_frame(BRIDGE, 0x0100, bytes(1984))
    assert client.state is AssociationState.OPEN


@pytest.mark.parametrize(
    ("channel", "frame_type"),
    [
        (BRIDGE, FrameType.PING),
        (BRIDGE, FrameType.KEY_UPDATE),
        (BRIDGE, FrameType.KEY_UPDATE_ACK),
        (0, FrameType.CLOSE),
        (0, FrameType.ERROR),
        (0, FrameType.CLIENT_HELLO),
    ],
)
def test_association_managed_frame_types_refused_by_send_frame(
    channel: int, frame_type: int
) -> None:
    client, _ = make_pair()
    with pytest.raises(LocalProtocolError):
        client.send_frame(channel, frame_type, b"")
    assert client.state is AssociationState.OPEN
    assert client.data_to_send() == b""


def test_sequence_space_end_triggers_key_update_never_wraps() -> None:
    config = AssociationConfig(key_update_interval=None)
    client, server = make_pair(client_config=config)
    client._send_state(BRIDGE).next_seq = LAST_DATA_SEQUENCE
    server._recv_state(BRIDGE).expected_seq = LAST_DATA_SEQUENCE
    client.send_frame(BRIDGE, 0x0100, b"last of epoch 0")
    client.send_frame(BRIDGE, 0x0100, b"first of epoch 1")
    frames = FrameReader().feed(client.data_to_send())
    assert [(f.frame_type, f.seq) for f in frames] == [
        (0x0100, LAST_DATA_SEQUENCE),
        (FrameType.KEY_UPDATE, MAX_SEQUENCE),
        (0x0100, 0),
    ]
    events = server.receive_data(b"".join(push_frame_header(f.header) + f.payload for f in frames))
    assert [type(e) for e in events] == [FrameReceived, KeyUpdated, FrameReceived]
    assert events[2] == FrameReceived(
        channel=BRIDGE, frame_type=0x0100, payload=b"first of epoch 1", seq=0
    )


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        AssociationConfig(channels=frozenset({0xF000}))
    with pytest.raises(ValueError):
        AssociationConfig(max_payload_length=16)
    with pytest.raises(ValueError):
        AssociationConfig(key_update_interval=0)


_COMMANDS = {
    AssociationInput.SEND_HANDSHAKE: lambda c: c.initiate(),
    AssociationInput.SEND_DATA: lambda c: c.send_frame(BRIDGE, 0x0100, b"x"),
    AssociationInput.SEND_PING: lambda c: c.ping(),
    AssociationInput.SEND_KEY_UPDATE: lambda c: c.key_update(BRIDGE),
    AssociationInput.SEND_CLOSE: lambda c: c.close(),
}


def _in_state(state: AssociationState) -> NpampConnection:
    client, server = make_pair(establish=state is not AssociationState.HANDSHAKING)
    if state is AssociationState.CLOSING:
        client.close()
    elif state is AssociationState.CLOSED:
        client.close()
        exchange(client, server)
    elif state is AssociationState.ERROR:
        client.receive_data(bytes(36))
    assert client.state is state
    return client


@pytest.mark.parametrize("state", list(AssociationState), ids=lambda s: s.name)
@pytest.mark.parametrize("command", list(_COMMANDS), ids=lambda i: i.name)
def test_every_local_command_in_every_state_follows_the_table(
    state: AssociationState, command: AssociationInput
) -> None:
    conn = _in_state(state)
    expected = TRANSITIONS.get((state, command))
    if expected is None:
        with pytest.raises(InvalidState):
            _COMMANDS[command](conn)
        assert conn.state is AssociationState.ERROR
        with pytest.raises(InvalidState):
            conn.receive_data(b"")
    else:
        _COMMANDS[command](conn)
        assert conn.state is expected
        assert conn.data_to_send()


def _peer_frame(peer: NpampConnection, target: NpampConnection, what: AssociationInput) -> bytes:
    """Bytes from ``peer`` that make ``target`` see input ``what`` (crafted where needed)."""
    if what is AssociationInput.RECV_DATA:
        peer.send_frame(BRIDGE, 0x0100, b"d")
    elif what is AssociationInput.RECV_PING:
        peer.ping(BRIDGE)
    elif what is AssociationInput.RECV_PONG:
        peer._seal(BRIDGE, FrameType.PONG, b"")
    elif what is AssociationInput.RECV_KEY_UPDATE:
        peer.key_update(BRIDGE)
    elif what is AssociationInput.RECV_CLOSE:
        peer.close()
    elif what is AssociationInput.RECV_CLOSE_ACK:
        peer._seal(0, FrameType.CLOSE_ACK, b"")
    elif what is AssociationInput.RECV_ERROR:
        peer._seal(0, FrameType.ERROR, b"\x00\x02")
    # RECV_KEY_UPDATE_ACK: the peer already produced it for the target's KEY_UPDATE.
    return peer.data_to_send()


_RECV_INPUTS = [
    i
    for i in AssociationInput
    if i.name.startswith("RECV_") and "HANDSHAKE" not in i.name  # handshake: see above
]


@pytest.mark.parametrize("state", [AssociationState.OPEN, AssociationState.CLOSING])
@pytest.mark.parametrize("what", _RECV_INPUTS, ids=lambda i: i.name)
def test_every_peer_input_in_open_states_follows_the_table(
    state: AssociationState, what: AssociationInput
) -> None:
    target, peer = make_pair()
    target.key_update(BRIDGE)  # gives the peer a KEY_UPDATE to acknowledge
    peer.receive_data(target.data_to_send())
    ack = peer.data_to_send()
    if state is AssociationState.CLOSING:
        target.close()
        target.data_to_send()
    wire = ack + _peer_frame(peer, target, what)  # the ACK came first on the peer's channel
    events = target.receive_data(wire)
    expected = TRANSITIONS.get((state, what))
    if expected is None:
        assert isinstance(terminated(events).error, UnexpectedFrame)
        assert target.state is AssociationState.ERROR
    else:
        assert target.state is expected
        if expected is AssociationState.CLOSED:
            error = terminated(events).error
            assert error is None or isinstance(error, PeerReportedError)
        else:
            assert not any(isinstance(e, ConnectionTerminated) for e in events)


def test_docs_state_diagram_matches_table() -> None:
    from pathlib import Path

    from iobridge.npamp.association.state import state_diagram

    doc = Path(__file__).parents[2] / "docs" / "npamp.md"
    text = doc.read_text()
    block = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert block == state_diagram()


# --- property: random legitimate traffic between two cores -----------------------------------

_SIDES = st.sampled_from(["client", "server"])
_CHANNELS = st.sampled_from([0x0000, BRIDGE, INTERACTION])


class AssociationPair(RuleBasedStateMachine):
    """Both cores driven by random API calls and randomly chunked deliveries.

    Invariants: a command is accepted exactly when the table allows it (else ``InvalidState``
    and ERROR); every side receives, per channel, a prefix of what the other sent, in order;
    legitimate traffic never ends an association with an error.
    """

    def __init__(self) -> None:
        super().__init__()
        client, server = make_pair(client_config=AssociationConfig(key_update_interval=3))
        self.conns = {"client": client, "server": server}
        self.wire = {"client": b"", "server": b""}
        self.sent: dict[tuple[str, int], list[bytes]] = {}
        self.got: dict[tuple[str, int], list[bytes]] = {}

    def _command(self, side: str, what: AssociationInput, call: Callable[[], None]) -> None:
        conn = self.conns[side]
        allowed = TRANSITIONS.get((conn.state, what))
        if conn.state is AssociationState.ERROR or allowed is None:
            with pytest.raises(InvalidState):
                call()
            assert conn.state is AssociationState.ERROR
        else:
            call()
            assert conn.state is allowed
        self.wire[side] += conn.data_to_send()

    @rule(side=_SIDES, channel=_CHANNELS, payload=st.binary(max_size=24))
    def send(self, side: str, channel: int, payload: bytes) -> None:
        conn = self.conns[side]
        ok = TRANSITIONS.get((conn.state, AssociationInput.SEND_DATA)) is not None
        self._command(
            side, AssociationInput.SEND_DATA, lambda: conn.send_frame(channel, 0x0200, payload)
        )
        if ok:
            self.sent.setdefault((side, channel), []).append(payload)

    @rule(side=_SIDES, channel=_CHANNELS)
    def key_update(self, side: str, channel: int) -> None:
        conn = self.conns[side]
        self._command(side, AssociationInput.SEND_KEY_UPDATE, lambda: conn.key_update(channel))

    @rule(side=_SIDES, channel=_CHANNELS)
    def ping(self, side: str, channel: int) -> None:
        conn = self.conns[side]
        self._command(side, AssociationInput.SEND_PING, lambda: conn.ping(channel, b"p"))

    @rule(side=_SIDES)
    def close(self, side: str) -> None:
        conn = self.conns[side]
        self._command(side, AssociationInput.SEND_CLOSE, conn.close)

    @rule(side=_SIDES, cut=st.integers(0, 400))
    def deliver(self, side: str, cut: int) -> None:
        """Deliver the first ``cut`` pending octets from ``side`` to its peer."""
        peer_side = "server" if side == "client" else "client"
        peer = self.conns[peer_side]
        chunk, self.wire[side] = self.wire[side][:cut], self.wire[side][cut:]
        if peer.state is AssociationState.ERROR:
            return
        for event in peer.receive_data(chunk):
            if isinstance(event, ConnectionTerminated):
                assert event.error is None, event.error
            elif isinstance(event, FrameReceived):
                self.got.setdefault((side, event.channel), []).append(event.payload)
        self.wire[peer_side] += peer.data_to_send()

    @invariant()
    def delivered_in_order(self) -> None:
        for key, got in self.got.items():
            assert got == self.sent.get(key, [])[: len(got)]


AssociationPair.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_association_pair_properties = AssociationPair.TestCase


def _mixed_traffic(server: NpampConnection) -> bytes:
    """Bridge data frames around a PING, a frame on another channel, a large frame and a
    KEY_UPDATE."""
    for i in range(3):
        server.send_frame(BRIDGE, 0x0104, b"event %d" % i)
    server.ping(BRIDGE, b"p")
    server.send_frame(BRIDGE, 0x0104, bytes(5000))
    server.send_frame(0x000F, 0x0104, b"interaction")
    server.key_update(BRIDGE)
    for i in range(3):
        server.send_frame(BRIDGE, 0x0104, b"after %d" % i, urgent=i == 1)
    return server.data_to_send()


def test_frames_fed_at_once_or_one_octet_at_a_time_give_the_same_events() -> None:
    client_a, server_a = make_pair()
    whole = client_a.receive_data(_mixed_traffic(server_a))
    client_b, server_b = make_pair()
    wire = _mixed_traffic(server_b)
    octets: list[Event] = []
    for i in range(len(wire)):
        octets += client_b.receive_data(wire[i : i + 1])
    strip = [e for e in whole if not isinstance(e, KeyUpdated)]
    assert [type(e) for e in whole] == [type(e) for e in octets]
    data = [e for e in strip if isinstance(e, FrameReceived)]
    assert [e.payload for e in data] == [
        b"event 0", b"event 1", b"event 2", bytes(5000), b"interaction",
        b"after 0", b"after 1", b"after 2",
    ]
    assert [e.urgent for e in data][-3:] == [False, True, False]
    assert [(e.channel, e.seq) for e in data] == [
        (e.channel, e.seq) for e in octets if isinstance(e, FrameReceived)
    ]


@pytest.mark.parametrize("fault", ["forged", "gap"])
def test_a_bad_frame_in_a_chunk_ends_the_association_after_the_good_ones(
    fault: str,
) -> None:
    client, server = make_pair()
    frames = []
    for i in range(5):
        server.send_frame(BRIDGE, 0x0104, b"event %d" % i)
        frames.append(server.data_to_send())
    if fault == "forged":
        frames[3] = frames[3][:-1] + bytes([frames[3][-1] ^ 1])
    else:
        del frames[3]
    events = client.receive_data(b"".join(frames))
    assert [e.payload for e in events if isinstance(e, FrameReceived)] == [
        b"event 0", b"event 1", b"event 2",
    ]
    assert isinstance(terminated(events).error, AeadFailure if fault == "forged" else SequenceGap)


@pytest.mark.parametrize("interval", [None, 3])
def test_send_frames_seals_the_octets_send_frame_would(interval: int | None) -> None:
    """The batch sender: the same frames (types, sequence numbers, payloads, key updates at
    the same places) as frame-by-frame sending, across key-update boundaries and with a large
    frame in the batch."""
    config = AssociationConfig(key_update_interval=interval)
    frames = [(0x0104, b"event %d" % i) for i in range(8)]
    mixed = [*frames[:4], (0x0104, bytes(5000)), *frames[4:]]
    seen = []
    for batched in (False, True):
        client, server = make_pair(server_config=config)
        for batch in (frames, mixed):
            if batched:
                server.send_frames(BRIDGE, batch)
            else:
                for frame_type, payload in batch:
                    server.send_frame(BRIDGE, frame_type, payload)
        events = client.receive_data(server.data_to_send())
        assert [e.payload for e in events if isinstance(e, FrameReceived)] == [
            p for _, p in frames + mixed
        ]
        seen.append([(type(e), getattr(e, "seq", None), getattr(e, "epoch", None)) for e in events])
    assert seen[0] == seen[1]
    assert (KeyUpdated in {kind for kind, _, _ in seen[0]}) is (interval is not None)


def test_send_frames_refuses_the_whole_batch_on_a_bad_frame() -> None:
    _, server = make_pair()
    with pytest.raises(LocalProtocolError):
        server.send_frames(BRIDGE, [(0x0104, b"ok"), (FrameType.PING, b"")])
    with pytest.raises(PayloadTooLarge):
        server.send_frames(BRIDGE, [(0x0104, b"ok"), (0x0104, bytes(1 << 24))])
    assert server.data_to_send() == b""
    server.send_frames(BRIDGE, [])
    assert server.data_to_send() == b""
