"""``npamp`` settings validation and the peer directory (key → principal, agreement, trust)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from iobridge.auth import Authenticator, AuthSettings
from iobridge.config import NpampSettings, Settings
from iobridge.npamp.handshake import IdentityKey, SignatureScheme
from iobridge.npamp_server.principals import PeerDirectory

ALICE = IdentityKey.generate(SignatureScheme.ED25519)
BOB = IdentityKey.generate(SignatureScheme.ED25519)
ED = SignatureScheme.ED25519
API_KEYS = AuthSettings(mode="api-key", api_keys=[{"sha256": "0" * 64, "principal": "x"}])


def test_defaults_agree_with_nobody_and_listen_nowhere() -> None:
    settings = Settings().npamp
    assert settings.port is None and settings.agui_peers == []
    directory = PeerDirectory(settings, Authenticator(AuthSettings()))
    assert not directory.agreed(ALICE.public_key)
    assert not directory.trusts(ED, ALICE.public_key)
    assert settings.tool_result_mode == "next-run" and settings.channels == [0x000D]


@pytest.mark.parametrize(
    "values",
    [
        {"agui_peers": ["sha256:xyz"]},
        {"peers": [{"fingerprint": "md5:00", "principal": "p"}]},
        {"peers": [{"fingerprint": ALICE.fingerprint, "principal": "p", "resource_ids": []}]},
        {"peers": [{"fingerprint": ALICE.fingerprint, "principal": "p", "max_effect": 4}]},
        {"channels": [0x000C]},
        {"channels": []},
        {"agui_protocol_id": 0x00},
        {"backlog": 0},
        {"backlog": 65536},
        {"unknown": 1},
    ],
)
def test_bad_settings_are_rejected(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        NpampSettings.model_validate(values)


def test_backlog_limits_are_accepted() -> None:
    assert NpampSettings().backlog == 2048
    assert NpampSettings(backlog=1).backlog == 1
    assert NpampSettings(backlog=65535).backlog == 65535


def test_settings_load_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBRIDGE_NPAMP__PORT", "7443")
    monkeypatch.setenv("IOBRIDGE_NPAMP__AGUI_PEERS", '"*"')
    settings = Settings.load()
    assert settings.npamp.port == 7443 and settings.npamp.agui_peers == "*"


def test_configured_peer_maps_to_its_principal_and_others_to_nobody() -> None:
    settings = NpampSettings(
        peers=[
            {"fingerprint": ALICE.fingerprint.upper().replace("SHA256", "sha256"),
             "principal": "alice", "resource_ids": ["ra", "rb"], "max_effect": 1},
        ],
        agui_peers=[ALICE.fingerprint],
    )
    directory = PeerDirectory(settings, Authenticator(API_KEYS))
    alice = directory.principal(ALICE.public_key)
    assert alice is not None
    assert (alice.id, alice.resource_ids, alice.default_resource, alice.max_effect) == (
        "alice", frozenset({"ra", "rb"}), "ra", 1,
    )
    assert directory.principal(BOB.public_key) is None
    assert directory.trusts(ED, ALICE.public_key) and not directory.trusts(ED, BOB.public_key)
    assert directory.agreed(ALICE.public_key) and not directory.agreed(BOB.public_key)


def test_auth_none_makes_unlisted_peers_anonymous_with_the_configured_ceiling() -> None:
    settings = NpampSettings(agui_peers="*", trusted_peers="*", anonymous_max_effect=1)
    directory = PeerDirectory(settings, Authenticator(AuthSettings()))
    anon = directory.principal(BOB.public_key)
    assert anon is not None and anon.id == "anonymous" and anon.max_effect == 1
    assert anon.resource_ids is None
    assert directory.trusts(ED, BOB.public_key) and directory.agreed(BOB.public_key)


def test_trusted_peers_accepts_key_files(tmp_path: object) -> None:
    from pathlib import Path

    from iobridge.npamp.handshake import generate_identity

    path = Path(str(tmp_path)) / "peer"
    key = generate_identity(ED, path)
    settings = NpampSettings(trusted_peers=[str(path) + ".pub"])
    directory = PeerDirectory(settings, Authenticator(AuthSettings()))
    assert directory.trusts(ED, key.public_key) and not directory.trusts(ED, BOB.public_key)
    assert not directory.agreed(key.public_key)  # trust is not agreement
