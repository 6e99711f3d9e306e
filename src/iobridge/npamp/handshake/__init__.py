"""The 1.5-RTT hybrid handshake: its machine and state table, transcript, profiles, identities."""

from iobridge.npamp.handshake.identity import (
    IdentityKey,
    PeerVerifier,
    PinnedPeers,
    fingerprint,
    generate_identity,
    keygen,
    load_identity,
    load_public_key,
)
from iobridge.npamp.handshake.machine import (
    ClientHandshake,
    HandshakeCompleted,
    HandshakeConfig,
    ServerHandshake,
)
from iobridge.npamp.handshake.profiles import AeadSuite, Kem, Profile, SignatureScheme
from iobridge.npamp.handshake.state import HandshakeState
from iobridge.npamp.handshake.transcript import Transcript

__all__ = [
    "AeadSuite",
    "ClientHandshake",
    "HandshakeCompleted",
    "HandshakeConfig",
    "HandshakeState",
    "IdentityKey",
    "Kem",
    "PeerVerifier",
    "PinnedPeers",
    "Profile",
    "ServerHandshake",
    "SignatureScheme",
    "Transcript",
    "fingerprint",
    "generate_identity",
    "keygen",
    "load_identity",
    "load_public_key",
]
