"""Model strings to pydantic-ai models, and provider failures to stable error codes.

A model string is ``<provider>:<model name>``:

- ``openai:gpt-4o-mini`` — OpenAI, or any OpenAI-compatible server when ``base_url`` is set
  (Ollama, vLLM, llama.cpp, LM Studio, ...). With a ``base_url`` the key is optional.
- ``ollama:llama3.2`` — shorthand for an OpenAI-compatible Ollama server (default
  ``http://localhost:11434/v1``, no key).
- ``anthropic:claude-sonnet-4-5`` — Anthropic (``base_url`` optional).
- ``google:gemini-2.5-flash`` — Gemini API.

Keys come from the environment only: the variable named by ``api_key_env``, else the
provider's usual one (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GOOGLE_API_KEY``). The
environment is an argument so tests and embedders can pass their own mapping.

Provider SDKs are imported only when a model of theirs is built, to keep startup light and
because only the OpenAI client is in the base install: the Anthropic and Google SDKs come
with the ``iobridge[anthropic]`` / ``iobridge[google]`` extras (``iobridge[all]`` for both).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from pydantic_ai import exceptions as pai_errors

from iobridge.errors import AgentError, IobridgeError

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings

logger = logging.getLogger(__name__)

OLLAMA_BASE_URL = "http://localhost:11434/v1"


#: How an environment variable is named (``OPENAI_API_KEY``): what an ``…_env`` key holds.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AgentConfigError(IobridgeError):
    """An agent definition cannot be turned into a working agent (reported per agent)."""

    default_code = "AGENT_CONFIG_INVALID"


def values_from_env(
    table: Mapping[str, str], environ: Mapping[str, str], key: str
) -> dict[str, str]:
    """The one convention for secrets: a key ending in ``_env`` names environment variables,
    never holds a value. ``{name: VARIABLE}`` → ``{name: value of VARIABLE}``.

    Raises:
        AgentConfigError: a value that is not a variable's name (it looks like the secret
            itself), or a variable that is unset or empty (the message names the variable,
            never a value).
    """
    values = {}
    for name, variable in table.items():
        if not ENV_NAME.match(variable):
            raise AgentConfigError(
                f"{key} {name!r} must name an environment variable, not hold the value"
            )
        value = environ.get(variable, "").strip()
        if not value:
            raise AgentConfigError(f"environment variable {variable} is not set ({key} {name})")
        values[name] = value
    return values


@dataclass(frozen=True, slots=True)
class _ProviderInfo:
    key_env: str | None
    #: Whether a key is required even without ``base_url``.
    needs_key: bool
    #: The iobridge extra that installs the SDK (``openai`` is in the base install).
    extra: str
    default_base_url: str | None = None


PROVIDERS: dict[str, _ProviderInfo] = {
    "openai": _ProviderInfo("OPENAI_API_KEY", needs_key=True, extra="openai"),
    "ollama": _ProviderInfo(
        None, needs_key=False, extra="openai", default_base_url=OLLAMA_BASE_URL
    ),
    "anthropic": _ProviderInfo("ANTHROPIC_API_KEY", needs_key=True, extra="anthropic"),
    "google": _ProviderInfo("GOOGLE_API_KEY", needs_key=True, extra="google"),
}


def split_model_id(model: str) -> tuple[str, str]:
    """Split ``provider:name``.

    Raises:
        AgentConfigError: no provider prefix, an unknown provider, or an empty name.
    """
    provider, sep, name = model.partition(":")
    if not sep or not name.strip():
        raise AgentConfigError(
            f"model {model!r} must look like 'provider:model', e.g. 'openai:gpt-4o-mini'"
        )
    if provider not in PROVIDERS:
        known = ", ".join(sorted(PROVIDERS))
        raise AgentConfigError(f"unknown model provider {provider!r} (known: {known})")
    return provider, name.strip()


def check_base_url(base_url: str) -> None:
    """Refuse a ``base_url`` that is not http(s) or that embeds credentials.

    The URL is never echoed back: a URL with credentials must not reach logs or clients.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentConfigError("base_url must be an http:// or https:// URL")
    if parts.username or parts.password:
        raise AgentConfigError(
            "base_url must not contain credentials; name the key with api_key_env instead"
        )


