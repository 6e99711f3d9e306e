"""The AG-UI client's per-association and per-event shortcuts keep their meaning."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from tests.helpers import run_body

from iobridge.npamp.errors import TransportError
from iobridge.npamp.handshake import IdentityKey
from iobridge.npamp.handshake.machine import UntrustedPeer
from iobridge.npamp_server import client as agui_client

from .conftest import StartHarness


def _write_public(key: IdentityKey, path: Path) -> None:
    """Replace ``path`` by a new file (a new inode: both exist until the rename)."""
    pem = key.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    staged = path.with_suffix(".new")
    staged.write_bytes(pem)
    os.replace(staged, path)


async def test_a_pinned_key_file_is_reread_when_it_changes(
    harness: StartHarness, client_key: Any, server_key: IdentityKey, other_key: IdentityKey,
    tmp_path: Path,
) -> None:
    pin = tmp_path / "server.pub"
    _write_public(other_key, pin)
    async with harness() as h:
        with pytest.raises(UntrustedPeer):
            async with agui_client.connect("127.0.0.1", h.port, identity=client_key, pinned=[pin]):
                pass
        _write_public(server_key, pin)
        for run_id in ("p1", "p2"):  # the second connect uses the cached allowlist
            async with agui_client.connect(
                "127.0.0.1", h.port, identity=client_key, pinned=[pin]
            ) as client:
                events = [e.type async for e in client.run(run_body("hi", run_id=run_id))]
            assert events[-1] == "RUN_FINISHED"


async def test_the_listener_serves_with_the_smallest_backlog(
    harness: StartHarness, client_key: Any
) -> None:
    async with harness(npamp={"backlog": 1}) as h:
        for run_id in ("b1", "b2"):
            async with h.client(client_key) as client:
                events = [e.type async for e in client.run(run_body("hi", run_id=run_id))]
            assert events[-1] == "RUN_FINISHED"


async def test_a_run_over_an_association_leaves_no_reference_cycles_of_the_client(
    harness: StartHarness, client_key: Any
) -> None:
    """The AG-UI client, its streams and sessions, the association and its connection are
    freed by reference counting once the run and the association ended: nothing of the N-PAMP
    client and server is left to the cyclic collector."""
    async with harness() as h:
        async with h.client(client_key) as client:  # warm up
            [e.type async for e in client.run(run_body("hi", run_id="c0"))]
        await asyncio.sleep(0.1)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            async with h.client(client_key) as client:
                events = [e.type async for e in client.run(run_body("hi", run_id="c1"))]
            del client
            await asyncio.sleep(0.1)  # the server's side finishes closing
            gc.collect()
            ours = sorted(
                type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.startswith(("iobridge.npamp", "iobridge.npamp_server"))
            )
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
    assert events[-1] == "RUN_FINISHED"
    assert ours == []


async def test_a_batch_the_client_cannot_handle_ends_its_streams_and_surfaces_at_close(
    harness: StartHarness, client_key: Any
) -> None:
    """As when its reader task failed: the stream ends with TransportError, nothing more is
    read, and leaving the client raises what the handling raised."""

    def broken(received: Any) -> Any:
        raise ValueError("undecodable batch")

    async with harness() as h:
        with pytest.raises(ValueError, match="undecodable batch"):
            async with h.client(client_key) as client:
                client._handle = broken  # type: ignore[method-assign]
                with pytest.raises(TransportError):
                    [e async for e in client.run(run_body("hi", run_id="broken"))]


def test_pinned_allowlists_are_parsed_once_and_bounded(other_key: IdentityKey) -> None:
    agui_client._pinned.clear()
    first = agui_client._pinned_peers([other_key.fingerprint])
    assert agui_client._pinned_peers([other_key.fingerprint]) is first
    limit = agui_client.PINNED_CACHE_SIZE
    for i in range(limit + 5):
        agui_client._pinned_peers([f"sha256:{i:064x}"])
    assert len(agui_client._pinned) == limit
    with pytest.raises(ValueError, match="malformed fingerprint"):
        agui_client._pinned_peers(["sha256:nothex"])
    assert len(agui_client._pinned) == limit
    agui_client._pinned.clear()


def test_transport_settings_are_built_once_per_identity_verifier_and_timeout(
    client_key: IdentityKey, other_key: IdentityKey
) -> None:
    agui_client._configs.clear()
    pins = agui_client._pinned_peers([other_key.fingerprint])
    config = agui_client._transport_config(client_key, pins, 10.0)
    assert agui_client._transport_config(client_key, pins, 10.0) is config
    assert config.handshake.identities == [client_key] and config.handshake_timeout == 10.0
    assert config.handshake.peer_verifier is pins
    others = [
        agui_client._transport_config(other_key, pins, 10.0),
        agui_client._transport_config(client_key, pins, 2.5),
        agui_client._transport_config(client_key, lambda scheme, key: True, 10.0),
    ]
    assert all(o is not config for o in others) and len(set(map(id, others))) == 3
    assert others[1].handshake_timeout == 2.5 and others[0].handshake.identities == [other_key]
    limit = agui_client.CONFIG_CACHE_SIZE
    for _ in range(limit + 5):  # a new verifier each time: each its own entry, bounded
        agui_client._transport_config(client_key, lambda scheme, key: True, 10.0)
    assert len(agui_client._configs) == limit
    agui_client._configs.clear()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"CUSTOM","value":{"f":1.5,"s":"\\u00e9\\ud83d\\ude00","n":null}}',
        b'{"type":"CUSTOM","value":NaN,"big":123456789012345678901234567890}',  # json only
    ],
)
def test_event_json_is_decoded_like_json_loads(raw: bytes) -> None:
    assert json.dumps(agui_client._loads(raw)) == json.dumps(json.loads(raw))


def test_event_json_that_json_refuses_is_refused() -> None:
    with pytest.raises(json.JSONDecodeError):
        agui_client._loads(b'{"type":')
