"""The JSON shapes of the io protocol's non-streaming routes, as pydantic models.

One definition serves two readers: the HTTP adapter documents its responses with them (the
OpenAPI document), and ``iobridge.client`` parses responses with them. Field names are the
wire's camelCase. Keys the server may omit are typed ``X | SkipJsonSchema[None] = None``: the
schema says "absent or X", never ``null``, because the server never sends ``null`` there.
Every model accepts unknown keys, as clients must tolerate a newer server.
"""

from __future__ import annotations

from typing import Any, Literal

from ag_ui.core import AgentCapabilities
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from iobridge.protocol.options import MULTITASK_STRATEGIES, TOOL_RESULT_MODES

__all__ = [
    "CAPABILITY_SCHEMAS",
    "FORWARDED_PROPS_SCHEMA",
    "MESSAGE_SCHEMAS",
    "MODEL_SETTING_SCHEMAS",
    "SSE_EVENT_SCHEMA",
    "TOOL_RESULT_BODY_SCHEMA",
    "Agent",
    "AgentList",
    "AgentTool",
    "Branch",
    "BranchList",
    "CancelStatus",
    "ErrorBody",
    "ErrorEnvelope",
    "MessagePage",
    "ResultAccepted",
    "Thread",
    "ThreadPage",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(_Open):
    """What went wrong: a stable ``code``, a safe ``message``, optional ``details``."""

    code: str
    message: str
    details: Any | SkipJsonSchema[None] = None


class ErrorEnvelope(_Open):
    """Every error answer (JSON): ``{"error": {"code", "message", "details"?}}``."""

    error: ErrorBody


class AgentTool(_Open):
    """A server tool an agent runs itself."""

    name: str
    description: str = ""


class Agent(_Open):
    """An agent's discovery data; ``status`` ``unavailable`` comes with a ``reason``.

    ``capabilities`` is what the agent declares about itself, an AG-UI 1.0
    ``AgentCapabilities`` object (``{}`` for an agent that could not be built).
    """

    id: str
    name: str
    description: str = ""
    modelId: str | SkipJsonSchema[None] = None
    aliases: list[str] | SkipJsonSchema[None] = None
    status: Literal["available", "unavailable"] = "available"
    reason: str | SkipJsonSchema[None] = None
    tools: list[AgentTool] = Field(default_factory=list)
    capabilities: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"allOf": [{"$ref": "#/components/schemas/AgentCapabilities"}]},
    )


class AgentList(_Open):
    """``GET /agents``: available agents in registration order, then unavailable ones, and
    the AG-UI protocol versions a run request may declare (``protocolVersion``)."""

    agents: list[Agent]
    protocolVersions: list[str] = Field(default_factory=list)


class Thread(_Open):
    """A conversation; timestamps are ISO-8601 UTC with milliseconds and ``Z``."""

    id: str
    resourceId: str
    agentId: str | SkipJsonSchema[None] = None
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    createdAt: str
    updatedAt: str
    #: ``GET /threads/{threadId}`` only: the interrupts the thread's last run ended with,
    #: still open (AG-UI ``Interrupt`` objects); absent when none is open.
    interrupts: list[dict[str, Any]] | SkipJsonSchema[None] = None


class ThreadPage(_Open):
    """``GET /threads``: most recently updated first; ``nextCursor`` absent on the last page."""

    threads: list[Thread]
    nextCursor: str | SkipJsonSchema[None] = None


class Branch(_Open):
    """One version of a thread's conversation (``replaceFrom``: regenerate, edit)."""

    id: str
    #: The message the branch replaced from (``null``: the thread's first branch, ``main``).
    fromMessageId: str | None
    createdAt: str
    #: The branch the thread's messages are (what runs and ``/messages`` see).
    current: bool


class BranchList(_Open):
    """``GET /threads/{threadId}/branches``: oldest first."""

    branches: list[Branch]


class MessagePage(_Open):
    """``GET /threads/{threadId}/messages``: oldest first; ``nextCursor`` (when older
    messages exist) is the ``cursor`` of the page before.

    Each message is an AG-UI message (``format=agui``: ``{id, role, content?, toolCalls?,
    toolCallId?, ...}``) or a Mastra v2 message (``format=mastra``: ``{id, role, createdAt,
    threadId, resourceId, type: "v2", content: {format: 2, parts}}``).
    """

    messages: list[dict[str, Any]] = Field(
        json_schema_extra={
            "items": {
                "anyOf": [
                    {"$ref": "#/components/schemas/MastraMessage"},
                    {"$ref": "#/components/schemas/AguiMessage"},
                ]
            }
        }
    )
    nextCursor: str | SkipJsonSchema[None] = None


class ResultAccepted(_Open):
    """The tool result reached its pending call."""

    status: Literal["accepted"]


class CancelStatus(_Open):
    """``cancelling`` (202): the run was stopped; ``ended`` (200): it had already ended."""

    status: Literal["cancelling", "ended"]