def resolve_api_key(
    provider: str, *, api_key_env: str | None, base_url: str | None, environ: Mapping[str, str]
) -> str | None:
    """The API key for ``provider`` from the environment (``None`` when none is needed).

    Raises:
        AgentConfigError: the variable that must hold the key is unset or empty.
    """
    info = PROVIDERS[provider]
    env_name = api_key_env or info.key_env
    if env_name is None:
        return None
    value = environ.get(env_name, "").strip()
    if value:
        return value
    required = api_key_env is not None or (info.needs_key and base_url is None)
    if required:
        raise AgentConfigError(
            f"environment variable {env_name} is not set (API key for {provider})"
        )
    return None


def build_model(
    model: str,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    environ: Mapping[str, str],
) -> Model:
    """Build the pydantic-ai model for ``model`` with its key from ``environ``.

    Raises:
        AgentConfigError: bad model string, bad base URL, a missing key, or the provider's
            SDK is not installed (the message names the extra to install).
    """
    provider, name = split_model_id(model)
    if base_url is not None:
        check_base_url(base_url)
    base_url = base_url or PROVIDERS[provider].default_base_url
    key = resolve_api_key(provider, api_key_env=api_key_env, base_url=base_url, environ=environ)
    try:
        return _MODELS[PROVIDERS[provider].extra](name, base_url, key)
    except ImportError:
        extra = PROVIDERS[provider].extra
        raise AgentConfigError(
            f"the {extra} SDK is not installed (model {provider}:{name}): "
            f"pip install 'iobridge[{extra}]'"
        ) from None


def _openai(name: str, base_url: str | None, key: str | None) -> Model:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # Local OpenAI-compatible servers ignore the key but the SDK insists on one.
    return OpenAIChatModel(
        name, provider=OpenAIProvider(base_url=base_url, api_key=key or "not-needed")
    )


def _anthropic(name: str, base_url: str | None, key: str | None) -> Model:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel(name, provider=AnthropicProvider(api_key=key, base_url=base_url))


def _google(name: str, base_url: str | None, key: str | None) -> Model:
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.providers.google import GoogleProvider

    return GoogleModel(name, provider=GoogleProvider(api_key=key, base_url=base_url))


#: Model builders by the extra that installs their SDK; they import it when called.
_MODELS: dict[str, Callable[[str, str | None, str | None], Model]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "google": _google,
}


def adapt_settings(model: Model, settings: ModelSettings) -> ModelSettings:
    """Fit run settings to the model's API.

    The OpenAI chat API has no ``top_k``, so pydantic-ai drops it; OpenAI-compatible servers
    (vLLM, Ollama, llama.cpp, LM Studio) accept it as an extra body field, where it goes when
    the model talks to anything but api.openai.com.
    """
    if "top_k" not in settings or model.system != "openai":
        return settings
    if urlsplit(model.base_url or "").hostname == "api.openai.com":
        return settings
    adapted = dict(settings)
    extra = dict(cast(Mapping[str, Any], adapted.get("extra_body") or {}))
    extra["top_k"] = adapted.pop("top_k")
    adapted["extra_body"] = extra
    return cast("ModelSettings", adapted)


def _status(exc: BaseException) -> int | None:
    return exc.status_code if isinstance(exc, pai_errors.ModelHTTPError) else None


def map_model_error(exc: pai_errors.ModelAPIError) -> AgentError:
    """The stable, safe ``AgentError`` for a failed provider request.

    Codes: ``MODEL_AUTH`` (401/403), ``MODEL_RATE_LIMIT`` (429, after the SDK's retries),
    ``MODEL_UNAVAILABLE`` (5xx, connection failures, timeouts), ``MODEL_ERROR`` otherwise.
    Messages carry the HTTP status at most: never the provider's text, URLs or keys.
    """
    status = _status(exc)
    suffix = f" (HTTP {status})" if status else ""
    if isinstance(exc, pai_errors.ModelAuthenticationError) or status in (401, 403):
        code, message = "MODEL_AUTH", "the model provider rejected the credentials"
    elif isinstance(exc, pai_errors.ModelRateLimitError) or status == 429:
        code, message = "MODEL_RATE_LIMIT", "the model provider is rate limiting requests"
    elif isinstance(
        exc,
        pai_errors.ModelUnavailableError
        | pai_errors.ModelServerError
        | pai_errors.ModelConnectionError
        | pai_errors.ModelRequestTimeout,
    ) or (status is not None and status >= 500):
        code, message = "MODEL_UNAVAILABLE", "the model provider is unavailable"
        if isinstance(exc, pai_errors.ModelTimeoutError | pai_errors.ModelRequestTimeout):
            message = "the model request timed out"
    else:
        code, message = "MODEL_ERROR", "the model request failed"
    logger.warning("model request failed: %s%s (%s)", type(exc).__name__, suffix, code)
    return AgentError(message + suffix, code=code)
