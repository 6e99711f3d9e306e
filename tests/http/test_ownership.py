"""Authentication and resource ownership: unit tests of ``iobridge.auth`` and the HTTP matrix.

Matrix: two principals (alice, bob) × every thread/agent route × {api-key, jwt}. Bob gets a
404 for each of alice's threads (exactly the answer for a missing thread), and nothing of
alice's changes; any request without or with bad credentials gets a 401.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from pydantic import ValidationError
from tests.backends import SQL_BACKENDS, open_backend
from tests.helpers import app_client, parse_sse, run_body

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import (
    ApiKeyEntry,
    Authenticator,
    AuthSettings,
    JwtSettings,
    Principal,
    hash_api_key,
)
from iobridge.config import Settings
from iobridge.errors import AuthenticationError, InputError, NotFoundError
from iobridge.http.app import create_app
from iobridge.store import ThreadStore

BASE = "/io-bridge"
SECRET = "test-secret-that-is-long-enough-for-hs256!"
ALICE_KEY, BOB_KEY = "alice-key-1", "bob-key-2"


def token(claims: dict[str, Any], key: str = SECRET, **extra: Any) -> str:
    body = {"exp": int(time.time()) + 600, **claims, **extra}
    return jwt.encode(body, key, algorithm="HS256")


def api_key_settings() -> AuthSettings:
    return AuthSettings(
        mode="api-key",
        api_keys=[
            ApiKeyEntry(sha256=hash_api_key(ALICE_KEY), principal="alice", resource_ids=["alice"]),
            ApiKeyEntry(
                key_env="BOB_KEY", principal="bob", resource_ids=["bob", "team"], max_effect=1
            ),
        ],
    )


def jwt_settings(**overrides: Any) -> AuthSettings:
    return AuthSettings(mode="jwt", jwt=JwtSettings(key=SECRET, **overrides))


# --- unit: iobridge.auth -----------------------------------------------------------------


def test_mode_none_is_anonymous_and_resource_comes_from_request() -> None:
    auth = Authenticator(AuthSettings())
    principal = auth.authenticate({})
    assert principal.resource_ids is None
    assert auth.resolve_resource(principal, None) == "default"
    assert auth.resolve_resource(principal, "u1") == "u1"
    assert auth.can_access(principal, "anything")
    assert auth.list_scope(principal, None) == frozenset({"default"})
    with pytest.raises(InputError):
        auth.resolve_resource(principal, "")


def test_api_keys_by_header_bearer_and_env() -> None:
    auth = Authenticator(api_key_settings(), environ={"BOB_KEY": BOB_KEY})
    alice = auth.authenticate({"X-API-Key": ALICE_KEY})
    assert alice == Principal(
        id="alice", resource_ids=frozenset({"alice"}), default_resource="alice", max_effect=3
    )
    bob = auth.authenticate({"authorization": f"Bearer {BOB_KEY}"})
    assert (bob.id, bob.default_resource, bob.max_effect) == ("bob", "bob", 1)
    assert auth.resolve_resource(bob, "team") == "team"
    assert auth.list_scope(bob, None) == frozenset({"bob", "team"})
    with pytest.raises(NotFoundError):
        auth.resolve_resource(bob, "alice")
    assert not auth.can_access(alice, "bob")


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing API key"),
        ({"X-API-Key": ""}, "missing API key"),
        ({"X-API-Key": "wrong"}, "invalid API key"),
        ({"Authorization": "Basic abc"}, "missing API key"),
        ({"Authorization": "Bearer"}, "missing API key"),
        ({"Authorization": f"Token {ALICE_KEY}"}, "missing API key"),
        ({"Authorization": f"Bearer {ALICE_KEY}x"}, "invalid API key"),
    ],
)
def test_api_key_rejections(headers: dict[str, str], message: str) -> None:
    auth = Authenticator(api_key_settings(), environ={"BOB_KEY": BOB_KEY})
    with pytest.raises(AuthenticationError) as info:
        auth.authenticate(headers)
    assert info.value.status == 401 and info.value.code == "UNAUTHORIZED"
    assert info.value.reason == message  # the client sees only a generic message
    assert info.value.message in ("invalid token", message)


def test_bearer_scheme_is_case_insensitive_and_spacing_tolerant() -> None:
    auth = Authenticator(api_key_settings(), environ={"BOB_KEY": BOB_KEY})
    for header in (f"bearer {ALICE_KEY}", f"  BEARER   {ALICE_KEY}  ", f"Bearer  {ALICE_KEY}"):
        assert auth.authenticate({"Authorization": header}).id == "alice"


def test_settings_validation() -> None:
    with pytest.raises(ValidationError):
        AuthSettings(mode="api-key")
    with pytest.raises(ValidationError):
        AuthSettings(mode="jwt")
    with pytest.raises(ValidationError):
        ApiKeyEntry(principal="p")  # neither digest nor env var
    with pytest.raises(ValidationError):
        ApiKeyEntry(sha256="abc", principal="p")  # not a SHA-256 digest
    with pytest.raises(ValidationError):
        ApiKeyEntry(sha256=hash_api_key("k"), principal="p", resource_ids=[])
    with pytest.raises(ValidationError):
        JwtSettings()
    with pytest.raises(ValueError, match="BOB_KEY"):
        Authenticator(api_key_settings(), environ={})
    entry = ApiKeyEntry.model_validate(
        {"sha256": hash_api_key("k"), "principal": "p", "resource_ids": ["r"], "max_effect": 2}
    )
    assert entry.resource_ids == ["r"] and entry.max_effect == 2


def test_jwt_principal_from_claims(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(SECRET)
    auth = Authenticator(
        AuthSettings(
            mode="jwt",
            jwt=JwtSettings(
                key_file=key_file,
                audience="iobridge",
                issuer="https://issuer",
                resource_claim="resources",
                principal_claim="email",
                max_effect_claim="effect",
            ),
        )
    )
    good = token(
        {"email": "a@x", "resources": ["r1", "r2"], "effect": 2},
        aud="iobridge",
        iss="https://issuer",
    )
    principal = auth.authenticate({"Authorization": f"Bearer {good}"})
    assert principal == Principal(
        id="a@x", resource_ids=frozenset({"r1", "r2"}), default_resource="r1", max_effect=2
    )


def aud_token(claims: dict[str, Any], **extra: Any) -> str:
    return token(claims, aud="iobridge", **extra)


# Each bad token is otherwise valid (right audience, unexpired), so it fails for its own reason.
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: token({"sub": "alice"}, "another-secret-long-enough-for-hs256", aud="iobridge"),
         "invalid token: Signature verification failed"),
        (lambda: aud_token({"sub": "alice"}, exp=int(time.time()) - 3600),
         "invalid token: Signature has expired"),
        (lambda: jwt.encode({"sub": "alice", "aud": "iobridge"}, SECRET, algorithm="HS256"),
         'invalid token: Token is missing the "exp" claim'),
        (lambda: token({"sub": "alice"}, aud="someone-else"),
         "invalid token: Audience doesn't match"),
        (lambda: token({"sub": "alice"}), 'invalid token: Token is missing the "aud" claim'),
        (lambda: aud_token({"sub": ""}), "token lacks the principal or resource claim"),
        (lambda: aud_token({"sub": 5}), "invalid token: Subject must be a string"),
        (lambda: aud_token({}), "token lacks the principal or resource claim"),
        (lambda: "not.a.token", "invalid token: Invalid header padding"),
        (lambda: jwt.encode({"sub": "alice", "aud": "iobridge", "exp": 2**40}, "", "none"),
         "invalid token: The specified alg value is not allowed"),
    ],
)
def test_jwt_rejections(make: Callable[[], str], message: str) -> None:
    auth = Authenticator(jwt_settings(audience="iobridge"))
    good = aud_token({"sub": "alice"})
    assert auth.authenticate({"Authorization": f"Bearer {good}"}).id == "alice"
    with pytest.raises(AuthenticationError) as info:
        auth.authenticate({"Authorization": f"Bearer {make()}"})
    assert info.value.reason == message  # the client sees only a generic message
    assert info.value.message in ("invalid token", message)


def test_jwt_requires_bearer() -> None:
    auth = Authenticator(jwt_settings())
    with pytest.raises(AuthenticationError, match=r"^missing bearer token$"):
        auth.authenticate({"X-API-Key": token({"sub": "alice"})})


def test_jwt_issuer_is_checked_when_configured() -> None:
    auth = Authenticator(jwt_settings(issuer="https://issuer"))
    ok = token({"sub": "alice"}, iss="https://issuer")
    assert auth.authenticate({"Authorization": f"Bearer {ok}"}).id == "alice"
    for bad in (token({"sub": "alice"}, iss="https://other"), token({"sub": "alice"})):
        with pytest.raises(AuthenticationError, match=r"^invalid token: "):
            auth.authenticate({"Authorization": f"Bearer {bad}"})


def test_jwt_without_configured_audience_ignores_the_aud_claim() -> None:
    auth = Authenticator(jwt_settings())
    principal = auth.authenticate({"Authorization": f"Bearer {token({'sub': 'u'}, aud='any')}"})
    assert principal == Principal(
        id="u", resource_ids=frozenset({"u"}), default_resource="u", max_effect=3
    )


def test_jwt_exp_is_optional_only_when_configured() -> None:
    no_exp = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    assert Authenticator(jwt_settings(require_exp=False)).authenticate(
        {"Authorization": f"Bearer {no_exp}"}
    ).id == "alice"
    with pytest.raises(AuthenticationError, match="exp"):
        Authenticator(jwt_settings()).authenticate({"Authorization": f"Bearer {no_exp}"})


def test_jwt_leeway_accepts_a_just_expired_token_only() -> None:
    auth = Authenticator(jwt_settings(leeway_seconds=30))
    recent = token({"sub": "alice"}, exp=int(time.time()) - 10)
    assert auth.authenticate({"Authorization": f"Bearer {recent}"}).id == "alice"
    stale = token({"sub": "alice"}, exp=int(time.time()) - 60)
    with pytest.raises(AuthenticationError, match="expired"):
        auth.authenticate({"Authorization": f"Bearer {stale}"})


@pytest.mark.parametrize(
    "claims",
    [
        {"email": "", "resources": ["r"]},
        {"email": 5, "resources": ["r"]},
        {"resources": ["r"]},
        {"email": "a@x", "resources": []},
        {"email": "a@x", "resources": 7},
        {"email": "a@x"},
        {"email": "a@x", "resources": ["r", ""]},
        {"email": "a@x", "resources": ["r", 5]},
    ],
)
def test_jwt_principal_and_resource_claims_are_each_checked(claims: dict[str, Any]) -> None:
    auth = Authenticator(jwt_settings(principal_claim="email", resource_claim="resources"))
    good = token({"email": "a@x", "resources": "r"})
    assert auth.authenticate({"Authorization": f"Bearer {good}"}).resource_ids == {"r"}
    with pytest.raises(AuthenticationError, match=r"^token lacks the principal or resource claim$"):
        auth.authenticate({"Authorization": f"Bearer {token(claims)}"})


@pytest.mark.parametrize(
    ("claims", "expected"), [({}, 3), ({"effect": 0}, 0), ({"effect": 3}, 3)]
)
def test_jwt_max_effect_claim_bounds(claims: dict[str, Any], expected: int) -> None:
    auth = Authenticator(jwt_settings(max_effect_claim="effect"))
    principal = auth.authenticate({"Authorization": f"Bearer {token({'sub': 'u', **claims})}"})
    assert principal.max_effect == expected


@pytest.mark.parametrize("effect", [-1, 4, True, "2", 1.0, None])
def test_jwt_bad_max_effect_claims_are_rejected(effect: object) -> None:
    auth = Authenticator(jwt_settings(max_effect_claim="effect"))
    bad = token({"sub": "u", "effect": effect})
    with pytest.raises(AuthenticationError, match=r"^token has an invalid max effect claim$"):
        auth.authenticate({"Authorization": f"Bearer {bad}"})


def test_empty_jwt_keys_refuse_to_start(tmp_path: Path) -> None:
    empty = tmp_path / "key"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"^the JWT key is empty \("):
        Authenticator(AuthSettings(mode="jwt", jwt=JwtSettings(key_file=empty)))
    with pytest.raises(ValueError, match=r"^the JWT key is empty \("):
        Authenticator(AuthSettings(mode="jwt", jwt=JwtSettings(key="")))


def test_resource_errors_name_the_field_and_never_the_owner() -> None:
    auth = Authenticator(api_key_settings(), environ={"BOB_KEY": BOB_KEY})
    bob = auth.authenticate({"X-API-Key": BOB_KEY})
    with pytest.raises(InputError) as bad:
        auth.resolve_resource(bob, 5)
    assert bad.value.message == "resourceId must be a non-empty string"
    assert bad.value.code == "INVALID_ID"
    with pytest.raises(NotFoundError) as foreign:
        auth.resolve_resource(bob, "alice")
    assert foreign.value.message == "resource not found"
    assert foreign.value.code == "RESOURCE_NOT_FOUND"
    assert auth.list_scope(bob, "team") == {"team"}


# --- HTTP matrix ---------------------------------------------------------------------------


class NullAgent(Agent):
    id = "helper"
    name = "Helper"

    async def run(self, ctx: Any) -> Any:  # pragma: no cover - never run here
        yield None


Creds = dict[str, dict[str, str]]


def credentials(mode: str) -> Creds:
    if mode == "api-key":
        return {
            "alice": {"X-API-Key": ALICE_KEY},
            "bob": {"Authorization": f"Bearer {BOB_KEY}"},
            "bad": {"X-API-Key": "guess"},
        }
    return {
        "alice": {"Authorization": f"Bearer {token({'sub': 'alice'})}"},
        "bob": {"Authorization": f"Bearer {token({'sub': 'bob'})}"},
        "bad": {"Authorization": f"Bearer {token({'sub': 'alice'}, exp=1)}"},
    }


@pytest.fixture(params=SQL_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture(params=["api-key", "jwt"])
async def rig(
    request: pytest.FixtureRequest, store: ThreadStore, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, Creds]]:
    """``create_app`` with its lifespan, over the store under test."""
    mode = request.param
    monkeypatch.setenv("BOB_KEY", BOB_KEY)
    auth = api_key_settings() if mode == "api-key" else jwt_settings()
    app = create_app(Backend(Settings(auth=auth), agents=[NullAgent()], store=store))
    async with app_client(app) as c:
        yield c, credentials(mode)


ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/threads/{tid}", {}),
    ("PATCH", "/threads/{tid}", {"json": {"title": "pwned"}}),
    ("DELETE", "/threads/{tid}", {}),
    ("GET", "/threads/{tid}/messages", {}),
    ("GET", "/threads/{tid}/messages", {"params": {"limit": 1}}),
]


async def _alice_thread(client: httpx.AsyncClient, creds: Creds, store: ThreadStore) -> Any:
    created = await client.post(
        f"{BASE}/threads", json={"id": "secret", "title": "Alice's"}, headers=creds["alice"]
    )
    assert created.status_code == 201
    assert created.json()["resourceId"] == "alice"
    await store.append_messages("secret", [{"id": "m1", "role": "user", "content": "private"}])
    return (await client.get(f"{BASE}/threads/secret", headers=creds["alice"])).json()


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES)
async def test_foreign_thread_is_404_like_a_missing_one(
    rig: tuple[httpx.AsyncClient, Creds],
    store: ThreadStore,
    method: str,
    path: str,
    kwargs: dict[str, Any],
) -> None:
    client, creds = rig
    before = await _alice_thread(client, creds, store)
    foreign = await client.request(
        method, BASE + path.format(tid="secret"), headers=creds["bob"], **kwargs
    )
    missing = await client.request(
        method, BASE + path.format(tid="no-such"), headers=creds["bob"], **kwargs
    )
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["code"] == missing.json()["error"]["code"] == "THREAD_NOT_FOUND"
    # Alice still sees her thread, unchanged.
    after = await client.get(f"{BASE}/threads/secret", headers=creds["alice"])
    assert after.json() == before
    assert [m["id"] for m in await store.list_messages("secret")] == ["m1"]


async def test_listing_and_creating_across_resources(
    rig: tuple[httpx.AsyncClient, Creds], store: ThreadStore
) -> None:
    client, creds = rig
    await _alice_thread(client, creds, store)
    bob_list = await client.get(f"{BASE}/threads", headers=creds["bob"])
    assert bob_list.json() == {"threads": []}
    snoop = await client.get(
        f"{BASE}/threads", params={"resourceId": "alice"}, headers=creds["bob"]
    )
    assert snoop.status_code == 404
    plant = await client.post(
        f"{BASE}/threads", json={"id": "planted", "resourceId": "alice"}, headers=creds["bob"]
    )
    assert plant.status_code == 404
    assert await store.get_thread("planted") is None
    alice_list = await client.get(f"{BASE}/threads", headers=creds["alice"])
    assert [t["id"] for t in alice_list.json()["threads"]] == ["secret"]


ALL_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/threads", {"json": {"id": "x"}}),
    ("GET", "/threads", {}),
    *ROUTES,
    ("GET", "/agents", {}),
    ("GET", "/agents/helper", {}),
]


# Authentication happens before any store access; one SQL backend is enough here.
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize("who", ["none", "bad"])
@pytest.mark.parametrize(("method", "path", "kwargs"), ALL_ROUTES)
async def test_missing_or_bad_credentials_are_401(
    rig: tuple[httpx.AsyncClient, Creds],
    store: ThreadStore,
    who: str,
    method: str,
    path: str,
    kwargs: dict[str, Any],
) -> None:
    client, creds = rig
    await _alice_thread(client, creds, store)
    headers = creds["bad"] if who == "bad" else {}
    response = await client.request(
        method, BASE + path.format(tid="secret"), headers=headers, **kwargs
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert await store.get_thread("x") is None
    thread = await store.get_thread("secret")
    assert thread is not None and thread.title == "Alice's"


async def test_agents_with_credentials(rig: tuple[httpx.AsyncClient, Creds]) -> None:
    client, creds = rig
    listed = await client.get(f"{BASE}/agents", headers=creds["bob"])
    assert [a["id"] for a in listed.json()["agents"]] == ["demo", "helper"]


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Basic YWxpY2U6eA=="},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer  "},
        {"X-API-Key": ""},
        {"Authorization": "bearer x.y.z"},
    ],
)
async def test_malformed_authorization_headers_are_401(
    rig: tuple[httpx.AsyncClient, Creds], headers: dict[str, str]
) -> None:
    client, _ = rig
    response = await client.get(f"{BASE}/threads", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"


# --- runs: another principal's busy threads and runIds are as if absent ---------------------


class Gate:
    """Agents for the run matrix: ``paced`` waits for the gate, ``quick`` answers at once."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def agents(self) -> list[Agent]:
        gate = self.event

        async def paced(ctx: RunContext) -> AsyncIterator[AgentOutput]:
            yield "waiting "
            await gate.wait()
            yield "done"

        async def quick(ctx: RunContext) -> AsyncIterator[AgentOutput]:
            yield "hi"

        return [FunctionAgent(paced, id="paced"), FunctionAgent(quick, id="quick")]


