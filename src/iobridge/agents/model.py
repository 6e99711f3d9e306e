"""The model-backed agent: an LLM (through pydantic-ai) with server and frontend tools.

pydantic-ai owns the model/tool loop; this module adapts it to the bridge:

- **History.** ``ctx.messages`` (AG-UI dicts, already without activity/reasoning) become
  pydantic-ai messages: user/system/developer/assistant text, assistant ``toolCalls`` as
  ``ToolCallPart`` paired with ``tool`` messages as ``ToolReturnPart`` (failed when the message
  has ``error``). Calls without a result, and results without a call, are dropped, since
  providers reject unpaired ones. Multimodal parts become file parts, or a text placeholder.
- **Tools.** One toolset per run (the pattern of pydantic-ai's AG-UI frontend toolset) holds the
  agent's server tools and the client's frontend tools. Calling any of them goes through
  ``ctx.call_tool`` with the model's own ``tool_call_id``, so the runtime announces the call
  (TOOL_CALL_START/ARGS/END), runs it (server) or waits for the result route (frontend) and
  emits TOOL_CALL_RESULT. A failed call goes back to the model as a failed tool return; a
  deferred one (next-run mode) ends the run cleanly.
- **Streaming.** Each model request is a step (``model-request-<n>``). Text and thinking parts
  become ``TextDelta``/``TextEnd`` and ``ReasoningDelta``/``ReasoningEnd``.
- **Structured output.** ``forwardedProps.structuredOutput`` makes the answer a JSON object
  (provider-native JSON-schema mode when the model supports it, prompted otherwise), checked
  against the schema; the text streams as usual and the parsed object becomes
  ``FinalResult`` (``RUN_FINISHED.result``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import (
    CallDeferred,
    DeferredToolRequests,
    ModelRetry,
    NativeOutput,
    PromptedOutput,
    StructuredDict,
    ToolFailed,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.direct import model_request_stream
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
    VideoUrl,
)
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from iobridge.agents.base import Agent
from iobridge.agents.outputs import (
    FinalResult,
    ReasoningDelta,
    ReasoningEnd,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnd,
)
from iobridge.agents.providers import adapt_settings, map_model_error
from iobridge.errors import AgentError
from iobridge.protocol.options import TOOL_RESULT_MODES, StructuredOutput, ToolResultMode

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from pydantic_ai.tools import RunContext as PydanticRunContext

    from iobridge.agents.context import RunContext
    from iobridge.agents.outputs import AgentOutput
    from iobridge.agents.tools import ServerTool

logger = logging.getLogger(__name__)

#: Generated titles: tokens the model may spend, seconds it may take, characters kept, and
#: characters of the conversation it is shown.
TITLE_MAX_TOKENS = 24
TITLE_TIMEOUT = 10.0
TITLE_LENGTH = 80
TITLE_CONTEXT_CHARS = 2000
_TITLE_INSTRUCTIONS = (
    "Write a short title (at most six words) for the conversation below. Answer with the "
    "title only: no quotes, no final punctuation."
)
#: Arguments are JSON objects; the tool itself (or the frontend) checks them in detail.
_ANY_OBJECT = SchemaValidator(core_schema.dict_schema())
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ModelAgent(Agent):
    """An agent answered by an LLM through pydantic-ai.

    Args:
        id: Stable agent id (``forwardedProps.agentId``).
        aliases: Other ids the agent answers to.
        model: The pydantic-ai model (see ``iobridge.agents.providers.build_model``).
        name: Display name (defaults to ``id``).
        description: For discovery.
        instructions: System instructions for every run.
        tools: Server tools the model may call.
        model_settings: Defaults, overridden per run by ``forwardedProps.modelSettings``.
        model_id: ``provider:model`` for discovery (default: the model's own).
        output_retries: How often an answer that violates ``structuredOutput`` is sent back.
        title_max_tokens: Tokens a generated thread title may use.
        title_timeout: Seconds the title request may take before the fallback title.
        tool_result_mode: ``"in-run"`` or ``"next-run"``: how the runtime should collect
            frontend tool results for this agent (``None``: the server default).
    """

    def __init__(
        self,
        *,
        id: str,
        model: Model,
        aliases: Sequence[str] = (),
        name: str | None = None,
        description: str = "",
        instructions: str = "",
        tools: Sequence[ServerTool] = (),
        model_settings: ModelSettings | None = None,
        model_id: str | None = None,
        output_retries: int = 2,
        tool_result_mode: ToolResultMode | None = None,
        title_max_tokens: int = TITLE_MAX_TOKENS,
        title_timeout: float = TITLE_TIMEOUT,
    ) -> None:
        if tool_result_mode is not None and tool_result_mode not in TOOL_RESULT_MODES:
            raise ValueError(f"tool_result_mode must be one of {TOOL_RESULT_MODES}")
        self.id = id
        self.aliases = tuple(aliases)
        self.name = name or id
        self.description = description
        self.model = model
        self.model_id = model_id or f"{model.system}:{model.model_name}"
        self.title_max_tokens = title_max_tokens
        self.title_timeout = title_timeout
        self.instructions = instructions
        self.tools = tuple(tools)
        self.model_settings = ModelSettings(**(model_settings or {}))
        self.output_retries = output_retries
        self.tool_result_mode = tool_result_mode
        self._server_defs = [
            ToolDefinition(
                name=t.name, description=t.description, parameters_json_schema=t.parameters
            )
            for t in self.tools
        ]

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        """Run the model/tool loop and stream its outputs."""
        options = ctx.options
        history = to_model_messages(ctx.messages)
        instructions = context_instructions(ctx.context)
        if not history and not (self.instructions or instructions):
            raise AgentError("the run has no messages for the model", code="INVALID_REQUEST")
        structured = options.structured_output
        agent = self._pydantic_agent(structured)
        toolset = RunToolset(self._tool_definitions(ctx.frontend_tools), ctx)
        settings = adapt_settings(
            self.model, cast(ModelSettings, {**self.model_settings, **options.model_settings})
        )
        step = 0
        try:
            async with agent.iter(
                None,
                message_history=history,
                toolsets=[toolset],
                instructions=instructions,
                model_settings=settings,
            ) as agent_run:
                async for node in agent_run:
                    if not PydanticAgent.is_model_request_node(node):
                        continue
                    if step:
                        yield StepFinished(name=f"model-request-{step}")
                    step += 1
                    yield StepStarted(name=f"model-request-{step}")
                    async with node.stream(agent_run.ctx) as events:
                        async for event in events:
                            output = _translate(event)
                            if output is not None:
                                yield output
                result = agent_run.result
        except pai_errors.ModelAPIError as exc:
            raise map_model_error(exc) from None
        except pai_errors.UnexpectedModelBehavior as exc:
            # pydantic-ai signals spent output retries only by this message.
            if structured is not None and "output retries" in str(exc):
                raise AgentError(
                    "the model's answer did not match the requested schema",
                    code="STRUCTURED_OUTPUT_INVALID",
                ) from None
            logger.warning("unexpected model behaviour: %s", exc)
            raise AgentError(
                "the model returned an unusable response", code="MODEL_ERROR"
            ) from None
        except pai_errors.UsageLimitExceeded as exc:
            logger.warning("model usage limit: %s", exc)
            raise AgentError("the run exceeded its model usage limit", code="MODEL_ERROR") from None
        if step:
            yield StepFinished(name=f"model-request-{step}")
        output_value = result.output if result is not None else None
        if structured is not None and isinstance(output_value, dict):
            yield FinalResult(value=dict(output_value))

    async def title(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """A title from this agent's own model: one bounded, time-limited request.

        Raises:
            TimeoutError: the request took longer than ``title_timeout``.
            pydantic_ai.exceptions.ModelAPIError: the provider refused.
        """
        conversation = _title_transcript(messages)
        if not conversation:
            return None
        request = ModelRequest(
            parts=[UserPromptPart(content=conversation)], instructions=_TITLE_INSTRUCTIONS
        )
        settings = adapt_settings(
            self.model,
            # Best effort: no retries, the fallback title is good enough.
            ModelSettings(
                max_tokens=self.title_max_tokens, timeout=self.title_timeout, max_retries=0
            ),
        )
        async with asyncio.timeout(self.title_timeout):
            async with model_request_stream(self.model, [request], model_settings=settings) as s:
                async for _ in s:
                    pass
                response = s.get()
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        return _clean_title(text)

    def _pydantic_agent(self, structured: StructuredOutput | None) -> PydanticAgent[None, Any]:
        """A pydantic-ai agent for one run (the output type depends on the run's options)."""
        if structured is None:
            return PydanticAgent(
                self.model, output_type=[str, DeferredToolRequests], instructions=self.instructions
            )
        schema_type = StructuredDict(
            structured.schema, name=structured.name, description=structured.description
        )
        native = self.model.profile.get("supports_json_schema_output", False)
        mode = NativeOutput(schema_type) if native else PromptedOutput(schema_type)
        agent: PydanticAgent[None, Any] = PydanticAgent(
            self.model,
            output_type=[mode, DeferredToolRequests],
            instructions=self.instructions,
            retries={"output": self.output_retries},
        )

        @agent.output_validator
        def _check_schema(output: Any) -> Any:
            if isinstance(output, DeferredToolRequests):
                return output
            problems = structured.errors(output)
            if problems:
                raise ModelRetry(
                    "The answer does not match the required JSON schema:\n" + "\n".join(problems)
                )
            return output

        return agent

    def _tool_definitions(
        self, frontend_tools: Sequence[Mapping[str, Any]]
    ) -> list[ToolDefinition]:
        """Server tools first; a frontend tool with a server tool's name is ignored."""
        defs = list(self._server_defs)
        taken = {d.name for d in defs}
        for decl in frontend_tools:
            name = decl.get("name")
            if not isinstance(name, str) or not name or name in taken:
                logger.info("skipping frontend tool %r (no name, or shadowed)", name)
                continue
            taken.add(name)
            params = decl.get("parameters")
            if not isinstance(params, dict) or params.get("type") != "object":
                params = _EMPTY_OBJECT_SCHEMA
            description = decl.get("description")
            defs.append(
                ToolDefinition(
                    name=name,
                    description=description if isinstance(description, str) else None,
                    parameters_json_schema=params,
                )
            )
        return defs


class RunToolset(AbstractToolset[None]):
    """The run's tools, executed through the run's ``RunContext``.

    The runtime decides where a tool runs, so server and frontend tools look alike here.
    """

    def __init__(self, definitions: Sequence[ToolDefinition], ctx: RunContext) -> None:
        self._ctx = ctx
        self._tools = {
            d.name: ToolsetTool(toolset=self, tool_def=d, max_retries=2, args_validator=_ANY_OBJECT)
            for d in definitions
        }

    @property
    def id(self) -> str:
        """Toolset id (unique among the pydantic-ai agent's toolsets)."""
        return "iobridge"

    async def get_tools(self, ctx: PydanticRunContext[None]) -> dict[str, ToolsetTool[None]]:
        """The same tools at every step of the run."""
        return self._tools

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: PydanticRunContext[None],
        tool: ToolsetTool[None],
    ) -> Any:
        """Call ``name`` through the bridge and return the result text to the model.

        Raises:
            CallDeferred: the client answers in a later run; pydantic-ai then ends the run.
            ToolFailed: the call failed; the model sees the error and may adapt.
        """
        result = await self._ctx.call_tool(name, tool_args, tool_call_id=ctx.tool_call_id)
        if result.deferred:
            raise CallDeferred()
        if result.is_error:
            raise ToolFailed(result.content)
        return result.content


def _translate(event: object) -> AgentOutput | None:
    """One pydantic-ai stream event as an agent output (tool-call parts are announced later)."""
    if isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta):
            return TextDelta(delta=delta.content_delta) if delta.content_delta else None
        if isinstance(delta, ThinkingPartDelta):
            return ReasoningDelta(delta=delta.content_delta) if delta.content_delta else None
        return None
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return TextDelta(delta=part.content)
        if isinstance(part, ThinkingPart) and part.content:
            return ReasoningDelta(delta=part.content)
        return None
    if isinstance(event, PartEndEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return TextEnd()
        if isinstance(part, ThinkingPart) and part.content:
            return ReasoningEnd()
    return None


def context_instructions(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """``RunAgentInput.context`` entries as an instructions paragraph for the model."""
    lines = []
    for entry in entries:
        description = str(entry.get("description", "")).strip()
        value = entry.get("value", "")
        value = value if isinstance(value, str) else str(value)
        lines.append(f"- {description}: {value}" if description else f"- {value}")
    if not lines:
        return None
    return "Context provided by the application:\n" + "\n".join(lines)


# --- AG-UI history -> pydantic-ai messages -------------------------------------------------

_URL_KINDS: dict[str, type[ImageUrl | AudioUrl | VideoUrl | DocumentUrl]] = {
    "image": ImageUrl,
    "audio": AudioUrl,
    "video": VideoUrl,
    "document": DocumentUrl,
}


def _url_kind(mime: str | None) -> str:
    major = (mime or "").partition("/")[0]
    return major if major in ("image", "audio", "video") else "document"


def _file_part(kind: str, source: str, value: Any, mime: Any) -> UserContent | None:
    """A URL or inline-data part, or ``None`` when the model cannot be given it."""
    if not isinstance(value, str) or not value:
        return None
    mime = mime if isinstance(mime, str) and mime else None
    if source == "url":
        return _URL_KINDS[kind](url=value, media_type=mime)
    if source == "data" and mime is not None:
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return BinaryContent(data=data, media_type=mime)
    return None


def _content_item(item: Any) -> UserContent:
    """One AG-UI input content part as pydantic-ai user content (a placeholder if unusable)."""
    if not isinstance(item, Mapping):
        return "[unsupported content]"
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        return text if isinstance(text, str) else ""
    if kind in _URL_KINDS:
        source = item.get("source")
        if isinstance(source, Mapping):
            part = _file_part(kind, source.get("type", ""), source.get("value"),
                              source.get("mimeType"))
            if part is not None:
                return part
        return f"[{kind} attachment not available to the model]"
    if kind == "binary":  # deprecated 0.x form
        mime = item.get("mimeType")
        url_kind = _url_kind(mime if isinstance(mime, str) else None)
        part = _file_part(url_kind, "url", item.get("url"), mime) or _file_part(
            url_kind, "data", item.get("data"), mime
        )
        if part is not None:
            return part
        name = item.get("filename") or item.get("id") or "file"
        return f"[attachment {name} not available to the model]"
    return f"[unsupported content: {kind}]"


def _text_of(content: Any) -> str:
    """Tool or assistant content as text (content-part lists keep their text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, Mapping)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return "" if content is None else str(content)


def _paired_call_ids(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """Ids of the tool calls that have a result message."""
    called = {
        tc.get("id")
        for m in messages
        if m.get("role") == "assistant"
        for tc in (m.get("toolCalls") or [])
        if isinstance(tc, Mapping)
    }
    answered = {m.get("toolCallId") for m in messages if m.get("role") == "tool"}
    return {i for i in called & answered if isinstance(i, str)}


def to_model_messages(messages: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """AG-UI message dicts as pydantic-ai message history (see the module docstring)."""
    paired = _paired_call_ids(messages)
    names: dict[str, str] = {}
    groups: list[tuple[bool, list[Any]]] = []  # (is_response, parts)

    def add(part: ModelRequestPart | ModelResponsePart, response: bool) -> None:
        if groups and groups[-1][0] is response:
            groups[-1][1].append(part)
        else:
            groups.append((response, [part]))

    for msg in messages:
        role = msg.get("role")
        if role == "user":
            content = msg.get("content")
            if isinstance(content, list):
                items = [_content_item(c) for c in content]
                add(UserPromptPart(content=items), False)
            else:
                add(UserPromptPart(content=_text_of(content)), False)
        elif role in ("system", "developer"):
            add(SystemPromptPart(content=_text_of(msg.get("content"))), False)
        elif role == "assistant":
            text = _text_of(msg.get("content"))
            if text:
                add(TextPart(content=text), True)
            for call in msg.get("toolCalls") or []:
                call_id = call.get("id") if isinstance(call, Mapping) else None
                if call_id not in paired:
                    logger.info("dropping tool call %r without a result from history", call_id)
                    continue
                function = call.get("function") or {}
                names[call_id] = str(function.get("name", ""))
                add(ToolCallPart(tool_name=names[call_id], args=function.get("arguments") or "{}",
                                 tool_call_id=call_id), True)
        elif role == "tool":
            call_id = msg.get("toolCallId")
            if call_id not in names:
                logger.info("dropping tool result %r without a call from history", call_id)
                continue
            error = msg.get("error")
            content = _text_of(msg.get("content"))
            if error:
                add(ToolReturnPart(tool_name=names[call_id], content=content or str(error),
                                   tool_call_id=call_id, outcome="failed"), False)
            else:
                add(ToolReturnPart(tool_name=names[call_id], content=content,
                                   tool_call_id=call_id), False)
    return [
        ModelResponse(parts=parts) if is_response else ModelRequest(parts=parts)
        for is_response, parts in groups
    ]


def _title_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """``User: …`` / ``Assistant: …`` lines of the text messages, at most a few KB."""
    lines: list[str] = []
    size = 0
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        text = " ".join(str(content or "").split())
        if not text:
            continue
        line = f"{'User' if role == 'user' else 'Assistant'}: {text}"
        lines.append(line[: TITLE_CONTEXT_CHARS - size])
        size += len(lines[-1])
        if size >= TITLE_CONTEXT_CHARS:
            break
    return "\n".join(lines)


def _clean_title(text: str) -> str | None:
    """The model's answer as a one-line title: printable, unquoted, at most 80 characters."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = "".join(c for c in line if c.isprintable())
    line = " ".join(line.split()).strip("\"'`“”‘’*#").strip()
    line = line.removeprefix("Title:").strip().rstrip(".")
    return line[:TITLE_LENGTH].rstrip() or None
