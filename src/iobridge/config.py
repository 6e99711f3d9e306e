"""Settings: defaults < ``iobridge.toml`` < ``IOBRIDGE_*`` environment < command-line flags.

The TOML file is found through ``--config``, then ``IOBRIDGE_CONFIG``, then ``./iobridge.toml``
if present. Nested settings use ``__`` in environment names (``IOBRIDGE_AUTH__MODE=jwt``).
Secrets (model API keys, JWT keys, API keys) come from the environment, never the file.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from iobridge.auth import AuthSettings, check_config_id
from iobridge.protocol.guard import DEFAULT_MAX_STATE_BYTES
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH, MAX_JSON_DEPTH_SETTING
from iobridge.protocol.media import DEFAULT_MAX_MEDIA_MESSAGE_BYTES, DEFAULT_MAX_MEDIA_PART_BYTES
from iobridge.protocol.options import (
    DEFAULT_MAX_SCHEMA_BYTES,
    DEFAULT_MAX_SCHEMA_OBJECTS,
    MultitaskStrategy,
    ToolResultMode,
)
from iobridge.protocol.run_input import DEFAULT_MAX_MESSAGES
from iobridge.protocol.run_limits import (
    DEFAULT_MAX_INTERRUPT_BYTES,
    DEFAULT_MAX_PATCH_OPS,
    DEFAULT_MAX_RUN_OUTPUT_BYTES,
    DEFAULT_MAX_SUBAGENT_DEPTH,
    DEFAULT_MAX_UPSTREAM_ROUND_BYTES,
    RunLimits,
)
from iobridge.typos import did_you_mean

DEFAULT_CONFIG_FILE = "iobridge.toml"
#: ``allowed_hosts`` when the server is bound to a loopback address and none are configured.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: How identity key fingerprints are written (``iobridge.npamp`` prints them this way).
_FINGERPRINT_PREFIX = "sha256:"


# --- the [npamp] section ---------------------------------------------------------------

#: Wildcard for ``trusted_peers`` / ``agui_peers``: any peer that completed the handshake.
ANY_PEER = "*"
_BRIDGE, _INTERACTION = 0x000D, 0x000F


def _check_fingerprint(value: str) -> str:
    digest = value[len(_FINGERPRINT_PREFIX) :].lower()
    if (
        not value.startswith(_FINGERPRINT_PREFIX)
        or len(digest) != 64
        or any(c not in "0123456789abcdef" for c in digest)
    ):
        raise ValueError(f"not a key fingerprint (sha256:<64 hex>): {value!r}")
    return _FINGERPRINT_PREFIX + digest


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
        return value if value is None else [check_config_id(v) for v in value]

    @field_validator("principal", "default_resource")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        return value if value is None else check_config_id(value)


class NpampOpaquePeer(BaseModel):
    """A peer agreed on a private protocol_id for opaque carriage of AG-UI (CC-OPAQUE §3)."""

    model_config = ConfigDict(extra="forbid")

    #: ``sha256:<hex>`` of the peer's identity public key.
    fingerprint: str
    #: The privately agreed id; experimental range only (CC-OPAQUE §3 item 2).
    protocol_id: int = Field(ge=0x10, le=0x7F)

    @field_validator("fingerprint")
    @classmethod
    def _fingerprint(cls, value: str) -> str:
        return _check_fingerprint(value)


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
    #: Peers that carry AG-UI under NPAMP-CC-OPAQUE with a private protocol_id (the
    #: fallback without the STREAM mapping; see docs/npamp-agui.md). Always trusted.
    opaque_peers: list[NpampOpaquePeer] = Field(default_factory=list)
    #: Frontend tool mode of runs carried opaquely: their tool results come in the same run,
    #: through the carried ``POST /runs/{runId}/tool-calls/{toolCallId}/result`` route.
    opaque_tool_result_mode: ToolResultMode = "in-run"
    #: Peer key → principal. With ``auth.mode = none`` unlisted peers act as the anonymous
    #: principal; otherwise an unlisted peer cannot start runs.
    peers: list[NpampPeer] = Field(default_factory=list)
    #: Max SafetyLabel effect of the anonymous principal (``auth.mode = none``); default
    #: non_idempotent_write, so unlabelled runs (treated as destructive) are refused.
    anonymous_max_effect: int = Field(default=2, ge=0, le=3)
    #: Channels that carry AG-UI runs: the Bridge channel, and the Interaction channel.
    channels: list[int] = Field(default_factory=lambda: [_BRIDGE], min_length=1)
    #: Frontend tool mode for runs started over N-PAMP (MAP-AGUI §5 item 3: next run).
    tool_result_mode: ToolResultMode = "next-run"
    #: Seconds a run keeps going after its association drops, waiting for a resume.
    resume_grace_seconds: float = Field(default=60.0, ge=0)
    #: Announce the AG-UI protocol record on the Discovery channel to agreed peers.
    announce_discovery: bool = False
    #: Answer DISCO_QUERY on the Discovery channel: the AG-UI record to agreed peers, an empty
    #: result to the others (NPAMP-DISC §6, §10).
    answer_discovery: bool = True
    #: Seconds allowed for each TLS / N-PAMP handshake step.
    handshake_timeout: float = Field(default=10.0, gt=0)
    #: Pending TCP connections the listener queues (``listen(2)`` backlog), like HTTP's 2048:
    #: with asyncio's default of 100 a burst of associations overflowed it and the dropped
    #: SYNs were retried a second later.
    backlog: int = Field(default=2048, ge=1, le=65535)

    @field_validator("agui_peers")
    @classmethod
    def _fingerprints(cls, value: list[str] | str) -> list[str] | str:
        return value if isinstance(value, str) else [_check_fingerprint(v) for v in value]

    @model_validator(mode="after")
    def _one_class_per_id(self) -> NpampSettings:
        seen: set[str] = set()
        for peer in self.opaque_peers:
            if peer.protocol_id == self.agui_protocol_id:
                raise ValueError(
                    f"opaque_peers: protocol_id 0x{peer.protocol_id:02x} is the AG-UI STREAM id"
                    " (agui_protocol_id); one id names one carriage"
                )
            if peer.fingerprint in seen:
                raise ValueError(f"opaque_peers: {peer.fingerprint} is listed twice")
            seen.add(peer.fingerprint)
        return self

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if c not in (_BRIDGE, _INTERACTION)]
        if bad:
            raise ValueError(f"AG-UI rides channel 0x000D or 0x000F only, not {bad}")
        return sorted(set(value))


# --- observability (docs/observability.md) ---------------------------------------------


class MetricsSettings(BaseModel):
    """Prometheus ``GET /metrics`` on the HTTP port (the ``[metrics]`` table)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    #: Name of an environment variable holding a token scrapers must send as
    #: ``Authorization: Bearer <token>``; ``None``: no credentials (like ``/healthz``).
    token_env: str | None = None
    #: Serve ``/metrics`` on this port of its own instead of the HTTP port (also with
    #: ``--no-http``); that listener takes no credentials: bind it to a private address.
    port: int | None = Field(default=None, ge=0, le=65535)
    #: Bind address of ``port`` (default: the HTTP ``host``).
    host: str | None = None

    @model_validator(mode="after")
    def _one_protection(self) -> MetricsSettings:
        if self.port is not None and self.token_env is not None:
            raise ValueError(
                "metrics.token_env protects /metrics on the HTTP port; the metrics.port "
                "listener takes no token (bind metrics.host to a private address instead)"
            )
        return self