RunRig = tuple[httpx.AsyncClient, Creds, Backend, Gate]


@pytest.fixture(params=["api-key", "jwt"])
async def run_rig(
    request: pytest.FixtureRequest, store: ThreadStore, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunRig]:
    """The real app over an opened Backend (thread memory on) with the two agents."""
    mode = request.param
    monkeypatch.setenv("BOB_KEY", BOB_KEY)
    auth = api_key_settings() if mode == "api-key" else jwt_settings()
    gate = Gate()
    app = create_app(Backend(Settings(auth=auth), agents=gate.agents(), store=store))
    async with app_client(app) as client:
        yield client, credentials(mode), app.state.backend, gate
        gate.event.set()


async def _alice_runs(client: httpx.AsyncClient, creds: Creds, backend: Backend) -> Any:
    """Alice's finished run ``r-done`` on thread ``idle`` and live run ``r-live`` on ``busy``."""
    done = await client.post(
        f"{BASE}/run",
        json=run_body("x", thread_id="idle", run_id="r-done", agentId="quick"),
        headers=creds["alice"],
    )
    assert done.status_code == 200 and '"RUN_FINISHED"' in done.text
    alice = backend.authenticator.authenticate(creds["alice"])
    # A live run holds its stream open, which the in-process transport would wait out:
    # start it on the Backend itself; Bob's requests below all go through HTTP.
    live = await backend.start_run(
        alice, run_body("x", thread_id="busy", run_id="r-live", agentId="paced")
    )
    while live.log.last_seq < 3:  # RUN_STARTED, TEXT_MESSAGE_START, the first delta
        await asyncio.sleep(0.01)
    return done.text, live


