"""A subagent invocation inside a run: ``SubagentEvents`` and ``run_subagent``.

The subagent is a catalog agent run with its own ``RunContext`` (the given messages, no
frontend tools, no shared state) and its own ``AgentSession`` over ``SubagentEvents``: the
run's guard, log and transcript, with every event the subagent produces attributed to the
invocation (``subagentRunId``) and the run-scoped ones kept out (its RUN_STARTED, its
MESSAGES_SNAPSHOT and state, which are the run's). The invocation streams as
SUBAGENT_STARTED … SUBAGENT_FINISHED, or SUBAGENT_ERROR when the subagent fails or asks for
something (an interrupt): either way the caller gets a tool result (the answer, or the
failure) and the run goes on. Usage is summed into the run's. Nesting is bounded by
``RunLimits.max_subagent_depth``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from iobridge.agents import outputs as out
from iobridge.agents.context import Interrupted, RunContext
from iobridge.agents.tools import result_content
from iobridge.errors import AgentError, IobridgeError
from iobridge.protocol import events as ev
from iobridge.protocol.events import Event
from iobridge.protocol.guard import SUBAGENT_ERROR, SUBAGENT_FINISHED, SUBAGENT_STARTED
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.run_events import RunEnded, RunEvents

if TYPE_CHECKING:
    from iobridge.agents.base import Agent
    from iobridge.runtime.agent_session import AgentSession

__all__ = ["SUBAGENT_TOO_DEEP", "SubagentEvents", "run_subagent"]

logger = logging.getLogger("iobridge.runtime")

#: Code of the failed result of a subagent call nested deeper than ``max_subagent_depth``.
SUBAGENT_TOO_DEEP = "SUBAGENT_TOO_DEEP"
#: Code of the SUBAGENT_ERROR of a subagent that interrupted (nothing could resume it).
SUBAGENT_INTERRUPTED = "SUBAGENT_INTERRUPTED"
#: Events that belong to the run, not to one of its subagents: left out.
_NOT_A_SUBAGENTS = frozenset({ev.RUN_STARTED, ev.MESSAGES_SNAPSHOT, ev.STATE_SNAPSHOT,
                              ev.STATE_DELTA})


class _Finished(Exception):
    """The subagent emitted its own RUN_FINISHED (an upstream's cancelled outcome)."""


class SubagentEvents(RunEvents):
    """The event side of one subagent invocation: the run's guard, log and transcript.

    Only the translation of outputs into events (the open text message, the current
    assistant message, reasoning) is the invocation's own.
    """

    def __init__(self, run: RunEvents, subagent_run_id: str) -> None:
        # The run's parts, shared rather than built: RunEvents.__init__ would make new ones.
        self._run = run
        self.log = run.log
        self.pre_1_0 = run.pre_1_0
        self.new_id = run.new_id
        self.guard = run.guard
        self.transcript = run.transcript
        self.usage = run.usage
        self.result = None
        self.deferred_calls = []
        self._reset_translation()
        self.subagent_run_id = subagent_run_id
        #: The text of the subagent's last assistant message (its answer).
        self.answer: list[str] = []

    def emit(self, output: out.AgentOutput) -> None:
        # Plain strings take the general path, so every event is attributed in ``push``.
        super().emit(out.TextDelta(delta=output) if isinstance(output, str) else output)

    def push(self, event: Event) -> None:
        kind = event.get("type")
        if kind in _NOT_A_SUBAGENTS:
            return
        if kind == ev.RUN_ERROR:
            message, code = event.get("message"), event.get("code")
            raise AgentError(message if isinstance(message, str) else "The subagent failed.",
                             code=code if isinstance(code, str) else "AGENT_ERROR")
        if kind == ev.RUN_FINISHED:
            if "result" in event:
                self.result = event["result"]
            raise _Finished()
        if kind == SUBAGENT_STARTED:
            # A subagent of the subagent (an upstream's): nested under this invocation.
            event = {**event, "parentSubagentRunId": event.get("parentSubagentRunId")
                     or self.subagent_run_id}
        elif kind not in (SUBAGENT_FINISHED, SUBAGENT_ERROR):
            event = {**event, "subagentRunId": self.subagent_run_id}
        released = self.guard.feed(event)
        for item in released:
            if item.get("subagentRunId") != self.subagent_run_id:
                continue
            if item["type"] == ev.TEXT_MESSAGE_START:
                self.answer = []
            elif item["type"] == ev.TEXT_MESSAGE_CONTENT:
                self.answer.append(item["delta"])
        self._append(released)

    def _append(self, events: list[Event]) -> None:
        # The run's: a terminal event the guard ends the run with here (a bound the
        # subagent broke) is the run's terminal event.
        self._run._append(events)


def _started(agent: Agent, subagent_run_id: str, parent: str | None,
             tool_call_id: str | None) -> Event:
    event: Event = {"type": SUBAGENT_STARTED, "subagentRunId": subagent_run_id,
                    "name": agent.id}
    if agent.description:
        event["description"] = agent.description
    if parent is not None:
        event["parentSubagentRunId"] = parent
    if tool_call_id is not None:
        event["parentToolCallId"] = tool_call_id
    return event


def _failed(message: str, code: str) -> ToolResult:
    return ToolResult(content=result_content({"error": message, "code": code}), is_error=True)


async def run_subagent(
    session: AgentSession,
    agent_id: str,
    messages: Sequence[dict[str, Any]],
    *,
    parent_tool_call_id: str | None = None,
    make_session: Callable[[SubagentEvents, Agent], AgentSession],
) -> ToolResult:
    """Run the catalog agent ``agent_id`` on ``messages`` inside ``session``'s run.

    Returns its answer (its last assistant text, or its result as JSON) as a tool result;
    a subagent that fails, interrupts, is unknown or nested too deep gives a failed one.

    Raises:
        RunEnded: the run itself ended meanwhile (a bound of the run, a cancel).
    """
    lineage = session.lineage
    limits = lineage.limits
    if session.depth >= limits.max_subagent_depth:
        return _failed(f"subagents nest at most {limits.max_subagent_depth} levels deep",
                       SUBAGENT_TOO_DEEP)
    try:
        agent = session.find_agent(agent_id)
    except IobridgeError as exc:
        return _failed(exc.message, exc.code)
    run_events = session.events
    if run_events.guard.ended:
        raise RunEnded()
    invocation = run_events.new_id()
    events = SubagentEvents(run_events, invocation)
    run_events.push(_started(agent, invocation, session.subagent_run_id, parent_tool_call_id))
    child = make_session(events, agent)
    context = RunContext(
        thread_id=lineage.thread_id, run_id=invocation, messages=[dict(m) for m in messages],
        resource_id=lineage.resource_id, session=child, usage=lineage.usage, limits=limits,
    )
    outcome = await _drive(agent, context, events)
    if run_events.guard.ended:
        raise RunEnded()
    if outcome is not None:
        message, code = outcome
        run_events.push({"type": SUBAGENT_ERROR, "subagentRunId": invocation,
                         "message": message, "code": code})
        return _failed(message, code)
    finished: Event = {"type": SUBAGENT_FINISHED, "subagentRunId": invocation,
                       "outcome": {"type": "success"}}
    if events.result is not None:
        finished["result"] = events.result
    run_events.push(finished)
    if events.result is not None:
        return ToolResult(content=result_content(events.result), value=events.result)
    return ToolResult(content="".join(events.answer))


async def _drive(agent: Agent, ctx: RunContext, events: SubagentEvents) -> tuple[str, str] | None:
    """Run ``agent`` into ``events``; ``None`` when it finished, else (message, code)."""
    agen = agent.run(ctx)
    try:
        async for output in agen:
            events.emit(output)
        events.close_open()
    except _Finished:
        events.close_open()
    except RunEnded:
        raise
    except Interrupted:
        return ("The subagent asked for input, which a subagent cannot get.",
                SUBAGENT_INTERRUPTED)
    except AgentError as exc:
        return exc.message, exc.code
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("subagent %s failed in run %s", agent.id, ctx.run_id)
        return "The subagent failed unexpectedly.", "AGENT_ERROR"
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()
    return None
