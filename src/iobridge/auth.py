"""Who is calling, and which resourceIds (thread owners) they may touch.

Transport-neutral: HTTP hands over its request headers, and the N-PAMP server maps an
authenticated peer key to a ``Principal`` the same way. Three modes:

* ``none``: everyone is the anonymous principal, allowed every resource; the resourceId comes
  from the request (default ``"default"``). For local use only.
* ``api-key``: ``X-API-Key: <key>`` or ``Authorization: Bearer <key>``. The configuration holds
  SHA-256 digests of the keys, never the keys (or names an environment variable holding a
  key), each mapped to a principal id, its resourceIds and its N-PAMP ``max_effect``.
* ``jwt`` (the ``jwt`` extra): ``Authorization: Bearer <token>`` verified with PyJWT (key or
  key file, algorithms, optional audience/issuer). One claim names the resourceId(s),
  another the principal.

Ownership never leaks existence: a resource outside the principal's set is answered exactly
like a missing one (``NotFoundError``).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from iobridge.errors import AuthenticationError, InputError, NotFoundError
from iobridge.extras import require_extra
from iobridge.store.base import validate_id

__all__ = [
    "DEFAULT_RESOURCE",
    "ApiKeyEntry",
    "AuthSettings",
    "Authenticator",
    "JwtSettings",
    "Principal",
    "check_config_id",
    "hash_api_key",
]

DEFAULT_RESOURCE = "default"
#: N-PAMP SafetyLabel effect levels run 0..3; 3 allows everything.
MAX_EFFECT = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """An authenticated caller."""

    id: str
    #: resourceIds this principal may use; ``None`` means any.
    resource_ids: frozenset[str] | None
    #: The resourceId used when a request names none.
    default_resource: str
    #: Highest N-PAMP SafetyLabel effect this principal may request.
    max_effect: int = MAX_EFFECT


ANONYMOUS = Principal(id="anonymous", resource_ids=None, default_resource=DEFAULT_RESOURCE)


def hash_api_key(key: str) -> str:
    """The hex SHA-256 digest of an API key, as written in the configuration."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()  # pragma: no mutate (UTF-8 == utf-8)


class ApiKeyEntry(BaseModel):
    """One API key: its digest (or an env var holding it) and what it grants."""

    model_config = ConfigDict(extra="forbid")

    #: Hex SHA-256 of the key (``iobridge`` can print it: ``hash_api_key``).
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    #: Name of an environment variable that holds the key itself.
    key_env: str | None = None
    principal: str
    #: Allowed resourceIds; ``None`` allows any.
    resource_ids: list[str] | None = None
    #: Used when a request names no resourceId (default: the first allowed one).
    default_resource: str | None = None
    max_effect: int = Field(default=MAX_EFFECT, ge=0, le=MAX_EFFECT)

    @field_validator("principal", "default_resource")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        return value if value is None else check_config_id(value)

    @field_validator("resource_ids")
    @classmethod
    def _usable_all(cls, value: list[str] | None) -> list[str] | None:
        return value if value is None else [check_config_id(v) for v in value]

    @model_validator(mode="after")
    def _one_source(self) -> ApiKeyEntry:
        if (self.sha256 is None) == (self.key_env is None):
            raise ValueError("give exactly one of sha256 and key_env")
        if self.resource_ids is not None and not self.resource_ids:
            raise ValueError("resource_ids must not be empty (omit it to allow any)")
        return self


class JwtSettings(BaseModel):
    """How to verify bearer JWTs and read the principal out of them."""

    model_config = ConfigDict(extra="forbid")

    #: The HMAC secret or PEM public key; or ``key_file`` pointing at one.
    key: str | None = None
    key_file: Path | None = None
    algorithms: list[str] = Field(default_factory=lambda: ["HS256"], min_length=1)
    audience: str | None = None
    issuer: str | None = None
    #: Claim naming the resourceId (a string) or resourceIds (a list of strings).
    resource_claim: str = "sub"
    #: Claim naming the principal id.
    principal_claim: str = "sub"
    #: Optional claim carrying the principal's N-PAMP max effect (0..3).
    max_effect_claim: str | None = None
    leeway_seconds: float = 30.0
    #: Reject tokens without an ``exp`` claim (a token that never expires is a standing key).
    require_exp: bool = True

    @model_validator(mode="after")
    def _one_key(self) -> JwtSettings:
        if (self.key is None) == (self.key_file is None):
            raise ValueError("give exactly one of key and key_file")
        return self