async def test_a_busy_foreign_thread_answers_like_an_idle_foreign_one(run_rig: RunRig) -> None:
    client, creds, backend, gate = run_rig
    _, live = await _alice_runs(client, creds, backend)
    answers = []
    for thread_id, run_id in (("busy", "b1"), ("idle", "b2")):
        response = await client.post(
            f"{BASE}/run",
            json=run_body("snoop", thread_id=thread_id, run_id=run_id, agentId="quick"),
            headers=creds["bob"],
        )
        answers.append((response.status_code, response.json()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 404 and answers[0][1]["error"]["code"] == "THREAD_NOT_FOUND"
    gate.event.set()
    assert live.task is not None
    await asyncio.wait_for(live.task, 30)  # its stored messages are final once it ends
    for thread_id in ("busy", "idle"):
        stored = await backend.store.list_messages(thread_id)
        assert [m["content"] for m in stored if m["role"] == "user"] == ["x"]


@pytest.mark.parametrize("run_id", ["r-live", "r-done"], ids=["live", "finished"])
async def test_a_foreign_run_id_is_free_and_the_owners_run_is_untouched(
    run_rig: RunRig, run_id: str
) -> None:
    client, creds, backend, gate = run_rig
    done_text, live = await _alice_runs(client, creds, backend)
    reused = await client.post(
        f"{BASE}/run",
        json=run_body("mine", thread_id="bobs", run_id=run_id, agentId="quick"),
        headers=creds["bob"],
    )
    missing = await client.post(
        f"{BASE}/run",
        json=run_body("mine", thread_id="bobs2", run_id="never-used", agentId="quick"),
        headers=creds["bob"],
    )
    assert reused.status_code == missing.status_code == 200
    events, fresh = parse_sse(reused.text), parse_sse(missing.text)
    assert [e["type"] for e in events] == [e["type"] for e in fresh]
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "bobs", "runId": run_id}
    # Alice's runs are still hers: the live one runs on, the finished one still resumes.
    assert not live.log.closed
    gate.event.set()
    resumed_live = await client.get(f"{BASE}/runs/r-live/events", headers=creds["alice"])
    assert resumed_live.status_code == 200
    assert [e["type"] for e in parse_sse(resumed_live.text)][-1] == "RUN_FINISHED"
    assert "done" in resumed_live.text
    resumed_done = await client.get(f"{BASE}/runs/r-done/events", headers=creds["alice"])
    assert resumed_done.status_code == 200
    assert parse_sse(resumed_done.text) == parse_sse(done_text)
    # And Bob reaches only his own run under that id.
    bobs = await client.get(f"{BASE}/runs/{run_id}/events", headers=creds["bob"])
    assert parse_sse(bobs.text) == parse_sse(reused.text)


async def test_foreign_run_routes_answer_like_missing_runs(run_rig: RunRig) -> None:
    client, creds, backend, _ = run_rig
    await _alice_runs(client, creds, backend)
    for run_id in ("r-live", "r-done"):
        for method, path, body in (
            ("GET", f"/runs/{run_id}/events", None),
            ("POST", f"/runs/{run_id}/cancel", {}),
            ("POST", f"/runs/{run_id}/tool-calls/c1/result", {"result": 1}),
        ):
            foreign = await client.request(method, BASE + path, json=body, headers=creds["bob"])
            missing = await client.request(
                method, BASE + path.replace(run_id, "nope"), json=body, headers=creds["bob"]
            )
            assert foreign.status_code == missing.status_code == 404, path
            assert foreign.json() == missing.json()
    assert not backend.runtime.get_run("alice", "r-live").log.closed
