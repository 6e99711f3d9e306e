"""Tolerant parsing of ``RunAgentInput``, the body of a run request.

Tolerant in: unknown keys are kept, optional fields default, every AG-UI message role is
accepted (including legacy ``binary`` content parts), and ``tools``/``context``/
``forwardedProps`` may be absent. A role that is not an AG-UI role (``"human"``) is refused
with the list of roles: stored, it would be dropped silently from every view of the thread.
Strict where it matters: the ids and the shapes a backend relies on (message ids, tool call
ids, toolCallId pairing fields) are checked, and a bad body is one ``InputError`` listing
every problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.json_limits import (
    DEFAULT_MAX_JSON_DEPTH,
    check_json_text,
    check_value,
    loads,
)
from iobridge.protocol.media import content_problems
from iobridge.protocol.text import MAX_ID_LENGTH, reject_nul, validate_id
from iobridge.protocol.versions import check_protocol_version

#: Default most messages one run request may carry (``Settings.max_messages``).
DEFAULT_MAX_MESSAGES = 10_000
#: Bodies larger than this are worth parsing off the event loop (``Backend.start_run``).
OFF_LOOP_BYTES = 64 * 1024



def _printable(value: str) -> str:
    if not value.isprintable():
        raise PydanticCustomError("invalid_id", "must contain only printable characters")
    return value


Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(_printable)
]
#: Top-level ids refused as ``INVALID_ID`` before anything else is looked at.
_RUN_IDS = ("threadId", "runId", "parentRunId")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _FunctionCall(_Open):
    name: str
    arguments: str


class _ToolCall(_Open):
    id: Identifier
    type: Literal["function"] = "function"
    function: _FunctionCall


class _ContentPart(_Open):
    type: str


class _TextMessage(_Open):
    id: Identifier
    role: Literal["system", "developer"]
    content: str


class _UserMessage(_Open):
    id: Identifier
    role: Literal["user"]
    content: str | list[_ContentPart]


class _AssistantMessage(_Open):
    id: Identifier
    role: Literal["assistant"]
    content: str | None = None
    tool_calls: list[_ToolCall] | None = Field(default=None, alias="toolCalls")


class _ToolMessage(_Open):
    id: Identifier
    role: Literal["tool"]
    content: str | list[_ContentPart] | None = None
    tool_call_id: Identifier = Field(alias="toolCallId")
    error: str | None = None


class _ActivityMessage(_Open):
    id: Identifier
    role: Literal["activity"]
    activity_type: str = Field(alias="activityType")
    content: dict[str, Any]


class _ReasoningMessage(_Open):
    id: Identifier
    role: Literal["reasoning"]
    content: str


_KNOWN_ROLES = {"system", "developer", "user", "assistant", "tool", "activity", "reasoning"}

_Message = Annotated[
    _TextMessage
    | _UserMessage
    | _AssistantMessage
    | _ToolMessage
    | _ActivityMessage
    | _ReasoningMessage,
    Field(discriminator="role"),
]


class _OtherMessage(_Open):
    """What a message without a usable role is still checked for (its id and role)."""

    id: Identifier
    role: Identifier


class _Tool(_Open):
    name: Identifier
    description: str = ""
    parameters: Any = None


class _Context(_Open):
    description: str
    value: str


class _ResumeEntry(_Open):
    interrupt_id: Identifier = Field(alias="interruptId")
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: dict[str, Any] | None = None


class _RunAgentInput(_Open):
    thread_id: Identifier = Field(alias="threadId")
    run_id: Identifier = Field(alias="runId")
    parent_run_id: Identifier | None = Field(default=None, alias="parentRunId")
    protocol_version: str | None = Field(default=None, alias="protocolVersion")
    messages: list[dict[str, Any]]
    tools: list[_Tool] = Field(default_factory=list)
    context: list[_Context] = Field(default_factory=list)
    state: Any = None
    forwarded_props: Any = Field(default=None, alias="forwardedProps")
    resume: list[_ResumeEntry] | None = None


_message_adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(_Message)


def _inline_refs(schema: Any, defs: dict[str, Any]) -> Any:
    """Replace local ``$defs`` references (they do not resolve inside an OpenAPI document)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline_refs(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline_refs(item, defs) for item in schema]
    return schema


_raw_schema = _RunAgentInput.model_json_schema(by_alias=True)
#: JSON Schema of the accepted body, for the OpenAPI document.
RUN_AGENT_INPUT_SCHEMA: dict[str, Any] = _inline_refs(_raw_schema, _raw_schema.get("$defs", {}))
_input_adapter: pydantic.TypeAdapter[_RunAgentInput] = pydantic.TypeAdapter(_RunAgentInput)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInput:
    """A validated run request. Messages, tools and context keep their wire (camelCase) form."""

    thread_id: str
    run_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    context: list[dict[str, Any]] = field(default_factory=list)
    state: Any = None
    #: ``forwardedProps`` as an object (``{}`` when absent or not an object).
    forwarded_props: dict[str, Any] = field(default_factory=dict)
    parent_run_id: str | None = None
    #: ``resume`` entries (AG-UI 1.0) in wire form: ``{interruptId, status, payload?,
    #: metadata?}``; empty when the run does not continue an interrupted one.
    resume: list[dict[str, Any]] = field(default_factory=list)
    #: The AG-UI version the client declared (``None``: a client from before versions).
    protocol_version: str | None = None
    #: The request body exactly as parsed, unknown keys included.
    raw: dict[str, Any] = field(default_factory=dict)


