"""``forwardedProps`` parsed once, at run start, into one typed ``RunOptions``.

The io protocol's conventions (``agentId``, ``resourceId``, ``memoryOptions``,
``modelSettings``, ``structuredOutput``) and iobridge's ``toolResultMode`` are checked before
the stream starts, so a client that sends a temperature of ``"hot"`` or a schema that is not a
JSON Schema gets an HTTP 400 with details rather than a RUN_ERROR halfway through a stream.
Unknown keys are kept (``RunOptions.props``) for agents that read their own. Parsing is pure:
no I/O, no model calls.

``modelSettings`` keys (camelCase on the wire; the snake_case spelling is accepted too, so the
same names work in ``iobridge.toml``) map onto pydantic-ai ``ModelSettings`` keys:

=================  ===================  ==========================================
wire key           ModelSettings key    accepted values
=================  ===================  ==========================================
temperature        temperature          number, 0 ≤ x ≤ 2
maxTokens          max_tokens           integer ≥ 1
topP               top_p                number, 0 ≤ x ≤ 1
topK               top_k                integer ≥ 1
seed               seed                 integer
stopSequences      stop_sequences       list of 1–16 non-empty strings
presencePenalty    presence_penalty     number, -2 ≤ x ≤ 2
frequencyPenalty   frequency_penalty    number, -2 ≤ x ≤ 2
maxRetries         max_retries          integer, 0 ≤ x ≤ 10
=================  ===================  ==========================================

``maxRetries`` is the number of times the provider SDK client retries a failed request (429 and
5xx with its own exponential backoff, honouring ``Retry-After``); it does not change how often
an invalid structured answer is sent back to the model, which is the agent's
``output_retries``. Unknown keys are ignored and logged, as the protocol asks for tolerance.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, get_args

import jsonschema
import orjson

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.text import validate_id

logger = logging.getLogger(__name__)

#: Up to this many stop sequences (the common provider limit is 4–16).
MAX_STOP_SEQUENCES = 16
#: Name rule OpenAI applies to ``response_format.json_schema.name``; others are looser.
_OUTPUT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DEFAULT_OUTPUT_NAME = "result"
#: Defaults of ``Settings.max_output_schema_bytes`` / ``max_output_schema_objects``. Checking a
#: schema against its metaschema costs about 0.3 ms per object (a 100,000-property schema
#: took 33 s): the bounds keep it to a fraction of a second, spent in a worker thread.
DEFAULT_MAX_SCHEMA_BYTES = 64 * 1024
DEFAULT_MAX_SCHEMA_OBJECTS = 1000
STRUCTURED_OUTPUT_TOO_LARGE = "STRUCTURED_OUTPUT_TOO_LARGE"


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The checks take their bounds as arguments (bound with ``partial`` in MODEL_SETTINGS) rather
# than being closures built at import: a closure factory runs once at import, so a test could
# never see a change to it (mutation testing reports it as surviving, docs/testing.md).
def _number(lo: float, hi: float, value: Any) -> str | None:
    if not _is_number(value) or not lo <= value <= hi:
        return f"must be a number between {lo:g} and {hi:g}"
    return None


def _integer(lo: int | None, hi: int | None, value: Any) -> str | None:
    if not _is_int(value):
        return "must be an integer"
    if lo is not None and value < lo:
        return f"must be at least {lo}"
    if hi is not None and value > hi:
        return f"must be at most {hi}"
    return None


def _stop_sequences(value: Any) -> str | None:
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in value)
    ):
        return f"must be a list of 1 to {MAX_STOP_SEQUENCES} non-empty strings"
    return None


#: wire key -> (ModelSettings key, check returning an error text or None)
MODEL_SETTINGS: dict[str, tuple[str, Callable[[Any], str | None]]] = {
    "temperature": ("temperature", partial(_number, 0, 2)),
    "maxTokens": ("max_tokens", partial(_integer, 1, None)),
    "topP": ("top_p", partial(_number, 0, 1)),
    "topK": ("top_k", partial(_integer, 1, None)),
    "seed": ("seed", partial(_integer, None, None)),
    "stopSequences": ("stop_sequences", _stop_sequences),
    "presencePenalty": ("presence_penalty", partial(_number, -2, 2)),
    "frequencyPenalty": ("frequency_penalty", partial(_number, -2, 2)),
    "maxRetries": ("max_retries", partial(_integer, 0, 10)),
}
_BY_SNAKE = {snake: wire for wire, (snake, _) in MODEL_SETTINGS.items()}


def parse_model_settings(
    raw: Any, *, where: str = "forwardedProps.modelSettings"
) -> dict[str, Any]:
    """Validate ``raw`` and return the pydantic-ai ``ModelSettings`` keys it describes.

    Args:
        raw: The ``modelSettings`` object (``None`` means no overrides).
        where: Where the object came from, for error details.

    Returns:
        The settings, keyed the pydantic-ai way (``max_tokens``, ...).

    Raises:
        InputError: ``raw`` is not an object, or a known key has a wrong type or range; the
            details list every offending field.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError(
            f"{where} must be an object",
            code="INVALID_MODEL_SETTINGS",
            details=[{"field": where, "message": "must be an object"}],
        )
    settings: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    for key, value in raw.items():
        wire = key if key in MODEL_SETTINGS else _BY_SNAKE.get(key)
        if wire is None:
            logger.info("ignoring unknown model setting %r in %s", key, where)
            continue
        snake, check = MODEL_SETTINGS[wire]
        message = check(value)
        if message is not None:
            problems.append({"field": f"{where}.{key}", "message": message})
        else:
            settings[snake] = list(value) if isinstance(value, list) else value
    if problems:
        names = ", ".join(p["field"] for p in problems)
        raise InputError(
            f"invalid model settings: {names}", code="INVALID_MODEL_SETTINGS", details=problems
        )
    return settings


