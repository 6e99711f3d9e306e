"""JWT date claims are JSON numbers, and a refused token's 401 says nothing more."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from tests.helpers import app_client

from iobridge.app import Backend
from iobridge.auth import Authenticator, AuthSettings, JwtSettings
from iobridge.config import Settings
from iobridge.errors import AuthenticationError
from iobridge.http.app import create_app

SECRET = "test-secret-that-is-long-enough-for-hs256!"
#: An expiry far enough ahead that a slow suite never reaches it (tokens are made at import).
LATER = int(time.time()) + 10 * 365 * 86400


def authenticator() -> Authenticator:
    return Authenticator(AuthSettings(mode="jwt", jwt=JwtSettings(key=SECRET)))


def bearer(claims: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


@pytest.mark.parametrize(
    "claims",
    [{"exp": str(LATER)}, {"exp": LATER, "nbf": "0"}, {"exp": LATER, "iat": str(LATER - 9)},
     {"exp": True}, {"exp": [LATER]}, {"exp": float("inf")}, {"exp": float("nan")},
     {"exp": LATER, "nbf": float("-inf")}],
    ids=["exp-string", "nbf-string", "iat-string", "exp-bool", "exp-list", "exp-inf", "exp-nan",
         "nbf-minus-inf"],
)
def test_date_claims_must_be_finite_numbers(claims: dict[str, Any]) -> None:
    with pytest.raises(AuthenticationError) as info:
        authenticator().authenticate(bearer({"sub": "alice", **claims}))
    assert info.value.message == "invalid token"


def test_numeric_dates_are_accepted() -> None:
    claims = {"sub": "alice", "exp": LATER + 0.5, "nbf": 0, "iat": int(time.time())}
    assert authenticator().authenticate(bearer(claims)).id == "alice"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        database_url="memory://", auth=AuthSettings(mode="jwt", jwt=JwtSettings(key=SECRET))
    )
    async with app_client(create_app(Backend(settings))) as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [bearer({"sub": "alice", "exp": 1}),
     bearer({"sub": "alice", "exp": LATER, "nbf": LATER}),
     {"Authorization": "Bearer " + jwt.encode({"sub": "a", "exp": LATER}, "x" * 40)},
     {"Authorization": "Bearer not.a.token"},
     {"Authorization": "Bearer " + jwt.encode({"sub": "a", "exp": LATER}, "", algorithm="none")},
     bearer({"exp": LATER}),
     bearer({"sub": "alice", "exp": str(LATER)})],
    ids=["expired", "not-yet", "bad-signature", "garbage", "alg-none", "no-subject",
         "string-exp"],
)
async def test_every_refused_token_gets_the_same_generic_401(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await client.get("/io-bridge/threads", headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "UNAUTHORIZED", "message": "invalid token"}}
