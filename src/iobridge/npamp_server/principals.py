"""Authenticated peer key → principal, agreement on AG-UI, and handshake trust.

N-PAMP authenticates a peer by its identity key (the handshake proves possession), so the key's
fingerprint plays the part an API key plays over HTTP: it names a :class:`~iobridge.auth.Principal`
with its resourceIds and its maximum SafetyLabel effect. Agreement on the experimental AG-UI
protocol_id, and on a private one for opaque carriage, are separate, per-peer configuration
facts (NPAMP-REG §7.1, CC-OPAQUE §3).
"""

from __future__ import annotations

from iobridge.auth import ANONYMOUS, DEFAULT_RESOURCE, Authenticator, Principal
from iobridge.config import ANY_PEER, NpampSettings
from iobridge.npamp.bridge import Effect, SafetyLabel, SafetyPolicyViolation, TransportErrorCode
from iobridge.npamp.bridge.safety import check
from iobridge.npamp.handshake import PinnedPeers, SignatureScheme, fingerprint

__all__ = ["PeerDirectory", "Refusal"]


class Refusal(Exception):
    """A request is answered with a transport error instead of being carried out."""

    def __init__(self, code: TransportErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class PeerDirectory:
    """What the configuration says about each peer key."""

    def __init__(self, settings: NpampSettings, authenticator: Authenticator) -> None:
        """Index the configured peers.

        Raises:
            ValueError: a ``trusted_peers`` entry is neither a fingerprint nor a key file.
        """
        self.settings = settings
        self._anonymous = authenticator.mode == "none"
        self._principals: dict[str, Principal] = {}
        for peer in settings.peers:
            allowed = frozenset(peer.resource_ids) if peer.resource_ids is not None else None
            default = peer.default_resource or (
                peer.resource_ids[0] if peer.resource_ids else DEFAULT_RESOURCE
            )
            self._principals[peer.fingerprint] = Principal(
                id=peer.principal,
                resource_ids=allowed,
                default_resource=default,
                max_effect=peer.max_effect,
            )
        self._trust_any = settings.trusted_peers == ANY_PEER
        self._trusted = PinnedPeers(() if self._trust_any else settings.trusted_peers)
        self._agreed = None if settings.agui_peers == ANY_PEER else frozenset(settings.agui_peers)
        self._opaque = {peer.fingerprint: peer.protocol_id for peer in settings.opaque_peers}

    def trusts(self, scheme: SignatureScheme, public_key: bytes) -> bool:
        """Handshake peer verifier: configured peers, agreed peers and ``trusted_peers``."""
        if self._trust_any or public_key in self._trusted:
            return True
        fp = fingerprint(public_key)
        return (
            fp in self._principals
            or fp in self._opaque
            or (self._agreed is not None and fp in self._agreed)
        )

    def agreed(self, public_key: bytes) -> bool:
        """Whether this peer agreed on the AG-UI protocol_id out of band."""
        return self._agreed is None or fingerprint(public_key) in self._agreed

    def opaque_protocol_id(self, public_key: bytes) -> int | None:
        """The private protocol_id this peer uses for opaque carriage, if it has one."""
        return self._opaque.get(fingerprint(public_key))

    def principal(self, public_key: bytes) -> Principal | None:
        """The principal an authenticated key acts as; ``None`` when it may not start runs.

        A configured key gets its own principal. Otherwise, with ``auth.mode = none``, the
        anonymous principal (with ``anonymous_max_effect``); with any other mode, nobody.
        """
        principal = self._principals.get(fingerprint(public_key))
        if principal is not None:
            return principal
        if self._anonymous:
            return Principal(
                id=ANONYMOUS.id,
                resource_ids=ANONYMOUS.resource_ids,
                default_resource=ANONYMOUS.default_resource,
                max_effect=self.settings.anonymous_max_effect,
            )
        return None

    def authorize(self, public_key: bytes, label: SafetyLabel | None) -> Principal:
        """The principal, if its effect ceiling admits the label (absent = destructive).

        Raises:
            Refusal: NotDelivered (no principal) or SafetyPolicy (label above the ceiling).
        """
        principal = self.principal(public_key)
        if principal is None:
            raise Refusal(TransportErrorCode.NOT_DELIVERED, "this peer has no principal")
        try:
            check(label, Effect(principal.max_effect))
        except SafetyPolicyViolation as exc:
            raise Refusal(TransportErrorCode.SAFETY_POLICY, str(exc)) from None
        return principal