class AuthSettings(BaseModel):
    """The ``auth`` section of the server settings."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["none", "api-key", "jwt"] = "none"
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)
    jwt: JwtSettings | None = None

    @model_validator(mode="after")
    def _mode_complete(self) -> AuthSettings:
        if self.mode == "api-key" and not self.api_keys:
            raise ValueError("auth mode api-key needs at least one api_keys entry")
        if self.mode == "jwt" and self.jwt is None:
            raise ValueError("auth mode jwt needs a jwt section")
        return self


class Authenticator:
    """Turns request credentials into a ``Principal`` and checks resource ownership."""

    def __init__(self, settings: AuthSettings, *, environ: Mapping[str, str] | None = None) -> None:
        """Build the key table once; ``environ`` (default ``os.environ``) serves ``key_env``.

        Raises:
            ValueError: a ``key_env`` variable is unset or empty, or the JWT key (or key
                file) is empty or unreadable: a misconfigured server must not start.
        """
        self.settings = settings
        env = os.environ if environ is None else environ
        self._keys: dict[str, Principal] = {}
        for entry in settings.api_keys:
            digest = entry.sha256.lower() if entry.sha256 else self._env_digest(entry, env)
            allowed = frozenset(entry.resource_ids) if entry.resource_ids is not None else None
            default = entry.default_resource or (
                entry.resource_ids[0] if entry.resource_ids else DEFAULT_RESOURCE
            )
            self._keys[digest] = Principal(
                id=entry.principal,
                resource_ids=allowed,
                default_resource=default,
                max_effect=entry.max_effect,
            )
        self._jwt: tuple[JwtSettings, str] | None = None  # pragma: no mutate (jwt mode only)
        if settings.jwt is not None:
            require_extra("jwt", 'auth.mode = "jwt"')
            key = settings.jwt.key
            if settings.jwt.key_file is not None:
                key = settings.jwt.key_file.read_text(encoding="utf-8")  # pragma: no mutate
            if not key:
                raise ValueError("the JWT key is empty (an empty HMAC secret accepts forgeries)")
            self._jwt = (settings.jwt, key)

    @staticmethod
    def _env_digest(entry: ApiKeyEntry, env: Mapping[str, str]) -> str:
        key = env.get(entry.key_env or "")  # pragma: no mutate (key_env is set: _one_source)
        if not key:
            raise ValueError(f"environment variable {entry.key_env} (API key) is not set")
        return hash_api_key(key)

    @property
    def mode(self) -> str:
        """The configured mode: ``none``, ``api-key`` or ``jwt``."""
        return self.settings.mode

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The principal the request's credentials name.

        Raises:
            AuthenticationError: credentials are missing or wrong (code ``UNAUTHORIZED``).
        """
        if self.settings.mode == "none":
            return ANONYMOUS
        lowered = {k.lower(): v for k, v in headers.items()}
        bearer = _bearer(lowered.get("authorization"))
        if self.settings.mode == "api-key":
            key = lowered.get("x-api-key") or bearer
            if not key:
                raise AuthenticationError("missing API key")
            return self.principal_for_key(key)
        if not bearer:
            raise AuthenticationError("missing bearer token")
        if self._jwt is None:  # pragma: no mutate (unreachable: jwt mode needs a jwt section)
            raise AuthenticationError("no JWT verification key is configured")  # pragma: no mutate
        return self._from_jwt(bearer, *self._jwt)

    def principal_for_key(self, key: str) -> Principal:
        """The principal of an API key (also how N-PAMP maps a configured peer secret).

        Lookup is by SHA-256 digest, so timing reveals nothing about the stored keys.

        Raises:
            AuthenticationError: unknown key.
        """
        principal = self._keys.get(hash_api_key(key))
        if principal is None:
            raise AuthenticationError("invalid API key")
        return principal

    @staticmethod
    def _from_jwt(token: str, config: JwtSettings, key: str) -> Principal:
        import jwt  # the jwt extra (checked when the authenticator was built)

        required = ["exp"] if config.require_exp else []
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=config.algorithms,
                audience=config.audience,
                issuer=config.issuer,
                leeway=config.leeway_seconds,
                options={"require": required, "verify_aud": config.audience is not None},
            )
        except jwt.PyJWTError as exc:
            # The client never sees the library's text: it would tell a prober which check
            # failed. The reason stays in the exception (logs, tests).
            raise AuthenticationError("invalid token", reason=f"invalid token: {exc}") from None
        if not all(_is_numeric_date(claims[c]) for c in _DATE_CLAIMS if c in claims):
            raise AuthenticationError(
                "invalid token", reason="invalid token: a date claim is not a JSON number"
            )
        principal_id = claims.get(config.principal_claim)
        resources = claims.get(config.resource_claim)
        if isinstance(resources, str):
            resources = [resources]
        if (
            not isinstance(principal_id, str)
            or not principal_id
            or not isinstance(resources, list)
            or not resources
            or not all(isinstance(r, str) and r for r in resources)
        ):
            raise AuthenticationError(
                "invalid token", reason="token lacks the principal or resource claim"
            )
        if not all(_is_usable_id(v) for v in (principal_id, *resources)):
            # The store would refuse them (and a run's messages would be lost): refused here.
            raise AuthenticationError(
                "invalid token", reason="token's principal or resource is not a usable id"
            )
        max_effect = MAX_EFFECT
        if config.max_effect_claim is not None:
            value = claims.get(config.max_effect_claim, MAX_EFFECT)
            if type(value) is not int or not 0 <= value <= MAX_EFFECT:
                raise AuthenticationError(
                    "invalid token", reason="token has an invalid max effect claim"
                )
            max_effect = value
        return Principal(
            id=principal_id,
            resource_ids=frozenset(resources),
            default_resource=resources[0],
            max_effect=max_effect,
        )

    def can_access(self, principal: Principal, resource_id: str) -> bool:
        """Whether ``principal`` may read and write threads owned by ``resource_id``."""
        return principal.resource_ids is None or resource_id in principal.resource_ids

    def resolve_resource(self, principal: Principal, requested: object) -> str:
        """The resourceId a request acts for: ``requested``, or the principal's default.

        ``requested`` comes straight from a request (``forwardedProps.resourceId``, a query
        or a body), so any JSON value is accepted here and checked.

        Raises:
            InputError: ``requested`` is not a valid id (a non-string included).
            NotFoundError: ``requested`` is not the principal's (answered like a missing
                resource, so the reply reveals nothing about other resources).
        """
        if requested is None:
            return principal.default_resource
        resource_id = validate_id(requested, "resourceId")
        if not self.can_access(principal, resource_id):
            raise NotFoundError("resource not found", code="RESOURCE_NOT_FOUND")
        return resource_id

    def list_scope(self, principal: Principal, requested: str | None) -> frozenset[str]:
        """The resourceIds a thread listing covers.

        The requested one; else every resource the principal has; else (unrestricted
        principals, mode ``none``) its default resource.
        """
        if requested is not None:
            return frozenset({self.resolve_resource(principal, requested)})
        if principal.resource_ids is not None:
            return principal.resource_ids
        return frozenset({principal.default_resource})


#: RFC 7519 NumericDate claims; PyJWT also accepts numeric strings ("9999999999") for them.
_DATE_CLAIMS = ("exp", "nbf", "iat")


def _is_numeric_date(value: object) -> bool:
    """A JSON number (not a string, not a boolean) that is finite."""
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _is_usable_id(value: str) -> bool:
    """Whether the store takes ``value`` as a principal or resource id (``validate_id``)."""
    try:
        validate_id(value)
    except InputError:
        return False
    return True


def check_config_id(value: str) -> str:
    """``value`` if it is a usable id, else ``ValueError`` (configuration is checked at start)."""
    if not _is_usable_id(value):
        raise ValueError(f"{value!r} is not a usable id (1-256 printable characters)")
    return value


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()
