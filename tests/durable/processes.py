"""Real ``iobridge serve`` processes for the durable-run tests: a model agent on the
project's fake OpenAI-compatible server (in the test process), api-key auth, one store."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.cluster.replicas import HEARTBEAT, KEYS, OWNER_LOST, WEATHER, Replica, _wait_port
from tests.durable.streams import assert_valid_stream, sse_ids
from tests.helpers import free_port

__all__ = ["assert_valid_stream", "run_body", "serve", "sse_ids", "write_config"]


def write_config(workdir: Path, model_base_url: str) -> Path:
    """alice and bob by API key (keys in the environment); agent ``planner`` on the fake."""
    config = workdir / "iobridge.toml"
    config.write_text(
        '[auth]\nmode = "api-key"\n'
        + "".join(f'[[auth.api_keys]]\nkey_env = "DURABLE_KEY_{name.upper()}"\n'
                  f'principal = "{name}"\n' for name in KEYS)
        + f'[[agents]]\nid = "planner"\nmodel = "openai:gpt-4o"\nbase_url = "{model_base_url}"\n'
        'api_key_env = "DURABLE_MODEL_KEY"\n',
        encoding="utf-8",
    )
    return config


def serve(
    name: str, workdir: Path, *, database_url: str, model_base_url: str,
    redis_url: str | None = None, prefix: str = "iobridge", env: dict[str, str] | None = None,
) -> Replica:
    """Start one ``iobridge serve`` (with ``redis_url``: a replica of a cluster)."""
    port = free_port()
    full_env = {
        **os.environ, "PYTHONUNBUFFERED": "1", "IOBRIDGE_DATABASE_URL": database_url,
        "IOBRIDGE_LOG_LEVEL": "warning", "DURABLE_MODEL_KEY": "sk-fake",
        **{f"DURABLE_KEY_{who.upper()}": key for who, key in KEYS.items()},
        **(env or {}),
    }
    if redis_url is not None:
        full_env.update({
            "IOBRIDGE_REDIS_URL": redis_url, "IOBRIDGE_REDIS_PREFIX": prefix,
            "IOBRIDGE_HEARTBEAT_SECONDS": str(HEARTBEAT),
            "IOBRIDGE_OWNER_LOST_SECONDS": str(OWNER_LOST),
        })
    full_env.pop("IOBRIDGE_CONFIG", None)
    config = write_config(workdir, model_base_url)
    command = [sys.executable, "-m", "iobridge.cli", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--config", str(config)]
    process = subprocess.Popen(command, cwd=workdir, env=full_env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait_port(process, port, f"server {name}")
    return Replica(name, process, f"http://127.0.0.1:{port}")


def run_body(thread_id: str, run_id: str | None = None, text: str = "Weather in Oslo?",
             **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": run_id or f"run-{uuid.uuid4().hex[:10]}",
            "messages": [{"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}],
            "tools": [WEATHER], "context": [], "state": {},
            "forwardedProps": {"agentId": "planner"}, **extra}