@dataclass(frozen=True, slots=True, kw_only=True)
class StructuredOutput:
    """A JSON Schema the final answer must satisfy (``forwardedProps.structuredOutput``)."""

    schema: dict[str, Any]
    name: str = _DEFAULT_OUTPUT_NAME
    description: str | None = None
    _validator: jsonschema.protocols.Validator = field(repr=False, compare=False)

    def errors(self, value: Any) -> list[str]:
        """Why ``value`` does not satisfy the schema (empty when it does), for a model retry."""
        found = []
        for err in self._validator.iter_errors(value):
            path = "/".join(str(p) for p in err.absolute_path)
            found.append(f"{path or '(root)'}: {err.message}")
            if len(found) == 10:
                break
        return found


def _invalid_output(message: str) -> InputError:
    return InputError(
        f"invalid structuredOutput: {message}",
        code="INVALID_STRUCTURED_OUTPUT",
        details=[{"field": "forwardedProps.structuredOutput", "message": message}],
    )


def _too_large(message: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"structuredOutput is too large: {message}", code=STRUCTURED_OUTPUT_TOO_LARGE,
        details=[{"field": "forwardedProps.structuredOutput.schema", "message": message}],
    )


def _check_schema_size(schema: Mapping[str, Any], max_bytes: int, max_objects: int) -> None:
    """Refuse a schema over ``max_bytes`` of JSON or ``max_objects`` objects, before the
    metaschema check (whose cost grows with both)."""
    try:
        size = len(orjson.dumps(schema))
    except orjson.JSONEncodeError:
        raise _invalid_output("'schema' must be JSON") from None
    if size > max_bytes:
        raise _too_large(f"the schema exceeds {max_bytes} bytes of JSON")
    objects = 0
    stack: list[Any] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            objects += 1
            if objects > max_objects:
                raise _too_large(f"the schema has more than {max_objects} objects")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_structured_output(
    raw: Any,
    *,
    max_bytes: int = DEFAULT_MAX_SCHEMA_BYTES,
    max_objects: int = DEFAULT_MAX_SCHEMA_OBJECTS,
) -> StructuredOutput | None:
    """Validate ``forwardedProps.structuredOutput`` ``{schema, name?, description?}``.

    The schema is bounded in size (``max_bytes`` of JSON, ``max_objects`` objects: each
    property's subschema is one; its depth is the request's JSON depth limit), then checked
    against its metaschema (the draft named by ``$schema``, else 2020-12), and must describe an
    object, since providers constrain only object-shaped answers. The metaschema check costs
    up to a few hundred milliseconds at the bounds: ``Backend.start_run`` runs it in a worker
    thread.

    Raises:
        PayloadTooLarge: the schema is over a bound (``STRUCTURED_OUTPUT_TOO_LARGE``).
        InputError: not an object, no schema, a schema that is not a valid JSON Schema or not
            an object schema, or a bad name/description.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _invalid_output("must be an object with a 'schema'")
    schema = raw.get("schema")
    if not isinstance(schema, Mapping):
        raise _invalid_output("'schema' must be a JSON Schema object")
    schema = dict(schema)
    _check_schema_size(schema, max_bytes, max_objects)
    name = raw.get("name", schema.get("title", _DEFAULT_OUTPUT_NAME))
    if not isinstance(name, str) or not _OUTPUT_NAME.match(name):
        raise _invalid_output("'name' must be 1-64 letters, digits, '_' or '-'")
    description = raw.get("description", schema.get("description"))
    if description is not None and not isinstance(description, str):
        raise _invalid_output("'description' must be a string")
    validator_cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise _invalid_output(f"not a valid JSON Schema at {where}: {exc.message}") from None
    if schema.get("type") != "object":
        raise _invalid_output("the schema must have \"type\": \"object\" at the top level")
    return StructuredOutput(
        schema=schema, name=name, description=description, _validator=validator_cls(schema)
    )


#: How frontend tool results reach a run: ``in-run`` (the result route, the io protocol) or
#: ``next-run`` (the run ends; the client re-runs with the tool message, plain AG-UI).
ToolResultMode = Literal["in-run", "next-run"]
TOOL_RESULT_MODES: tuple[ToolResultMode, ...] = get_args(ToolResultMode)

DEFAULT_LAST_MESSAGES = 40

#: What a run does when its thread is busy with another run (``multitaskStrategy``):
#: ``reject`` (409 ``THREAD_BUSY``), ``enqueue`` (wait for the runs ahead), ``interrupt``
#: (cancel the live run, keep what it produced) or ``rollback`` (cancel it and remove its
#: messages).
MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
MULTITASK_STRATEGIES: tuple[MultitaskStrategy, ...] = get_args(MultitaskStrategy)


def _props_error(message: str) -> InputError:
    return InputError(message, code="INVALID_FORWARDED_PROPS")


def parse_tool_result_mode(raw: Any, *, where: str = "forwardedProps.toolResultMode") -> (
    ToolResultMode | None
):
    """``raw`` as a ``ToolResultMode`` (``None`` stays ``None``: the default applies).

    Raises:
        InputError: any other value.
    """
    if raw is None:
        return None
    for mode in TOOL_RESULT_MODES:
        if raw == mode:
            return mode
    raise _props_error(f"{where} must be 'in-run' or 'next-run'")


def parse_multitask_strategy(
    raw: Any, *, where: str = "forwardedProps.multitaskStrategy"
) -> MultitaskStrategy | None:
    """``raw`` as a ``MultitaskStrategy`` (``None`` stays ``None``: the default applies).

    Raises:
        InputError: any other value (``INVALID_MULTITASK_STRATEGY``, naming the four).
    """
    if raw is None:
        return None
    for strategy in MULTITASK_STRATEGIES:
        if raw == strategy:
            return strategy
    names = ", ".join(f"'{s}'" for s in MULTITASK_STRATEGIES)
    raise InputError(
        f"{where} must be one of {names}",
        code="INVALID_MULTITASK_STRATEGY",
        details=[{"field": where, "message": f"must be one of {names}"}],
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryOptions:
    """``forwardedProps.memoryOptions``: how the run reads and writes its thread."""

    #: The model sees at most this many stored messages (never splitting a call from its result).
    last_messages: int = DEFAULT_LAST_MESSAGES
    #: Read history, store nothing.
    read_only: bool = False
    #: Title an untitled thread from the conversation.
    generate_title: bool = False


def parse_memory_options(raw: Any) -> MemoryOptions:
    """Read ``memoryOptions``; unknown keys are ignored.

    Raises:
        InputError: not an object, or a known key has the wrong type or range.
    """
    if raw is None:
        return MemoryOptions()
    if not isinstance(raw, Mapping):
        raise _props_error("forwardedProps.memoryOptions must be an object")
    last = raw.get("lastMessages", DEFAULT_LAST_MESSAGES)
    if last is False or last is None:
        last = DEFAULT_LAST_MESSAGES
    if type(last) is not int or last < 0:
        raise _props_error("memoryOptions.lastMessages must be a non-negative integer")
    flags = {}
    for key in ("readOnly", "generateTitle"):
        value = raw.get(key, False)
        if not isinstance(value, bool):
            raise _props_error(f"memoryOptions.{key} must be a boolean")
        flags[key] = value
    return MemoryOptions(
        last_messages=last, read_only=flags["readOnly"], generate_title=flags["generateTitle"]
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """A run's ``forwardedProps``, validated; every consumer reads this, never the raw dict."""

    #: ``agentId``: the agent to run (``None``: the server's default).
    agent_id: str | None = None
    #: ``resourceId`` exactly as sent (any JSON value); the authenticator checks it.
    resource_id: Any = None
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    #: ``modelSettings`` as pydantic-ai ``ModelSettings`` keys (``max_tokens``, ...).
    model_settings: dict[str, Any] = field(default_factory=dict)
    structured_output: StructuredOutput | None = None
    tool_result_mode: ToolResultMode | None = None
    #: ``multitaskStrategy``: what to do when the thread is busy (``None``: the agent's,
    #: then the server's).
    multitask_strategy: MultitaskStrategy | None = None
    #: ``replaceFrom``: a stored message of the thread's current branch; from it on the
    #: thread's messages become an earlier branch (regenerate, edit).
    replace_from: str | None = None
    #: ``messagesSnapshot``: send the stored thread as MESSAGES_SNAPSHOT after RUN_STARTED.
    messages_snapshot: bool = False
    #: The whole ``forwardedProps`` object, unknown keys included (pass-through).
    props: dict[str, Any] = field(default_factory=dict)