def _errors(exc: pydantic.ValidationError, prefix: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    # Only each error's loc and msg are read: what the flags leave out is never needed (so
    # their mutants cannot be told apart).
    off = dict(include_url=False, include_context=False, include_input=False)  # pragma: no mutate
    return [
        {"loc": [*prefix, *err["loc"]], "message": err["msg"]} for err in exc.errors(**off)
    ]


def _check_arguments(message: dict[str, Any], index: int, max_depth: int) -> None:
    """Tool-call ``arguments`` are JSON text that the tool dispatch and the Mastra view
    decode: the depth limit of the body applies to them too."""
    for number, call in enumerate(message.get("toolCalls") or []):
        arguments = call["function"]["arguments"]
        check_json_text(
            arguments, max_depth=max_depth,
            where=f"messages[{index}].toolCalls[{number}].function.arguments",
        )


def _unknown_role(role: Any, index: int) -> dict[str, Any] | None:
    """A role that is a string but no AG-UI role (``"human"``): refused, naming the roles,
    rather than stored where no view of the thread could show it."""
    if not isinstance(role, str) or role in _KNOWN_ROLES:
        return None
    return {
        "loc": ["messages", index, "role"],
        "message": f"unknown role {role[:64]!r}; a message's role is one of "
                   f"{', '.join(sorted(_KNOWN_ROLES))}",
    }


def parse_run_input(
    body: bytes | str | dict[str, Any],
    *,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> RunInput:
    """Parse and validate a RunAgentInput body.

    The depth of the whole body (and so of every field in it), its integers and the message
    count are checked right after decoding, before any per-message work, so an oversized or
    over-nested history costs one JSON decode and nothing more (``protocol.json_limits``).

    Raises:
        PayloadTooLarge: more than ``max_messages`` messages (code ``TOO_MANY_MESSAGES``).
        InputError: ``INVALID_ID``: threadId, runId or parentRunId is a string with control
            (or other non-printable) characters; ``INVALID_TEXT``: U+0000 in any text;
            ``JSON_TOO_DEEP``: the body, or a tool call's ``arguments``, nests deeper than
            ``max_depth``; ``NUMBER_OUT_OF_RANGE``: an integer beyond 64 bits;
            ``UNSUPPORTED_PROTOCOL_VERSION``: a ``protocolVersion`` of another major line;
            otherwise not JSON, not an object, or a required field missing or malformed
            (``details`` lists each problem with its location).
    """
    if isinstance(body, dict):
        data = body
        check_value(data, max_depth=max_depth)
    else:
        data = loads(body, max_depth=max_depth)
    if not isinstance(data, dict):
        raise InputError("request body must be a JSON object", code="INVALID_REQUEST")
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > max_messages:
        raise PayloadTooLarge(
            f"a run request carries at most {max_messages} messages", code="TOO_MANY_MESSAGES"
        )
    for key in _RUN_IDS:
        value = data.get(key)
        if isinstance(value, str) and value:
            validate_id(value, key)
    reject_nul(data, None if isinstance(body, dict) else body)
    protocol_version = check_protocol_version(data.get("protocolVersion"))
    try:
        parsed = _input_adapter.validate_python(data)
    except pydantic.ValidationError as exc:
        raise InputError(
            "invalid RunAgentInput", code="INVALID_REQUEST", details=_errors(exc)
        ) from exc
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, message in enumerate(parsed.messages):
        role = message.get("role")
        unknown = _unknown_role(role, index)
        if unknown is not None:
            problems.append(unknown)
            continue
        try:
            if role in _KNOWN_ROLES:
                _message_adapter.validate_python(message)
            else:
                _OtherMessage.model_validate(message)
        except pydantic.ValidationError as exc:
            problems.extend(_errors(exc, ("messages", index)))
            continue
        if role in ("user", "tool"):
            problems += content_problems(message.get("content"), ("messages", index, "content"))
        if message["id"] in seen:
            problems.append(
                {"loc": ["messages", index, "id"], "message": "duplicate message id"}
            )
        seen.add(message["id"])
        if role == "assistant":
            _check_arguments(message, index, max_depth)
    if problems:
        raise InputError("invalid RunAgentInput", code="INVALID_REQUEST", details=problems)
    forwarded = parsed.forwarded_props if isinstance(parsed.forwarded_props, dict) else {}
    return RunInput(
        thread_id=parsed.thread_id,
        run_id=parsed.run_id,
        parent_run_id=parsed.parent_run_id,
        messages=parsed.messages,
        tools=[t.model_dump(by_alias=True, exclude_none=True) for t in parsed.tools],
        context=[c.model_dump(by_alias=True) for c in parsed.context],
        state=parsed.state,
        forwarded_props=forwarded,
        resume=[r.model_dump(by_alias=True, exclude_none=True) for r in parsed.resume or []],
        protocol_version=protocol_version,
        raw=data,
    )

