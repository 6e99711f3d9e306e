"""``PydanticAIAgent``: an existing pydantic-ai ``Agent`` object, run by the bridge as it is.

The wrapped agent keeps its model, instructions, tools, toolsets (MCP servers included),
dependencies, output type and model settings. Per run the adapter adds, through
pydantic-ai's own extension points (``Agent.iter`` arguments and one capability):

- **History.** ``ctx.messages`` become ``message_history`` (see ``iobridge.agents.history``);
  ``RunAgentInput.context`` becomes extra instructions.
- **Tools.** The capability wraps the agent's assembled toolset. The agent's own tools run
  as pydantic-ai runs them, but every call is announced as a *local* tool call
  (TOOL_CALL_START/ARGS/END, then TOOL_CALL_RESULT), so it is stored and replayed like a
  server tool. The bridge's server tools and the client's frontend tools are added; calling
  them goes through ``ctx.call_tool``, so the runtime runs them (server), waits for the
  result route (frontend, in-run) or ends the run cleanly (next-run). A frontend tool named
  like one of the agent's tools is skipped.
- **Tool-call ids.** Every call the client sees and the thread stores gets an id minted by the
  bridge, whatever id the model gave it: small models reuse ``c1`` across turns, and a thread
  holding one id twice pairs calls with the wrong results. The model's own ids stay in
  pydantic-ai's history of the run, so the provider sees the ids it made up.
- **Streaming.** Each model request is a step (``model-request-<n>``). Text and thinking parts
  become ``TextDelta``/``TextEnd`` and ``ReasoningDelta``/``ReasoningEnd``.
- **Options.** ``forwardedProps.modelSettings`` are layered over the agent's own settings;
  ``structuredOutput`` replaces the output type for the run with a JSON object checked
  against the schema (provider-native mode when the model supports it, prompted otherwise).
  A non-text output becomes ``FinalResult`` (``RUN_FINISHED.result``).
- **Usage.** Each model response's token counts are added to ``ctx.usage`` (``RUN_FINISHED``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import (
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    NativeOutput,
    PromptedOutput,
    StructuredDict,
    ToolDenied,
    ToolFailed,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema, to_json, to_jsonable_python

from iobridge.agents.base import Agent
from iobridge.agents.context import ToolResult
from iobridge.agents.history import (
    context_instructions,
    producer_metadata,
    to_model_messages,
    tool_return_content,
)
from iobridge.agents.outputs import (
    FinalResult,
    ReasoningDelta,
    ReasoningEncryptedValue,
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
    from pydantic_ai.tools import RunContext as PydanticRunContext

    from iobridge.agents.context import RunContext
    from iobridge.agents.outputs import AgentOutput
    from iobridge.agents.tools import ServerTool

logger = logging.getLogger(__name__)

#: Arguments are JSON objects; the tool itself (or the frontend) checks them in detail.
_ANY_OBJECT = SchemaValidator(core_schema.dict_schema())
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
#: What a ``tool_approval`` interrupt expects back in ``resume[].payload``.
_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"],
}

#: What ``deps`` may be: the value itself, or a function of the run's context.
DepsFactory = Callable[["RunContext"], Any]


class PydanticAIAgent(Agent):
    """A pydantic-ai ``Agent`` served by the bridge (see the module docstring).

    Args:
        agent: The pydantic-ai agent, used as it is.
        id: Stable agent id (``forwardedProps.agentId``).
        deps: The agent's dependencies for every run.
        deps_factory: Builds the dependencies for each run from the ``RunContext`` (its
            ``resource_id``, ``thread_id``, ...); takes precedence over ``deps``.
        aliases: Other ids the agent answers to.
        name: Display name (default: the agent's name, else ``id``).
        description: For discovery (default: the agent's description).
        tools: Bridge server tools (``@iobridge.tool``) added to the agent's own.
        toolsets: pydantic-ai toolsets added for every run (the ``mcp_servers`` of a TOML
            definition); their tools are the agent's own.
        model_settings: Defaults over the agent's, overridden per run by ``modelSettings``.
        model_id: ``provider:model`` for discovery (default: the agent's model).
        output_retries: How often an answer that violates ``structuredOutput`` is sent back.
        tool_result_mode: ``"in-run"`` or ``"next-run"`` for frontend tool results
            (``None``: the server default).
        capabilities: Overrides of the AG-UI ``AgentCapabilities`` the agent declares.
    """

    agent_type = "pydantic-ai"

    def __init__(
        self,
        agent: PydanticAgent[Any, Any],
        *,
        id: str,
        deps: Any = None,
        deps_factory: DepsFactory | None = None,
        aliases: Sequence[str] = (),
        name: str | None = None,
        description: str | None = None,
        tools: Sequence[ServerTool] = (),
        toolsets: Sequence[AbstractToolset[Any]] = (),
        model_settings: ModelSettings | None = None,
        model_id: str | None = None,
        output_retries: int = 2,
        tool_result_mode: ToolResultMode | None = None,
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(agent, PydanticAgent):
            raise TypeError(f"expected a pydantic_ai.Agent, got {type(agent).__name__}")
        if tool_result_mode is not None and tool_result_mode not in TOOL_RESULT_MODES:
            raise ValueError(f"tool_result_mode must be one of {TOOL_RESULT_MODES}")
        self.agent = agent
        self.id = id
        self.deps = deps
        self.deps_factory = deps_factory
        self.aliases = tuple(aliases)
        self.name = name or agent.name or id
        self.description = description if description is not None else agent.description or ""
        self.tools = tuple(tools)
        self.toolsets = tuple(toolsets)
        self.model_settings = ModelSettings(**(model_settings or {}))
        self.model_id = model_id or _model_id(agent.model)
        self.output_retries = output_retries
        self.tool_result_mode = tool_result_mode
        if capabilities is not None:
            self.set_capabilities(capabilities)

    def describe(self) -> dict[str, Any]:
        """Discovery data; lists the agent's function tools next to the bridge's server tools.

        Tools of other toolsets (MCP servers) are only known once a run lists them.
        """
        data = super().describe()
        for t in self._function_tools():
            data["tools"].append({"name": t.name, "description": t.description or ""})
        return data

    def _function_tools(self) -> list[Any]:
        return [
            t for toolset in self.agent.toolsets if isinstance(toolset, FunctionToolset)
            for t in toolset.tools.values()
        ]

    def own_capabilities(self) -> dict[str, Any]:
        """From the agent and its model: its tools (the bridge's, its own function tools;
        frontend tools when the model takes tools), structured output, reasoning when the
        model thinks, the input media the model's profile accepts, and approvals (as
        interrupts) when one of its tools requires them. MCP tools are only known once a run
        lists them, so ``tools.items`` leaves them out."""
        items = [t.as_declaration() for t in self.tools] + [
            {"name": t.name, "description": t.description or "",
             "parameters": t.function_schema.json_schema}
            for t in self._function_tools()
        ]
        model = self.agent.model
        profile = model.profile if isinstance(model, Model) else None
        takes_tools = profile.get("supports_tools", True) if profile is not None else True
        declared: dict[str, Any] = {
            "tools": {"supported": takes_tools, "items": items, "parallelCalls": takes_tools,
                      "clientProvided": takes_tools},
            "output": {"structuredOutput": True},
        }
        approvals = any(t.requires_approval for t in self._function_tools())
        declared["humanInTheLoop"] = {
            "supported": approvals, "interrupts": approvals, "approvals": approvals,
        }
        if profile is not None:
            thinks = bool(
                profile.get("supports_thinking") or profile.get("thinking_always_enabled")
            )
            declared["reasoning"] = {"supported": thinks, "streaming": thinks}
            declared["multimodal"] = {
                "input": _model_media(profile),
                "output": {"image": False, "audio": False},
            }
        return declared

    def needs_messages(self) -> bool:
        """Whether a run without messages or context has nothing to send to the model.

        A wrapped agent may produce its own prompt (instructions, dynamic system prompts),
        so only subclasses that know better say yes.
        """
        return False

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        """Run the pydantic-ai agent's model/tool loop and stream its outputs."""
        options = ctx.options
        model = self.agent.model
        provider = model.system if isinstance(model, Model) else None
        model_name = model.model_name if isinstance(model, Model) else None
        history = to_model_messages(ctx.messages, provider=provider, model_name=model_name)
        instructions = context_instructions(ctx.context)
        if not history and not instructions and self.needs_messages():
            raise AgentError("the run has no messages for the model", code="INVALID_REQUEST")
        structured = options.structured_output
        bridge = _BridgeCapability(
            run=ctx, added=self._tool_definitions(ctx.frontend_tools), structured=structured
        )
        settings = cast(ModelSettings, {**self.model_settings, **options.model_settings})
        if isinstance(model, Model):
            settings = adapt_settings(model, settings)
        extra: dict[str, Any] = {}
        if structured is not None:
            extra["retries"] = {"output": self.output_retries}
        step = 0
        deferred: DeferredToolResults | None = None
        while True:
            try:
                async with self.agent.iter(
                    None,
                    message_history=history,
                    deferred_tool_results=deferred,
                    instructions=instructions,
                    deps=self.deps_factory(ctx) if self.deps_factory is not None else self.deps,
                    output_type=self._output_type(structured),
                    model_settings=settings or None,
                    toolsets=self.toolsets or None,
                    capabilities=[bridge],
                    **extra,
                ) as agent_run:
                    async for node in agent_run:
                        if PydanticAgent.is_call_tools_node(node):
                            # Before its tools run, so the count is in even if a tool fails.
                            _add_usage(ctx, node.model_response)
                            continue
                        if not PydanticAgent.is_model_request_node(node):
                            continue
                        if step:
                            yield StepFinished(name=f"model-request-{step}")
                        step += 1
                        yield StepStarted(name=f"model-request-{step}")
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                for output in _translate(event, provider, model_name):
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
                raise AgentError(
                    "the run exceeded its model usage limit", code="MODEL_ERROR"
                ) from None
            value = result.output if result is not None else None
            if result is not None and isinstance(value, DeferredToolRequests) and value.approvals:
                # Tools that require approval: one interrupt each; the resumed run gets here
                # again with the answers and continues the same pydantic-ai run with them.
                deferred = DeferredToolResults(
                    approvals={p.tool_call_id: await _approval(ctx, p) for p in value.approvals}
                )
                history = result.all_messages()
                continue
            if step:
                yield StepFinished(name=f"model-request-{step}")
            if value is not None and not isinstance(value, str | DeferredToolRequests):
                yield FinalResult(value=to_jsonable_python(value))
            return

    def _output_type(self, structured: StructuredOutput | None) -> Any:
        """The agent's output type plus deferred calls, or the run's requested JSON schema."""
        if structured is None:
            spec = self.agent.output_type
            kinds = list(spec) if isinstance(spec, Sequence) else [spec]
            return kinds if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]
        schema_type = StructuredDict(
            structured.schema, name=structured.name, description=structured.description
        )
        model = self.agent.model
        native = isinstance(model, Model) and model.profile.get(
            "supports_json_schema_output", False
        )
        mode = NativeOutput(schema_type) if native else PromptedOutput(schema_type)
        return [mode, DeferredToolRequests]

    def _tool_definitions(
        self, frontend_tools: Sequence[Mapping[str, Any]]
    ) -> list[ToolDefinition]:
        """Server tools first; a frontend tool with a server tool's name is ignored."""
        # From ``tools`` at each run: the catalog adds subagent tools after construction.
        defs = [
            ToolDefinition(
                name=t.name, description=t.description, parameters_json_schema=t.parameters
            )
            for t in self.tools
        ]
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


def _model_media(profile: Mapping[str, Any]) -> dict[str, bool]:
    """``multimodal.input`` from a model profile (pydantic-ai's file-input flags, already
    narrowed to what the provider adapter can send)."""
    documents = profile.get("supports_document_input", True)
    types = profile.get("supported_document_media_types")
    return {
        "image": profile.get("supports_image_input", True),
        "audio": profile.get("supports_audio_file_input", True),
        "video": profile.get("supports_video_input", True),
        "pdf": documents and (types is None or "application/pdf" in types),
        "file": documents,
    }


def _model_id(model: object) -> str | None:
    if isinstance(model, Model):
        return f"{model.system}:{model.model_name}"
    return model if isinstance(model, str) else None


@dataclass(kw_only=True)
class _BridgeCapability(AbstractCapability[Any]):
    """Per run: wraps the agent's toolset and checks a requested output schema."""

    run: RunContext
    added: Sequence[ToolDefinition] = field(default_factory=list)
    structured: StructuredOutput | None = None

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return BridgeToolset(toolset, run=self.run, added=self.added)

    async def after_output_validate(
        self, ctx: PydanticRunContext[Any], *, output_context: Any, output: Any
    ) -> Any:
        structured = self.structured
        if structured is None or ctx.partial_output or not isinstance(output, dict):
            return output
        problems = structured.errors(output)
        if problems:
            raise ModelRetry(
                "The answer does not match the required JSON schema:\n" + "\n".join(problems)
            )
        return output


@dataclass
class BridgeToolset(WrapperToolset[Any]):
    """The agent's own tools, announced to the client, plus the run's bridge tools.

    Tools in ``added`` (bridge server tools, frontend tools) are executed through
    ``run.call_tool``: the runtime decides where they run.
    """

    run: RunContext = field(kw_only=True)
    added: Sequence[ToolDefinition] = field(kw_only=True, default=())

    async def get_tools(self, ctx: PydanticRunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = dict(await self.wrapped.get_tools(ctx))
        for definition in self.added:
            if definition.name in tools:
                logger.info("skipping tool %r: the agent has its own", definition.name)
                continue
            tools[definition.name] = ToolsetTool(
                toolset=self, tool_def=definition, max_retries=2, args_validator=_ANY_OBJECT
            )
        return tools

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: PydanticRunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        """Run the call and report it to the client.

        Raises:
            CallDeferred: a frontend call answered in a later run; pydantic-ai ends the run.
            ToolFailed: a bridge tool failed, or an agent tool deferred its call (which no
                later run could answer); the model sees the error.
        """
        if tool.toolset is self:
            result = await self.run.call_tool(name, tool_args)
            if result.deferred:
                raise CallDeferred()
            if result.is_error:
                raise ToolFailed(result.content)
            if result.parts:
                # Media the frontend returned go to the model as its own content.
                return tool_return_content(result.parts, getattr(ctx.model, "system", None))
            return result.content
        handle = self.run.start_tool_call(name, local=True)
        handle.add_args(to_json(tool_args, fallback=str).decode())
        handle.end()  # the client sees the call while it runs
        try:
            value = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except ModelRetry as exc:
            handle.complete(ToolResult(content=exc.message, is_error=True))
            raise
        except (ToolFailed, pai_errors.ToolRetryError, pai_errors.ToolFailedError) as exc:
            handle.complete(ToolResult(content=str(exc) or f"tool {name!r} failed", is_error=True))
            raise
        except ApprovalRequired:
            # Ask through an interrupt; the resumed run calls the tool again and gets here
            # with the answer (the n-th interrupt of the run).
            answer = await self.run.interrupt(
                "tool_approval",
                message=f"Allow the tool {name!r}?",
                tool_call_id=handle.tool_call_id,
                response_schema=_APPROVAL_SCHEMA,
                metadata={"toolName": name, "args": to_jsonable_python(tool_args, fallback=str)},
            )
            payload = answer.payload if isinstance(answer.payload, Mapping) else {}
            if answer.cancelled or payload.get("approved") is not True:
                message = f"the user did not allow the tool {name!r}"
                handle.complete(ToolResult(content=message, is_error=True))
                raise ToolFailed(message) from None
            return await self._approved(name, tool_args, ctx, tool, handle)
        except CallDeferred:
            message = f"tool {name!r} deferred its call, which this server cannot resume"
            handle.complete(ToolResult(content=message, is_error=True))
            raise ToolFailed(message) from None
        except Exception:
            handle.complete(ToolResult(content=f"tool {name!r} failed", is_error=True))
            raise
        text = ToolReturnPart(tool_name=name, content=value).model_response_str()
        handle.complete(ToolResult(content=text, value=value))
        return value

    async def _approved(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: PydanticRunContext[Any],
        tool: ToolsetTool[Any],
        handle: Any,
    ) -> Any:
        """Run a call the user approved (``ctx.tool_call_approved``) and report it."""
        try:
            value = await self.wrapped.call_tool(
                name, tool_args, replace(ctx, tool_call_approved=True), tool
            )
        except Exception:
            handle.complete(ToolResult(content=f"tool {name!r} failed", is_error=True))
            raise
        text = ToolReturnPart(tool_name=name, content=value).model_response_str()
        handle.complete(ToolResult(content=text, value=value))
        return value


async def _approval(ctx: RunContext, call: ToolCallPart) -> bool | ToolDenied:
    """Ask whether ``call`` may run (a ``tool_approval`` interrupt) and return the answer."""
    answer = await ctx.interrupt(
        "tool_approval",
        message=f"Allow the tool {call.tool_name!r}?",
        tool_call_id=call.tool_call_id,
        response_schema=_APPROVAL_SCHEMA,
        metadata={"toolName": call.tool_name, "args": to_jsonable_python(call.args_as_dict())},
    )
    payload = answer.payload if isinstance(answer.payload, Mapping) else {}
    if answer.cancelled or payload.get("approved") is not True:
        # pydantic-ai never runs a denied call: report it here, as the wrapper would.
        message = f"the user did not allow the tool {call.tool_name!r}"
        handle = ctx.start_tool_call(call.tool_name, local=True)
        handle.add_args(to_json(call.args_as_dict(), fallback=str).decode())
        handle.complete(ToolResult(content=message, is_error=True))
        return ToolDenied(message)
    return True


def _add_usage(ctx: RunContext, response: ModelResponse) -> None:
    """One model response's token counts as AG-UI ``TokenUsage`` (zeros: not reported)."""
    usage = response.usage
    counts = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
        "reasoningTokens": usage.output_reasoning_tokens,
        "cachedInputTokens": usage.cache_read_tokens,
        "cacheWriteInputTokens": usage.cache_write_tokens,
    }
    if not counts["totalTokens"]:
        return
    ctx.add_usage(
        response.provider_name, response.model_name, {k: v for k, v in counts.items() if v}
    )


def _translate(
    event: object, provider: str | None, model_name: str | None
) -> tuple[AgentOutput, ...]:
    """One pydantic-ai stream event as agent outputs (tool-call parts are announced later).

    A thinking part's signature (Anthropic's ``signature``, OpenAI's encrypted reasoning,
    Gemini's thought signature) is kept as REASONING_ENCRYPTED_VALUE, with what the next
    turn needs to give it back to this model (``metadata.iobridge``).
    """
    if isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta) and delta.content_delta:
            return (TextDelta(delta=delta.content_delta),)
        if isinstance(delta, ThinkingPartDelta) and delta.content_delta:
            return (ReasoningDelta(delta=delta.content_delta),)
        return ()
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return (TextDelta(delta=part.content),)
        if isinstance(part, ThinkingPart) and part.content:
            return (ReasoningDelta(delta=part.content),)
        return ()
    if isinstance(event, PartEndEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return (TextEnd(),)
        if isinstance(part, ThinkingPart) and part.signature:
            metadata = producer_metadata(
                provider=part.provider_name or provider, model=model_name, id=part.id,
                details=part.provider_details,
            )
            return (ReasoningEncryptedValue(value=part.signature, metadata=metadata),
                    ReasoningEnd())
        if isinstance(part, ThinkingPart) and part.content:
            return (ReasoningEnd(),)
    return ()
