"""Harness: one Backend served over HTTP (in-process ASGI) and N-PAMP (TLS, loopback)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from iobridge.agents.base import Agent
from iobridge.app import Backend
from iobridge.config import Settings
from iobridge.http.app import create_app
from iobridge.npamp.aio import (
    Association,
    TransportConfig,
    client_ssl_context,
    connect,
    self_signed_certificate,
    server_ssl_context,
)
from iobridge.npamp.association import FrameReceived
from iobridge.npamp.bridge import (
    BridgeFrameType,
    BridgeMessage,
    BridgeSession,
    Effect,
    SafetyLabel,
    pull_bridge_message,
    push_bridge_message,
)
from iobridge.npamp.handshake import HandshakeConfig, IdentityKey, PinnedPeers, SignatureScheme
from iobridge.npamp_server import client as agui_client
from iobridge.npamp_server.server import AgUiServer

BRIDGE, INTERACTION, DISCOVERY = 0x000D, 0x000F, 0x0010
WAIT = 5.0
#: What our client attaches by default.
LABEL = SafetyLabel(effect=Effect.NON_IDEMPOTENT_WRITE)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("npamp-tls"))


@pytest.fixture(scope="session")
def server_key() -> IdentityKey:
    return IdentityKey.generate(SignatureScheme.ED25519)


@pytest.fixture(scope="session")
def client_key() -> IdentityKey:
    return IdentityKey.generate(SignatureScheme.ED25519)


@pytest.fixture(scope="session")
def other_key() -> IdentityKey:
    return IdentityKey.generate(SignatureScheme.ED25519)


class Harness:
    """A running Backend: ``http`` (ASGI client), ``server`` (N-PAMP) and client helpers."""

    def __init__(self, backend: Backend, server: AgUiServer, port: int, server_key: IdentityKey):
        self.backend, self.server, self.port, self.server_key = backend, server, port, server_key
        self.http: httpx.AsyncClient | None = None

    @property
    def runtime(self) -> Any:
        return self.backend.runtime

    def run(self, run_id: str, owner: str = "anonymous") -> Any:
        """The engine's record of a run (``owner``: the principal that started it)."""
        return self.runtime.get_run(owner, run_id)

    def client(self, identity: IdentityKey, **kwargs: Any) -> Any:
        """``async with h.client(key) as c`` — our AG-UI client."""
        return agui_client.connect(
            "127.0.0.1", self.port, identity=identity, pinned=[self.server_key.fingerprint],
            **kwargs,
        )

    @contextlib.asynccontextmanager
    async def raw(self, identity: IdentityKey) -> AsyncIterator[RawPeer]:
        """A bare association, to send hand-built Bridge payloads."""
        config = TransportConfig(
            handshake=HandshakeConfig(
                identities=[identity], peer_verifier=PinnedPeers([self.server_key.fingerprint])
            ),
            handshake_timeout=WAIT,
            close_timeout=2.0,
        )
        async with connect("127.0.0.1", self.port, client_ssl_context(verify=False), config) as a:
            yield RawPeer(a)


class RawPeer:
    """Hand-driven consumer: build payloads with a BridgeSession or by hand, read frames."""

    def __init__(self, assoc: Association) -> None:
        self.assoc = assoc
        self.session = BridgeSession(protocol_id=0x35)

    def run_payload(
        self, corr: bytes, body: bytes, label: SafetyLabel | None = LABEL
    ) -> bytes:
        self.session.start_run(corr, body, safety_label=label or LABEL)
        ((_, payload),) = self.session.data_to_send()
        if label is None:  # re-encode the same request without its SafetyLabel
            msg = pull_bridge_message(BridgeFrameType.BRIDGE_REQUEST, payload)
            payload = push_bridge_message(
                BridgeMessage(
                    frame_type=msg.frame_type, envelope=msg.envelope, body=msg.body
                )
            )
        return payload

    async def send(self, frame_type: int, payload: bytes, channel: int = BRIDGE) -> None:
        await self.assoc.send(channel, frame_type, payload)

    async def frame(self, channel: int | None = BRIDGE, timeout: float = WAIT) -> FrameReceived:
        async with asyncio.timeout(timeout):
            return await self.assoc.receive(channel)

    async def stream(self, channel: int = BRIDGE) -> list[BridgeMessage]:
        """Every Bridge message up to and including the first END or ERROR."""
        out: list[BridgeMessage] = []
        while True:
            frame = await self.frame(channel)
            msg = pull_bridge_message(frame.frame_type, frame.payload)
            out.append(msg)
            if msg.frame_type in (BridgeFrameType.BRIDGE_STREAM_END, BridgeFrameType.BRIDGE_ERROR):
                return out

    async def silent(self, channel: int | None = BRIDGE, timeout: float = 0.3) -> bool:
        """True when no frame arrives within ``timeout``."""
        try:
            await self.frame(channel, timeout)
        except TimeoutError:
            return True
        return False


StartHarness = Callable[..., contextlib.AbstractAsyncContextManager[Harness]]


@pytest.fixture
def harness(
    certs: tuple[Path, Path], server_key: IdentityKey
) -> StartHarness:
    """``async with harness(agents=[...], npamp={...}, **settings) as h``."""

    @contextlib.asynccontextmanager
    async def start(
        *, agents: list[Agent] | None = None, **overrides: Any
    ) -> AsyncIterator[Harness]:
        npamp = {"agui_peers": "*", "trusted_peers": "*", **overrides.pop("npamp", {})}
        overrides.setdefault("database_url", "memory://")
        settings = Settings(npamp=npamp, **overrides)
        async with Backend(settings, agents=agents or []) as backend:
            app = create_app(backend)
            server = AgUiServer(backend, identity=server_key)
            listener = await server.listen("127.0.0.1", 0, server_ssl_context(*certs))
            h = Harness(backend, server, listener.port, server_key)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                h.http = http
                try:
                    yield h
                finally:
                    async with asyncio.timeout(10):
                        await listener.wait_closed()

    return start
