"""What an agent declares about itself: AG-UI 1.0 ``AgentCapabilities``.

``GET /agents`` carries each agent's declaration, so a client can shape its interface before a
run (a file picker only where files are accepted, an approval affordance only where
interrupts happen). Each agent kind builds its own from what it really is (its tools, its
model's input media, whether it can interrupt); the operator may override any part per agent
(``capabilities = {...}`` in TOML, or ``Agent.set_capabilities``).

Declarations follow the spec's rules: an omitted field means *undeclared*, not unsupported,
so a kind says ``false`` only where it knows; and they are informative, never binding on the
stream. Every declaration is checked against the ``ag_ui.core`` models, strictly: the schema
closes every capability object, so an unknown key (a typo) is refused.

Bridge-wide facts go into every declaration: runs stream over SSE and can be resumed by event
id (``transport``), the thread keeps the shared state between runs (``state.persistentState``),
and ``custom.durableExecution`` says whether a run survives the loss of the process that
drives it (the agent can re-execute from a checkpoint; the Backend says ``false`` when the
deployment keeps no checkpoints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic
from ag_ui.core import AgentCapabilities

__all__ = [
    "MEDIA_INPUTS",
    "CapabilityError",
    "accepted_media",
    "bridge_capabilities",
    "merge_capabilities",
    "validate_capabilities",
]

#: The input modalities of ``multimodal.input``, in the order refusals name them.
MEDIA_INPUTS = ("image", "audio", "video", "pdf", "file")


class CapabilityError(ValueError):
    """A capabilities object that does not validate as AG-UI ``AgentCapabilities``."""


def _unknown_keys(model: type[pydantic.BaseModel], data: Mapping[str, Any], path: str) -> list[str]:
    """Keys of ``data`` the model does not define, recursively (``tools.itmes``, say)."""
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    unknown: list[str] = []
    for key, value in data.items():
        field = fields.get(key)
        where = f"{path}{key}"
        if field is None:
            unknown.append(where)
            continue
        inner = field.annotation
        # ``Optional[SomeCapabilities]``: the model among the union's members.
        members = getattr(inner, "__args__", (inner,))
        nested = next(
            (m for m in members if isinstance(m, type) and issubclass(m, pydantic.BaseModel)),
            None,
        )
        if nested is not None and isinstance(value, Mapping) and key not in ("metadata",):
            unknown += _unknown_keys(nested, value, f"{where}.")
    return unknown


#: Objects inside a declaration that are open by key (the spec's ``Metadata`` and ``custom``),
#: and lists of records whose own unknown keys are tolerated (``Tool`` allows extras).
_OPEN = frozenset({"custom"})


def validate_capabilities(data: Any, *, where: str = "capabilities") -> dict[str, Any]:
    """``data`` checked as AG-UI ``AgentCapabilities``, in its wire form (camelCase).

    Raises:
        CapabilityError: not an object, an unknown key, or a value of the wrong type; the
            message names each offending field.
    """
    if not isinstance(data, Mapping):
        raise CapabilityError(f"{where} must be a table of AG-UI capability groups")
    unknown = _unknown_keys(AgentCapabilities, {k: v for k, v in data.items()
                                                if k not in _OPEN}, "")
    unknown += [k for k in data if k in _OPEN and not isinstance(data[k], Mapping)]
    if unknown:
        raise CapabilityError(
            f"{where}: unknown or malformed key(s) {', '.join(sorted(unknown))} (AG-UI "
            "AgentCapabilities groups: " + ", ".join(
                f.alias or n for n, f in AgentCapabilities.model_fields.items()
            ) + ")"
        )
    try:
        model = AgentCapabilities.model_validate(dict(data), strict=True)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        )
        raise CapabilityError(f"{where}: {problems}") from None
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped


def merge_capabilities(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base`` key by key (objects merge, anything else replaces)."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = merge_capabilities(current, value)
        else:
            merged[key] = value
    return merged


def bridge_capabilities(
    *, name: str, description: str, kind: str, durable: bool = False
) -> dict[str, Any]:
    """What is true of every agent iobridge serves, whatever the agent (``durable``: its
    runs can be continued from a checkpoint)."""
    identity: dict[str, Any] = {"name": name, "type": kind}
    if description:
        identity["description"] = description
    return {
        "identity": identity,
        # Runs stream over SSE; GET /runs/{runId}/events resumes one by event id.
        "transport": {"streaming": True, "resumable": True},
        # The thread keeps the state a run ends with for the next one.
        "state": {"persistentState": True},
        "custom": {"durableExecution": durable},
    }


def accepted_media(capabilities: Mapping[str, Any]) -> dict[str, bool]:
    """The input modalities a declaration states (``multimodal.input``), by name.

    A modality left out is undeclared: the caller lets it through.
    """
    multimodal = capabilities.get("multimodal")
    media = multimodal.get("input") if isinstance(multimodal, Mapping) else None
    if not isinstance(media, Mapping):
        return {}
    return {k: v for k, v in media.items() if k in MEDIA_INPUTS and isinstance(v, bool)}