#: The two message formats, referenced by ``MessagePage``.
MESSAGE_SCHEMAS: dict[str, dict[str, Any]] = {
    "AguiMessage": {
        "type": "object",
        "description": "An AG-UI message as stored (format=agui).",
        "required": ["id", "role"],
        "properties": {
            "id": {"type": "string"},
            "role": {"type": "string", "examples": ["user", "assistant", "tool", "system"]},
            "content": {},
            "toolCalls": {"type": "array", "items": {"type": "object"}},
            "toolCallId": {"type": "string"},
            "error": {"type": "string"},
        },
        "additionalProperties": True,
    },
    "MastraMessage": {
        "type": "object",
        "description": "A Mastra v2 message, as io.Assist renders history (format=mastra).",
        "required": ["id", "role", "createdAt", "threadId", "resourceId", "type", "content"],
        "properties": {
            "id": {"type": "string"},
            "role": {"type": "string", "enum": ["user", "assistant", "system"]},
            "createdAt": {"type": "string"},
            "threadId": {"type": "string"},
            "resourceId": {"type": "string"},
            "type": {"type": "string", "const": "v2"},
            "content": {
                "type": "object",
                "required": ["format", "parts"],
                "properties": {
                    "format": {"type": "integer", "const": 2},
                    "parts": {"type": "array", "items": {"type": "object"}},
                    "content": {"type": "string"},
                },
            },
        },
        "additionalProperties": True,
    },
}

def _without_null(schema: Any) -> Any:
    """The generated schema without its ``null`` alternatives: iobridge omits a field rather
    than sending ``null`` (and AG-UI 1.0 consumers reject ``null`` in most of them)."""
    if isinstance(schema, list):
        return [_without_null(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _without_null(v) for k, v in schema.items() if not (k == "default" and v is None)}
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            out.update(kept[0])
        else:
            out["anyOf"] = kept
    return out


def _capability_schemas() -> dict[str, dict[str, Any]]:
    schema = AgentCapabilities.model_json_schema(
        by_alias=True, ref_template="#/components/schemas/{model}"
    )
    defs: dict[str, Any] = schema.pop("$defs", {})
    return {name: _without_null(value) for name, value in {**defs, "AgentCapabilities": schema}
            .items()}


#: AG-UI 1.0 ``AgentCapabilities`` and the objects it holds, referenced by ``Agent``.
CAPABILITY_SCHEMAS: dict[str, dict[str, Any]] = _capability_schemas()

#: ``modelSettings`` keys and ranges, as ``protocol.options.MODEL_SETTINGS`` checks them.
MODEL_SETTING_SCHEMAS: dict[str, dict[str, Any]] = {
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "maxTokens": {"type": "integer", "minimum": 1},
    "topP": {"type": "number", "minimum": 0, "maximum": 1},
    "topK": {"type": "integer", "minimum": 1},
    "seed": {"type": "integer"},
    "stopSequences": {
        "type": "array", "minItems": 1, "maxItems": 16, "items": {"type": "string", "minLength": 1}
    },
    "presencePenalty": {"type": "number", "minimum": -2, "maximum": 2},
    "frequencyPenalty": {"type": "number", "minimum": -2, "maximum": 2},
    "maxRetries": {"type": "integer", "minimum": 0, "maximum": 10},
}

#: ``forwardedProps`` with the keys ``protocol.options.parse_run_options`` reads; other keys
#: pass through to agents.
FORWARDED_PROPS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Run options; unknown keys are passed to the agent untouched.",
    "properties": {
        "agentId": {"type": "string", "minLength": 1, "description": "default: the server's"},
        "resourceId": {"type": "string", "description": "thread owner; default: the caller's"},
        "memoryOptions": {
            "type": "object",
            "properties": {
                "lastMessages": {"type": "integer", "minimum": 0, "default": 40},
                "readOnly": {"type": "boolean", "default": False},
                "generateTitle": {"type": "boolean", "default": False},
            },
        },
        "modelSettings": {"type": "object", "properties": MODEL_SETTING_SCHEMAS},
        "structuredOutput": {
            "type": "object",
            "required": ["schema"],
            "properties": {
                "schema": {"type": "object", "description": "a JSON Schema of type object"},
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                "description": {"type": "string"},
            },
        },
        "toolResultMode": {"type": "string", "enum": list(TOOL_RESULT_MODES)},
        "messagesSnapshot": {"type": "boolean", "default": False},
        "multitaskStrategy": {
            "type": "string", "enum": list(MULTITASK_STRATEGIES),
            "description": "what to do when the thread is busy (default: the agent's, then "
            "the server's multitask_strategy, itself 'reject')",
        },
        "replaceFrom": {
            "type": "string",
            "description": "a stored message id of the thread's current branch: from it on "
            "the thread becomes an earlier branch; this run's messages form the new one",
        },
    },
    "additionalProperties": True,
}

#: One Server-Sent Event of a run stream (OpenAPI 3.2 ``itemSchema``): ``id`` is the event's
#: sequence number in its run, ``data`` one AG-UI event as JSON.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string", "const": "message"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string", "pattern": "^[A-Z_]+$"}},
                "additionalProperties": True,
            },
        },
    },
}

#: Body of ``POST /runs/{runId}/tool-calls/{toolCallId}/result``: one of ``content`` (text),
#: ``result`` or ``output`` (any JSON), or ``error`` alone (a failed tool).
TOOL_RESULT_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "description": "the result as text"},
        "result": {"description": "the result as any JSON value"},
        "output": {"description": "alias of result"},
        "isError": {"type": "boolean", "default": False},
        "error": {"type": "string", "description": "the tool failed (implies isError)"},
    },
    "anyOf": [
        {"required": ["content"]},
        {"required": ["result"]},
        {"required": ["output"]},
        {"required": ["error"]},
    ],
    "additionalProperties": True,
    "example": {"result": {"city": "Oslo", "temperature": 21}},
}
