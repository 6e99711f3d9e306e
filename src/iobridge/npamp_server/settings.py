"""The ``npamp`` section of the server settings: listener, keys, agreement and peer principals.

AG-UI's protocol_id 0x35 is experimental, so nothing here agrees on it by default: a peer
may start runs only once its key fingerprint is listed in ``agui_peers`` (or ``"*"`` is set),
which is the out-of-band agreement NPAMP-REG §7.1 asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from iobridge.npamp.identity import FINGERPRINT_PREFIX

__all__ = ["ANY_PEER", "NpampPeer", "NpampSettings"]

#: Wildcard for ``trusted_peers`` / ``agui_peers``: any peer that completed the handshake.
ANY_PEER = "*"
_BRIDGE, _INTERACTION = 0x000D, 0x000F


def _check_fingerprint(value: str) -> str:
    digest = value[len(FINGERPRINT_PREFIX) :].lower()
    if (
        not value.startswith(FINGERPRINT_PREFIX)
        or len(digest) != 64
        or any(c not in "0123456789abcdef" for c in digest)
    ):
        raise ValueError(f"not a key fingerprint (sha256:<64 hex>): {value!r}")
    return FINGERPRINT_PREFIX + digest


class NpampPeer(BaseModel):
    """One peer key and the principal it authenticates as (like an API key entry)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    #: ``sha256:<hex>`` of the peer's identity public key (``iobridge npamp keygen`` prints it).
    fingerprint: str
    principal: str
    #: Allowed resourceIds; ``None`` allows any.
    resource_ids: list[str] | None = None
    #: Used when a run names no ``forwardedProps.resourceId`` (default: the first allowed).
    default_resource: str | None = None
    #: Most severe SafetyLabel effect this peer may request (0 read_only .. 3 destructive).
    max_effect: int = Field(default=3, ge=0, le=3)

    @field_validator("fingerprint")
    @classmethod
    def _fingerprint(cls, value: str) -> str:
        return _check_fingerprint(value)

    @field_validator("resource_ids")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("resource_ids must not be empty (omit it to allow any)")
        return value


class NpampSettings(BaseModel):
    """How the server carries AG-UI runs over N-PAMP (off unless ``port`` is set)."""

    model_config = ConfigDict(extra="forbid")

    #: TCP port of the N-PAMP listener; ``None`` disables it (``iobridge serve --npamp-port``).
    port: int | None = Field(default=None, ge=0, le=65535)
    #: Bind address; defaults to the HTTP ``host``.
    host: str | None = None
    #: Our identity private key (PKCS#8 PEM). ``None``: a fresh key per start (development).
    identity_key: Path | None = None
    #: TLS certificate and key. ``None``: a one-day self-signed certificate (development).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Who may complete the handshake: fingerprints or public key files, or ``"*"``.
    #: Fingerprints in ``peers`` and ``agui_peers`` are always trusted.
    trusted_peers: list[str] | Literal["*"] = Field(default_factory=list)
    #: Peers agreed on the AG-UI protocol_id (fingerprints), or ``"*"`` for every trusted peer.
    #: Others get ProtocolUnsupported and never see the id from us.
    agui_peers: list[str] | Literal["*"] = Field(default_factory=list)
    #: The agreed AG-UI protocol_id (experimental range; MAP-AGUI §2).
    agui_protocol_id: int = Field(default=0x35, ge=0x10, le=0xFF)
    #: Peer key → principal. With ``auth.mode = none`` unlisted peers act as the anonymous
    #: principal; otherwise an unlisted peer cannot start runs.
    peers: list[NpampPeer] = Field(default_factory=list)
    #: Max SafetyLabel effect of the anonymous principal (``auth.mode = none``); default
    #: non_idempotent_write, so unlabelled runs (treated as destructive) are refused.
    anonymous_max_effect: int = Field(default=2, ge=0, le=3)
    #: Channels that carry AG-UI runs: the Bridge channel, and the Interaction channel.
    channels: list[int] = Field(default_factory=lambda: [_BRIDGE], min_length=1)
    #: Frontend tool mode for runs started over N-PAMP (MAP-AGUI §5 item 3: next run).
    tool_result_mode: Literal["in-run", "next-run"] = "next-run"
    #: Seconds a run keeps going after its association drops, waiting for a resume.
    resume_grace_seconds: float = Field(default=60.0, ge=0)
    #: Announce the AG-UI protocol record on the Discovery channel to agreed peers.
    announce_discovery: bool = False
    #: Seconds allowed for each TLS / N-PAMP handshake step.
    handshake_timeout: float = Field(default=10.0, gt=0)

    @field_validator("agui_peers")
    @classmethod
    def _fingerprints(cls, value: list[str] | str) -> list[str] | str:
        return value if isinstance(value, str) else [_check_fingerprint(v) for v in value]

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if c not in (_BRIDGE, _INTERACTION)]
        if bad:
            raise ValueError(f"AG-UI rides channel 0x000D or 0x000F only, not {bad}")
        return sorted(set(value))