class TracingSettings(BaseModel):
    """OpenTelemetry traces (the ``[tracing]`` table; needs the ``otel`` extra)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    #: OTLP/HTTP traces endpoint (``http://collector:4318/v1/traces``). ``None``: the global
    #: tracer provider if the process set one, else the ``OTEL_EXPORTER_OTLP_*`` environment.
    otlp_endpoint: str | None = None
    #: ``service.name`` of the spans when iobridge makes the provider.
    service_name: str = "iobridge"
    #: Put prompts, completions and tool arguments in pydantic-ai's model spans.
    include_content: bool = False


# --- all settings ----------------------------------------------------------------------


class UnknownSettings(ValueError):
    """The config file names settings that do not exist (typos would be silently ignored)."""


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
    #: Most messages one run request may carry (413 ``TOO_MANY_MESSAGES`` beyond).
    max_messages: int = Field(default=DEFAULT_MAX_MESSAGES, ge=1)
    #: Most bytes one media part (image, audio, video, document) of a message may carry,
    #: decoded (a URL counts its length); 413 ``MEDIA_TOO_LARGE`` beyond. Inline data takes
    #: 4/3 of its bytes in the body: raise ``max_body_bytes`` with it.
    max_media_part_bytes: int = Field(default=DEFAULT_MAX_MEDIA_PART_BYTES, ge=1)
    #: Most bytes of media one message may carry in all its parts (413 beyond).
    max_media_message_bytes: int = Field(default=DEFAULT_MAX_MEDIA_MESSAGE_BYTES, ge=1)
    #: Seconds of silence on an SSE stream before a ``: ping`` comment.
    ping_interval: float = Field(default=15.0, gt=0)
    #: Seconds a frontend tool call waits for its result.
    tool_timeout: float = Field(default=300.0, gt=0)
    #: ``in-run`` (result route, the io protocol) or ``next-run`` (plain AG-UI re-run).
    tool_result_mode: ToolResultMode = "in-run"
    #: A run request without ``protocolVersion`` (an AG-UI 0.x client, as assistant-ui and
    #: CopilotKit bundle) gets ``RUN_FINISHED.outcome`` in 0.x shapes: only ``interrupt``
    #: (0.x clients fail a run on ``pendingToolCallIds`` or ``cancelled``).
    pre_1_0_outcomes: bool = False
    #: What a run does when its thread is busy (``forwardedProps.multitaskStrategy`` and an
    #: agent's ``multitask_strategy`` win): ``reject``, ``enqueue``, ``interrupt``, ``rollback``.
    multitask_strategy: MultitaskStrategy = "reject"
    #: Runs waiting on one busy thread (``enqueue``, and ``interrupt``/``rollback`` waiting
    #: for the run they stop); more answer 429 ``TOO_MANY_QUEUED_RUNS``.
    max_queued_runs_per_thread: int = Field(default=8, ge=1)
    #: Branches one thread keeps (``replaceFrom``: regenerate, edit); one more answers 400
    #: ``TOO_MANY_BRANCHES``.
    max_branches_per_thread: int = Field(default=32, ge=2)
    #: A run whose messages hold the stored ones up to some point and omit what the thread
    #: stored after it (a whole-history client's regenerate): ``merge`` (new messages are
    #: added, as always) or ``branch`` (treated as ``replaceFrom`` the first one omitted;
    #: beware: a client that merely missed messages looks the same).
    diverging_history: Literal["merge", "branch"] = "merge"
    #: Seconds a finished run's events stay available for resume.
    retention_seconds: float = Field(default=300.0, ge=0)
    max_retained_runs: int = Field(default=1000, ge=0)
    #: Bytes of finished runs' events kept for resume, in total (oldest finished dropped first).
    max_retained_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    #: Bytes of events one run keeps for replay; a resume before them answers 410.
    max_run_log_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    #: Largest shared state (JSON bytes): a bigger request ``state`` answers 413, an agent
    #: growing it beyond ends its run with RUN_ERROR ``STATE_TOO_LARGE``.
    max_state_bytes: int = Field(default=DEFAULT_MAX_STATE_BYTES, ge=2)
    #: Followers (SSE resumes, N-PAMP streams) of one run at once; more answer 429.
    max_followers_per_run: int = Field(default=8, ge=1)
    #: Runs producing events at once, in total and per principal; more answer 429.
    max_active_runs: int = Field(default=2000, ge=1)
    max_active_runs_per_principal: int = Field(default=500, ge=1)
    #: Seconds a shutdown (SIGTERM) lets live runs finish before ending them with
    #: RUN_ERROR ``SERVER_SHUTDOWN`` (durable runs stop at their next durable point, or when
    #: this runs out, and go on elsewhere: handed to a peer with ``redis_url``).
    drain_seconds: float = Field(default=10.0, ge=0)
    #: Checkpoint the runs of agents that can re-execute (model and pydantic-ai agents,
    #: function agents with ``durable=True``) in a SQL store, so they outlive the process
    #: that started them (``docs/deployment.md``, "Durable runs").
    durable_runs: bool = True
    #: Largest checkpoint of one run (its input and the messages it produced so far), in
    #: bytes: a start over it answers 413 ``CHECKPOINT_TOO_LARGE``, a run growing past it
    #: ends with RUN_ERROR ``CHECKPOINT_TOO_LARGE``.
    max_checkpoint_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    #: Times a run is re-executed from its last durable point after losing its process
    #: mid-step (a lost replica, a drain that ran out) before it ends with RUN_ERROR
    #: ``RUN_LOST``; a run let go exactly at its point is not counted.
    max_takeovers: int = Field(default=3, ge=0)
    #: Seconds a run survives after its last follower disconnects (0 cancels at once).
    detach_grace_seconds: float = Field(default=0.0, ge=0)
    #: Thread store. ``memory`` keeps nothing across restarts.
    database_url: str = "sqlite:///./iobridge.db"
    #: Seconds each store call made for a request may take (a run's thread read, its start
    #: and end writes; every SQL read and transaction): past it a new run answers 503
    #: ``STORE_UNAVAILABLE`` and a streaming run ends ``RUN_ERROR STORE_UNAVAILABLE``.
    store_timeout_seconds: float = Field(default=5.0, gt=0)
    #: Redis shared by replicas and workers (``redis://host:6379/0``); unset: one process.
    redis_url: str | None = None
    #: Prefix of every Redis key, so deployments can share one Redis.
    redis_prefix: str = Field(default="iobridge", min_length=1, max_length=64)
    #: Seconds between a replica's heartbeats (and renewals of its run and thread locks).
    heartbeat_seconds: float = Field(default=1.0, gt=0, le=10)
    #: Seconds without a heartbeat before a replica's runs are lost (``RUN_LOST``) and its
    #: thread locks expire.
    owner_lost_seconds: float = Field(default=5.0, gt=0, le=60)
    #: Largest request head (request line and headers), in bytes (431 beyond).
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    #: Most header lines in one request (431 ``TOO_MANY_HEADERS`` beyond).
    max_headers: int = Field(default=100, ge=8)
    #: Seconds a connection has to deliver a complete request head (slowloris): then closed.
    header_timeout: float = Field(default=10.0, gt=0)
    #: Seconds without data while a request body is read: 408 ``REQUEST_TIMEOUT``.
    body_timeout: float = Field(default=30.0, gt=0)
    #: Seconds an idle keep-alive connection stays open.
    keep_alive_timeout: float = Field(default=5.0, gt=0)
    #: Requests served on one connection before it is closed.
    keep_alive_max_requests: int = Field(default=1000, ge=1)
    #: Open connections (and requests in progress) before new requests get 503.
    max_connections: int = Field(default=1024, ge=1)
    #: The event loop of ``iobridge serve``: ``auto`` is uvloop when it is installed (as
    #: uvicorn picks), else asyncio's own.
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    #: Browser origins allowed to call the bridge (CORS); empty disables CORS.
    cors_origins: list[str] = Field(default_factory=list)
    #: ``Host`` header values served (names, ``*.domain``, ``*``); required unless ``host`` is
    #: a loopback address, where it defaults to ``localhost``, ``127.0.0.1`` and ``::1``.
    allowed_hosts: list[str] | None = None
    #: Serve the playground page at ``/playground`` (``create_app`` only, not ``Bridge``).
    playground: bool = True
    #: Shape of ``GET /threads/{id}/messages`` without ``?format=``: ``mastra`` (Mastra
    #: message format v2, what io.Assist renders) or ``agui`` (the stored AG-UI messages).
    messages_format: Literal["mastra", "agui"] = "mastra"
    #: Agent id run when a request names none (default: the first agent).
    default_agent: str | None = None
    log_level: str = "info"
    #: ``text``, or ``json``: one JSON object per line, with ``runId``/``threadId`` in a run.
    log_format: Literal["text", "json"] = "text"
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    #: AG-UI over N-PAMP (the ``[npamp]`` table); off unless ``npamp.port`` is set.
    npamp: NpampSettings = Field(default_factory=NpampSettings)
    #: Agent definitions (``[[agents]]`` tables of the TOML file).
    agents: list[dict[str, Any]] = Field(default_factory=list)

    # --- Bounds on hostile input and per-run memory (docs/security.md) -------------------
    #: Deepest nesting of arrays/objects in any JSON a client or an upstream agent sends (and
    #: in tool-call arguments): ``400 JSON_TOO_DEEP`` beyond, upstream ``RUN_ERROR``
    #: ``UPSTREAM_PROTOCOL_ERROR``. At most 128, so whatever passes still encodes wrapped.
    max_json_depth: int = Field(
        default=DEFAULT_MAX_JSON_DEPTH, ge=8, le=MAX_JSON_DEPTH_SETTING
    )
    #: Operations in one ``STATE_DELTA`` JSON Patch: ``RUN_ERROR STATE_DELTA_TOO_LARGE`` beyond.
    max_state_patch_ops: int = Field(default=DEFAULT_MAX_PATCH_OPS, ge=1)
    #: A ``structuredOutput`` schema's JSON bytes and objects (each property's subschema is
    #: one): ``400 STRUCTURED_OUTPUT_TOO_LARGE`` beyond.
    max_output_schema_bytes: int = Field(default=DEFAULT_MAX_SCHEMA_BYTES, ge=256)
    max_output_schema_objects: int = Field(default=DEFAULT_MAX_SCHEMA_OBJECTS, ge=1)
    #: Bytes of messages one run produces (text, reasoning, tool arguments and results,
    #: held-back tool calls): ``RUN_ERROR RUN_OUTPUT_TOO_LARGE`` beyond.
    max_run_output_bytes: int = Field(default=DEFAULT_MAX_RUN_OUTPUT_BYTES, ge=1024)
    #: Bytes one upstream AG-UI run may leave in memory (its conversation for the follow-up
    #: round: text, tool calls, results, ids): ``RUN_ERROR UPSTREAM_TOO_LARGE`` beyond.
    max_upstream_round_bytes: int = Field(default=DEFAULT_MAX_UPSTREAM_ROUND_BYTES, ge=1024)
    #: Bytes of a thread's interrupt record (open interrupts and the series' resume answers):
    #: a ``resume`` beyond answers ``413 INTERRUPTS_TOO_LARGE``, an agent raising beyond ends
    #: its run with ``RUN_ERROR INTERRUPTS_TOO_LARGE``.
    max_interrupt_bytes: int = Field(default=DEFAULT_MAX_INTERRUPT_BYTES, ge=1024)
    #: Most levels of subagents one run nests (an agent's ``subagents`` calling theirs); a
    #: call one level deeper is a failed tool result (``SUBAGENT_TOO_DEEP``), the run goes on.
    max_subagent_depth: int = Field(default=DEFAULT_MAX_SUBAGENT_DEPTH, ge=1, le=16)

    @property
    def run_limits(self) -> RunLimits:
        """The per-run bounds above, as the run engine, the guard and agents take them."""
        return RunLimits(
            max_json_depth=self.max_json_depth,
            max_state_patch_ops=self.max_state_patch_ops,
            max_run_output_bytes=self.max_run_output_bytes,
            max_upstream_round_bytes=self.max_upstream_round_bytes,
            max_interrupt_bytes=self.max_interrupt_bytes,
            max_subagent_depth=self.max_subagent_depth,
        )
    # --- end of the bounds block --------------------------------------------------------

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url must be a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _heartbeat_in_bound(self) -> Settings:
        if self.owner_lost_seconds < 2 * self.heartbeat_seconds:
            raise ValueError(
                "owner_lost_seconds must be at least twice heartbeat_seconds "
                "(one late heartbeat must not lose a replica's runs)"
            )
        return self

    @model_validator(mode="after")
    def _hosts_known(self) -> Settings:
        if self.allowed_hosts is None and not is_loopback(self.host):
            raise ValueError(
                f"allowed_hosts is required when host is not a loopback address ({self.host})"
            )
        return self

    @property
    def trusted_hosts(self) -> list[str]:
        """``allowed_hosts``, or the loopback names when none are configured."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        return list(LOOPBACK_HOSTS)

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
            UnknownSettings: the file names a setting that does not exist.
            ValueError: the file is not valid TOML or a value is invalid.
        """
        path = config_file or os.environ.get("IOBRIDGE_CONFIG") or None
        if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
            path = DEFAULT_CONFIG_FILE
        file_values: dict[str, Any] = {}
        if path is not None:
            with open(path, "rb") as fh:
                file_values = tomllib.load(fh)
            unknown = sorted(set(file_values) - set(cls.model_fields))
            if unknown:
                named = ", ".join(k + did_you_mean(k, cls.model_fields) for k in unknown)
                raise UnknownSettings(
                    f"unknown setting(s) in {path}: {named}; "
                    f"valid: {', '.join(sorted(cls.model_fields))}"
                )
        values = _deep_merge(file_values, _from_env(cls))
        values = _deep_merge(values, {k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


def keys_at(location: Sequence[str | int]) -> list[str]:
    """The setting names valid at ``location`` (``("npamp",)``, ``("auth", "api_keys", 0)``):
    what a misspelt key there may have meant; empty where the location holds no table."""
    kind: Any = Settings
    for step in location:
        kind = _table_type(kind, isinstance(step, int))
        fields = getattr(kind, "model_fields", None)
        if isinstance(step, int) or fields is None:
            continue
        if step not in fields:
            return []
        kind = fields[step].annotation
    kind = _table_type(kind, False)
    return sorted(getattr(kind, "model_fields", {}))


def _table_type(kind: Any, item: bool) -> Any:
    """``kind`` without ``| None``, or the item type of a ``list[...]`` when ``item``."""
    for arg in (a for a in get_args(kind) if a is not type(None)):
        if item and get_origin(kind) is list:
            return arg
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return kind


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """A sentence for each ``IOBRIDGE_*`` variable that names no setting (the server ignores
    it), with a suggestion when it looks like a typo of one."""
    known = {f"IOBRIDGE_{name.upper()}" for name in Settings.model_fields}
    found = []
    for name in sorted(environ):
        if not name.startswith("IOBRIDGE_") or name.startswith(_OTHER_VARIABLES):
            continue
        head = name.split("__")[0]
        if head not in known:
            found.append(f"{name} names no setting and is ignored{did_you_mean(head, known)}")
    return found


#: ``IOBRIDGE_*`` variables that other parts read (the client, scripts, tests).
_OTHER_VARIABLES = (
    "IOBRIDGE_CONFIG", "IOBRIDGE_API_KEY", "IOBRIDGE_TEST_", "IOBRIDGE_PG_", "IOBRIDGE_MUTANT_",
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost``, or a loopback address
    (IPv6 with or without brackets)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
