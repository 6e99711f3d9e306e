"""The agent the frontend tests talk to: the offline demo agent, plus two slow replies.

``tell me a story`` streams a fixed story a word every 30 ms (the page shows it growing);
``count slowly`` counts a number every 100 ms for a minute (long enough to be stopped).
A message with an inline image is answered ``I see image/png of N bytes.``.
Anything else is the demo agent: an echo, the server tool ``calculate`` for an arithmetic
expression, the frontend tools a message names.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

from iobridge.agents.context import RunContext
from iobridge.agents.demo import DemoAgent, message_text
from iobridge.agents.outputs import AgentOutput

STORY = ("Once upon a time a bridge carried every word from the agent to the page, "
         "one by one, and none was lost. The end.")


def _images(message: dict[str, Any]) -> list[str]:
    """``image/png of 70 bytes`` for each inline image part of a message."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [f"{p['source']['mimeType']} of {len(base64.b64decode(p['source']['value']))} bytes"
            for p in content
            if isinstance(p, dict) and p.get("type") == "image"
            and p.get("source", {}).get("type") == "data"]


class FrontAgent(DemoAgent):
    id = "front"
    name = "Frontend test agent"

    def own_capabilities(self) -> dict[str, Any]:
        """The demo's, and images in: it says what it was shown."""
        declared = super().own_capabilities()
        declared["multimodal"]["input"]["image"] = True
        return declared

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        last = ctx.messages[-1] if ctx.messages else {}
        text = message_text(last) if last.get("role") == "user" else ""
        images = _images(last) if last.get("role") == "user" else []
        if images:
            yield "I see " + ", ".join(images) + "."
        elif text.startswith("tell me a story"):
            for word in STORY.split(" "):
                yield word + " "
                await asyncio.sleep(0.03)
        elif text.startswith("count slowly"):
            for n in range(1, 601):
                yield f"{n} "
                await asyncio.sleep(0.1)
        else:
            async for output in super().run(ctx):
                yield output
