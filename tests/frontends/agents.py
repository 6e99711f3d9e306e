"""The agent the frontend tests talk to: the offline demo agent, plus two slow replies.

``tell me a story`` streams a fixed story a word every 30 ms (the page shows it growing);
``count slowly`` counts a number every 100 ms for a minute (long enough to be stopped).
Anything else is the demo agent: an echo, the server tool ``calculate`` for an arithmetic
expression, the frontend tools a message names.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from iobridge.agents.context import RunContext
from iobridge.agents.demo import DemoAgent, message_text
from iobridge.agents.outputs import AgentOutput

STORY = ("Once upon a time a bridge carried every word from the agent to the page, "
         "one by one, and none was lost. The end.")


class FrontAgent(DemoAgent):
    id = "front"
    name = "Frontend test agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        last = ctx.messages[-1] if ctx.messages else {}
        text = message_text(last) if last.get("role") == "user" else ""
        if text.startswith("tell me a story"):
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
