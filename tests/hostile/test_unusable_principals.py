"""A principal or resource the store would refuse is refused at authentication (401), before
any run: a token naming one used to be accepted and its runs' messages silently dropped."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from pydantic import ValidationError
from tests.helpers import app_client, parse_sse, run_body

from iobridge.app import Backend
from iobridge.auth import ApiKeyEntry, AuthSettings, JwtSettings
from iobridge.config import NpampPeer, Settings
from iobridge.http.app import create_app
from iobridge.store import MemoryThreadStore

SECRET = "test-secret-that-is-long-enough-for-hs256!"
#: An expiry far enough ahead that a slow suite never reaches it (tokens are made at import).
LATER = int(time.time()) + 10 * 365 * 86400
FINGERPRINT = "sha256:" + "ab" * 32
#: Each is refused by ``validate_id``; the last cannot even be put in a JWT (not UTF-8).
UNUSABLE = ["line\nbreak", "esc\x1b[31m", "nul\x00", "tab\tbed", "x" * 257, "lone\ud800"]
IN_TOKENS = UNUSABLE[:-1]


def _token(principal: str, resources: Any) -> dict[str, str]:
    claims = {"sub": principal, "res": resources, "exp": LATER}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


@pytest.mark.parametrize("where", ["principal", "resource", "second resource"])
@pytest.mark.parametrize("bad", IN_TOKENS, ids=range(len(IN_TOKENS)))
async def test_a_token_naming_an_unusable_id_is_401_and_starts_nothing(
    where: str, bad: str
) -> None:
    store = MemoryThreadStore()
    settings = Settings(auth=AuthSettings(mode="jwt", jwt=JwtSettings(
        key=SECRET, resource_claim="res")))
    principal, resources = {
        "principal": (bad, ["shop"]), "resource": ("alice", bad),
        "second resource": ("alice", ["shop", bad]),
    }[where]
    async with app_client(create_app(Backend(settings, store=store))) as client:
        refused = await client.post("/io-bridge/run", json=run_body("hi"),
                                    headers=_token(principal, resources))
        assert refused.status_code == 401
        assert refused.json() == {"error": {"code": "UNAUTHORIZED", "message": "invalid token"}}
        # The same token with usable ids runs and is stored.
        ok = await client.post("/io-bridge/run", json=run_body("hi"),
                               headers=_token("alice", ["shop"]))
        assert parse_sse(ok.text)[-1]["type"] == "RUN_FINISHED"
    assert [t.id for t in (await store.list_threads(frozenset({"shop"}), limit=10))[0]] == ["t1"]


@pytest.mark.parametrize("bad", UNUSABLE, ids=range(len(UNUSABLE)))
@pytest.mark.parametrize("field", ["principal", "resource_ids", "default_resource"])
def test_configured_principals_and_resources_must_be_usable_ids(field: str, bad: str) -> None:
    values: dict[str, Any] = {"principal": "alice", field: [bad] if field == "resource_ids"
                              else bad}
    with pytest.raises(ValidationError, match="not a usable id"):
        ApiKeyEntry(sha256="0" * 64, **values)
    with pytest.raises(ValidationError, match="not a usable id"):
        NpampPeer(fingerprint=FINGERPRINT, **values)
    ApiKeyEntry(sha256="0" * 64, principal="alice", resource_ids=["shop"])  # usable: fine