def parse_run_options(
    forwarded_props: Mapping[str, Any] | None,
    *,
    max_schema_bytes: int = DEFAULT_MAX_SCHEMA_BYTES,
    max_schema_objects: int = DEFAULT_MAX_SCHEMA_OBJECTS,
) -> RunOptions:
    """Parse ``forwardedProps`` once (``max_schema_*``: see ``parse_structured_output``).

    Raises:
        PayloadTooLarge: a ``structuredOutput`` schema over its bounds.
        InputError: a known key is present and invalid (``agentId`` not a string included).
    """
    props = dict(forwarded_props or {})
    agent_id = props.get("agentId")
    if agent_id is not None and (not isinstance(agent_id, str) or not agent_id):
        raise InputError("forwardedProps.agentId must be a non-empty string", code="INVALID_ID")
    replace_from = props.get("replaceFrom")
    if replace_from is not None:
        try:
            validate_id(replace_from, "forwardedProps.replaceFrom")
        except InputError as exc:
            raise InputError(exc.message, code="INVALID_REPLACE_FROM") from None
    snapshot = props.get("messagesSnapshot", False)
    if not isinstance(snapshot, bool):
        raise InputError("forwardedProps.messagesSnapshot must be a boolean",
                         code="INVALID_FORWARDED_PROPS")
    return RunOptions(
        agent_id=agent_id,
        resource_id=props.get("resourceId"),
        memory=parse_memory_options(props.get("memoryOptions")),
        model_settings=parse_model_settings(props.get("modelSettings")),
        structured_output=parse_structured_output(
            props.get("structuredOutput"), max_bytes=max_schema_bytes,
            max_objects=max_schema_objects,
        ),
        tool_result_mode=parse_tool_result_mode(props.get("toolResultMode")),
        multitask_strategy=parse_multitask_strategy(props.get("multitaskStrategy")),
        replace_from=replace_from,
        messages_snapshot=snapshot,
        props=props,
    )
