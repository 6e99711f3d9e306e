"""The TOML ``model = ...`` agent: a model name and bridge tools, as a ``PydanticAIAgent``.

``ModelAgent`` builds a plain pydantic-ai ``Agent`` around the model and its instructions and
runs it through the same adapter as any wrapped agent (``iobridge.agents.pydantic_agent``):
one model/tool loop in the code base. It adds what only a bare model needs: a refusal of runs
with nothing to send, and generated thread titles from the same model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.direct import model_request_stream
from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart
from pydantic_ai.settings import ModelSettings

from iobridge.agents.providers import adapt_settings
from iobridge.agents.pydantic_agent import PydanticAIAgent

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from iobridge.agents.tools import ServerTool
    from iobridge.protocol.options import ToolResultMode

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


class ModelAgent(PydanticAIAgent):
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
        toolsets: pydantic-ai toolsets (the MCP servers of ``mcp_servers``).
        capabilities: Overrides of the AG-UI ``AgentCapabilities`` the agent declares.
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
        toolsets: Sequence[Any] = (),
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            PydanticAgent(model, instructions=instructions or None),
            id=id,
            aliases=aliases,
            name=name or id,
            description=description,
            tools=tools,
            toolsets=toolsets,
            model_settings=model_settings,
            model_id=model_id,
            output_retries=output_retries,
            tool_result_mode=tool_result_mode,
            capabilities=capabilities,
        )
        self.model = model
        self.instructions = instructions
        self.title_max_tokens = title_max_tokens
        self.title_timeout = title_timeout

    def own_capabilities(self) -> dict[str, Any]:
        """A bare model delegates to nothing but the subagents it is given."""
        return {**super().own_capabilities(), "multiAgent": {"supported": False}}

    def needs_messages(self) -> bool:
        """A bare model with no instructions has nothing to answer without messages."""
        return not self.instructions

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
