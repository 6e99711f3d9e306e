"""Settings: defaults < ``iobridge.toml`` < ``IOBRIDGE_*`` environment < command-line flags.

The TOML file is found through ``--config``, then ``IOBRIDGE_CONFIG``, then ``./iobridge.toml``
if present. Nested settings use ``__`` in environment names (``IOBRIDGE_AUTH__MODE=jwt``).
Secrets (model API keys, JWT keys, API keys) come from the environment, never the file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from iobridge.auth import AuthSettings
from iobridge.npamp_server.settings import NpampSettings

DEFAULT_CONFIG_FILE = "iobridge.toml"


class Settings(BaseSettings):
    """Everything configurable about a server."""

    model_config = SettingsConfigDict(
        env_prefix="IOBRIDGE_", env_nested_delimiter="__", extra="ignore"
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    #: Route prefix of the bridge (the protocol's default is ``/io-bridge``).
    prefix: str = "/io-bridge"
    #: Largest accepted request body, in bytes.
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: Seconds of silence on an SSE stream before a ``: ping`` comment.
    ping_interval: float = Field(default=15.0, gt=0)
    #: Seconds a frontend tool call waits for its result.
    tool_timeout: float = Field(default=300.0, gt=0)
    #: ``in-run`` (result route, the io protocol) or ``next-run`` (plain AG-UI re-run).
    tool_result_mode: Literal["in-run", "next-run"] = "in-run"
    #: Seconds a finished run's events stay available for resume.
    retention_seconds: float = Field(default=300.0, ge=0)
    max_retained_runs: int = Field(default=1000, ge=0)
    #: Seconds a run survives after its last follower disconnects (0 cancels at once).
    detach_grace_seconds: float = Field(default=0.0, ge=0)
    #: Thread store. ``memory`` keeps nothing across restarts.
    database_url: str = "sqlite+aiosqlite:///./iobridge.db"
    #: Browser origins allowed to call the bridge (CORS); empty disables CORS.
    cors_origins: list[str] = Field(default_factory=list)
    #: Serve the playground page at ``/playground`` (``create_app`` only, not ``Bridge``).
    playground: bool = True
    #: Agent id run when a request names none (default: the first agent).
    default_agent: str | None = None
    log_level: str = "info"
    auth: AuthSettings = Field(default_factory=AuthSettings)
    #: AG-UI over N-PAMP (the ``[npamp]`` table); off unless ``npamp.port`` is set.
    npamp: NpampSettings = Field(default_factory=NpampSettings)
    #: Agent definitions (``[[agents]]`` tables of the TOML file).
    agents: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    @classmethod
    def load(cls, config_file: str | Path | None = None, **overrides: Any) -> Settings:
        """Build settings from the TOML file, the environment and explicit overrides.

        Raises:
            FileNotFoundError: an explicitly named config file does not exist.
            ValueError: the file is not valid TOML or a value is invalid.
        """
        path = config_file or os.environ.get("IOBRIDGE_CONFIG") or None
        if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
            path = DEFAULT_CONFIG_FILE
        file_values: dict[str, Any] = {}
        if path is not None:
            with open(path, "rb") as fh:
                file_values = tomllib.load(fh)
        values = _deep_merge(file_values, _from_env(cls))
        values = _deep_merge(values, {k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


def _from_env(cls: type[Settings]) -> dict[str, Any]:
    """Only the values the environment sets (so they override the file, not the defaults)."""
    return cls().model_dump(exclude_defaults=True)


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
