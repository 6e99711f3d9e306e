"""``AgUiUpstreamAgent``: any AG-UI server as an iobridge agent.

Each run is forwarded to the upstream endpoint as a ``RunAgentInput`` (the thread's
model-visible history, the client's tools, context, state and forwardedProps), and the
upstream's SSE events become agent outputs (:mod:`iobridge.agents.upstream_events`). The
runtime and its guard therefore own ids and lifecycle as for any other agent: RUN_STARTED and
the terminal event are iobridge's, text and reasoning get iobridge's message ids, whatever the
upstream leaves open is closed, and nothing it sends after its RUN_FINISHED is read.

Frontend tools: an upstream in the plain AG-UI style ends its run after TOOL_CALL_END of a
client tool. In in-run mode the client's run stays open: the calls wait for their posted
results (the normal pending path, ``ToolCallHandle.result``), then the upstream gets a
follow-up run with the assistant tool calls and the tool messages appended, and its events
continue the same client stream (with the state of the upstream's last STATE_SNAPSHOT, if
it sent one). In next-run mode the client's run ends with the calls
pending, as for a model agent.

Outcomes: an upstream run that ends with an ``interrupt`` outcome ends the client's run with
the same interrupts (a ``toolCallId`` in the client's ids), stored with the thread like any
agent's; the run that answers them (``resume``) forwards the answers to the upstream with the
thread's history, where the interrupted calls are still open. A ``cancelled`` outcome ends
the client's run cancelled. The upstream's ``usage`` is summed into the run's.

Failures end the run with a RUN_ERROR whose message is fixed and whose code says what
happened; the details (status, upstream message) go to the log only:

- ``UPSTREAM_UNAVAILABLE``: the connection failed or broke.
- ``UPSTREAM_HTTP_ERROR``: a status other than 2xx.
- ``UPSTREAM_TIMEOUT``: one upstream run took longer than ``timeout``.
- ``UPSTREAM_PROTOCOL_ERROR``: not an event stream, a malformed event, an event or line
  over ``max_event_bytes``, or an event nested deeper than the run's ``max_json_depth`` or
  holding an integer beyond 64 bits (``protocol.json_limits``: what the server refuses from
  a client it refuses from an upstream, so every event it takes can be encoded again).
- ``UPSTREAM_TOO_LARGE``: one upstream run sent more than the run's
  ``max_upstream_round_bytes`` of messages (text, arguments, results).
- ``UPSTREAM_RUN_ERROR``: the upstream sent RUN_ERROR.
- ``UPSTREAM_TOO_MANY_ROUNDS``: it asked for frontend tools after ``max_rounds`` follow-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from iobridge.agents.base import Agent
from iobridge.agents.context import Interrupted, Resume
from iobridge.agents.outputs import FinalResult, RawEvent
from iobridge.agents.upstream_events import UpstreamRound
from iobridge.errors import AgentError
from iobridge.protocol.json_limits import DEFAULT_MAX_JSON_DEPTH, JsonLimitError, loads
from iobridge.protocol.options import TOOL_RESULT_MODES, ToolResultMode
from iobridge.protocol.sse import SSEDecoder, SSEError
from iobridge.protocol.text import NUL_ESCAPE
from iobridge.protocol.versions import PROTOCOL_VERSION

if TYPE_CHECKING:
    from iobridge.agents.context import RunContext
    from iobridge.agents.outputs import AgentOutput

__all__ = ["AgUiUpstreamAgent"]

logger = logging.getLogger(__name__)

#: Seconds one upstream run (request to its RUN_FINISHED) may take.
DEFAULT_TIMEOUT = 300.0
#: Most bytes one SSE line, and one event, of the upstream may hold.
DEFAULT_MAX_EVENT_BYTES = 1024 * 1024
#: Most follow-up upstream runs one client run may start (one per frontend-tool round).
DEFAULT_MAX_ROUNDS = 8
#: Longest the reader handles upstream events before it yields to the event loop.
YIELD_SECONDS = 0.005


class AgUiUpstreamAgent(Agent):
    """An agent answered by another AG-UI server (see the module docstring).

    Args:
        url: The upstream's AG-UI endpoint (``POST`` a ``RunAgentInput``, read SSE).
        id: Stable agent id (``forwardedProps.agentId``).
        name: Display name (defaults to ``id``).
        description: For discovery.
        aliases: Other ids the agent answers to.
        headers: Sent with every upstream request (e.g. its credentials).
        timeout: Seconds one upstream run may take, connection included.
        max_event_bytes: Most bytes one SSE line or event of the upstream may hold.
        max_rounds: Most follow-up runs (frontend-tool rounds) per client run.
        tool_result_mode: ``"in-run"`` or ``"next-run"`` (``None``: the request's, then the
            server's default).
        client: An ``httpx.AsyncClient`` to use (proxies, mTLS, pooling); it is never
            closed here. By default each run opens and closes its own (the TLS context,
            built on first use, is kept).
        capabilities: Overrides of the AG-UI ``AgentCapabilities`` the agent declares (what
            the upstream accepts is its own business: the bridge cannot know it).
    """

    agent_type = "ag-ui"

    #: Its runs go on from the transcript: a continued run asks the upstream again with the
    #: messages so far (the results its calls got included), as a follow-up round does.
    durable = True

    def __init__(
        self,
        url: str,
        *,
        id: str,
        name: str | None = None,
        description: str = "",
        aliases: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        tool_result_mode: ToolResultMode | None = None,
        client: httpx.AsyncClient | None = None,
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        if tool_result_mode is not None and tool_result_mode not in TOOL_RESULT_MODES:
            raise ValueError(f"tool_result_mode must be one of {TOOL_RESULT_MODES}")
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        if max_event_bytes < 1 or max_rounds < 0:
            raise ValueError("max_event_bytes must be positive and max_rounds not negative")
        self.url = url
        self.id = id
        self.name = name or id
        self.description = description
        self.aliases = tuple(aliases)
        self.headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            **(headers or {}),
            # Raw bytes only: a compressed stream could inflate far past max_event_bytes
            # inside one read, before the decoder could refuse it.
            "Accept-Encoding": "identity",
        }
        self.timeout = timeout
        self.max_event_bytes = max_event_bytes
        self.max_rounds = max_rounds
        self.tool_result_mode = tool_result_mode
        self.client = client
        self._tls: ssl.SSLContext | None = None
        if capabilities is not None:
            self.set_capabilities(capabilities)

    def own_capabilities(self) -> dict[str, Any]:
        """What the bridge adds to any upstream: the client's tools reach it, and its
        interrupts become the run's (answered through ``resume``). What it accepts as input
        and whether it reasons are the upstream's own: left undeclared."""
        return {
            "tools": {"clientProvided": True},
            "humanInTheLoop": {"interrupts": True},
        }

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        """Forward the run, then drive follow-up runs while frontend tools are answered."""
        messages = [dict(m) for m in ctx.messages if self._sent_back(m)]
        used_ids = _tool_call_ids(ctx.messages)
        run_id, parent, state = ctx.run_id, None, ctx.state
        resume = [_resume_entry(answer) for answer in ctx.resume]
        resumed = _open_calls(messages) if resume else {}
        result: Any = None
        follow_ups = 0
        async with await self._client() as client:
            while True:
                upstream = UpstreamRound(
                    ctx, ctx.limits.max_upstream_round_bytes, used_ids=used_ids,
                    agent_id=self.id, resumed=resumed,
                )
                body = self._input(ctx, run_id, parent, state, messages, resume)
                await self._stream(client, body, upstream)
                resume = []  # answered: a follow-up run is an ordinary one
                if upstream.result is not None:
                    result = upstream.result
                outcome = upstream.outcome
                if outcome is not None and outcome.get("type") == "interrupt":
                    raise Interrupted(*_interrupts(outcome, upstream))
                if outcome is not None:  # cancelled: the client's run ends the same way
                    finished: dict[str, Any] = {"type": "RUN_FINISHED", "outcome": outcome,
                                                "usage": list(ctx.usage)}
                    if result is not None:
                        finished["result"] = result
                    yield RawEvent(event=finished)
                    return
                if not upstream.frontend_calls:
                    break
                answers = await asyncio.gather(
                    *(call.handle.result() for call in upstream.frontend_calls)
                )
                if any(answer.deferred for answer in answers):
                    break  # next-run mode: the client answers in its next run
                if follow_ups >= self.max_rounds:
                    # Checked after the answers: the client's posts are accepted either way.
                    logger.warning("agent %s: more than %d follow-up runs", self.id,
                                   self.max_rounds)
                    raise AgentError(
                        "The upstream agent asked for more tool rounds than allowed.",
                        code="UPSTREAM_TOO_MANY_ROUNDS",
                    )
                messages += upstream.conversation(answers)
                if upstream.has_state:
                    state = upstream.state
                parent, run_id = run_id, uuid.uuid4().hex
                follow_ups += 1
        if result is not None:
            yield FinalResult(value=result)

    async def _client(self) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
        if self.client is not None:
            return contextlib.nullcontext(self.client)
        if self._tls is None:
            # httpx loads the CA bundle for every client it builds: 30-70 ms on the event
            # loop at every run (measured). Built once, in a worker thread.
            self._tls = await asyncio.to_thread(httpx.create_ssl_context)
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), verify=self._tls)

    def _sent_back(self, message: Mapping[str, Any]) -> bool:
        """Whether a history message goes to the upstream: a reasoning message (one with a
        provider's encrypted value) only when this upstream produced it."""
        if message.get("role") != "reasoning":
            return True
        metadata = message.get("metadata")
        producer = metadata.get("iobridge") if isinstance(metadata, Mapping) else None
        return isinstance(producer, Mapping) and producer.get("agent") == self.id

    @staticmethod
    def _input(
        ctx: RunContext, run_id: str, parent: str | None, state: Any,
        messages: list[dict[str, Any]], resume: list[dict[str, Any]],
    ) -> bytes:
        body: dict[str, Any] = {"threadId": ctx.thread_id, "runId": run_id,
                                "protocolVersion": PROTOCOL_VERSION}
        if parent is not None:
            body["parentRunId"] = parent
        body.update(
            state=state if state is not None else {},
            messages=messages,
            tools=ctx.frontend_tools,
            context=ctx.context,
            forwardedProps=ctx.forwarded_props,
        )
        if resume:
            body["resume"] = resume
        return orjson.dumps(body)

    async def _stream(
        self, client: httpx.AsyncClient, body: bytes, upstream: UpstreamRound
    ) -> None:
        """POST one run input and feed the upstream's events until its RUN_FINISHED."""
        try:
            async with asyncio.timeout(self.timeout):
                async with client.stream(
                    "POST", self.url, content=body, headers=self.headers
                ) as response:
                    self._check_response(response)
                    decoder = SSEDecoder(max_event_bytes=self.max_event_bytes)
                    max_depth = upstream.ctx.limits.max_json_depth
                    # A read of data already received does not suspend: an upstream that
                    # sends without pause held the loop for its whole run (0.8 s for 2 MiB
                    # of short deltas, measured), and one read can hold hundreds of events
                    # that each cost a millisecond (a state delta that copies a large
                    # value). So the reader yields once it has worked YIELD_SECONDS.
                    deadline = time.perf_counter() + YIELD_SECONDS
                    async for chunk in response.aiter_raw():
                        for message in decoder.feed(chunk):
                            if message.data:
                                upstream.feed(_parse_event(message.data, max_depth))
                            if upstream.finished:
                                # Anything after the upstream's RUN_FINISHED is not read.
                                upstream.close()
                                return
                            if time.perf_counter() >= deadline:
                                await asyncio.sleep(0)
                                deadline = time.perf_counter() + YIELD_SECONDS
        except (TimeoutError, httpx.TimeoutException):
            logger.warning("agent %s: the upstream run timed out after %s s", self.id,
                           self.timeout)
            raise AgentError(
                "The upstream agent did not answer in time.", code="UPSTREAM_TIMEOUT"
            ) from None
        except httpx.HTTPError as exc:
            logger.warning("agent %s: upstream connection failed: %s", self.id,
                           type(exc).__name__)
            raise AgentError(
                "The upstream agent could not be reached.", code="UPSTREAM_UNAVAILABLE"
            ) from None
        except SSEError as exc:
            logger.warning("agent %s: bad upstream stream: %s", self.id, exc)
            raise AgentError(
                "The upstream agent sent a malformed event.", code="UPSTREAM_PROTOCOL_ERROR"
            ) from None
        # The stream ended without RUN_FINISHED: repaired as if it had finished.
        upstream.close()

    def _check_response(self, response: httpx.Response) -> None:
        if not 200 <= response.status_code < 300:
            logger.warning("agent %s: the upstream answered HTTP %d", self.id,
                           response.status_code)
            raise AgentError(
                f"The upstream agent answered HTTP {response.status_code}.",
                code="UPSTREAM_HTTP_ERROR",
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            logger.warning("agent %s: the upstream sent a %r-encoded stream", self.id,
                           encoding[:40])
            raise AgentError(
                "The upstream agent sent a compressed stream.", code="UPSTREAM_PROTOCOL_ERROR"
            )
        content_type = response.headers.get("content-type", "")
        if not content_type.lower().startswith("text/event-stream"):
            logger.warning("agent %s: the upstream answered %r, not an event stream", self.id,
                           content_type[:100])
            raise AgentError(
                "The upstream agent did not answer with an event stream.",
                code="UPSTREAM_PROTOCOL_ERROR",
            )


def _parse_event(data: str, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> dict[str, Any]:
    """One SSE ``data`` as an event object with a ``type``.

    U+0000 becomes U+FFFD: the thread stores refuse it, and one odd character from a model
    should not cost the whole run. The JSON limits of a client's request apply (depth,
    integers within 64 bits).

    Raises:
        AgentError: not JSON within the limits, not an object, or no string ``type``
            (UPSTREAM_PROTOCOL_ERROR).
    """
    nul = NUL_ESCAPE.decode()
    if nul in data:
        data = data.replace(nul, "\\ufffd")
    try:
        event = loads(data, max_depth=max_depth, where="upstream event")
    except JsonLimitError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        logger.warning("malformed upstream event: %r", data[:200])
        raise AgentError(
            "The upstream agent sent a malformed event.", code="UPSTREAM_PROTOCOL_ERROR"
        )
    return event


def _resume_entry(answer: Resume) -> dict[str, Any]:
    """An answer in its ``RunAgentInput.resume`` wire form."""
    entry: dict[str, Any] = {"interruptId": answer.interrupt_id, "status": answer.status}
    if answer.payload is not None:
        entry["payload"] = answer.payload
    if answer.metadata is not None:
        entry["metadata"] = answer.metadata
    return entry


def _open_calls(messages: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The history's tool calls that have no result yet (those an interrupt left open)."""
    answered = {m.get("toolCallId") for m in messages if m.get("role") == "tool"}
    return {
        call["id"]: call
        for message in messages
        for call in (message.get("toolCalls") or [])
        if isinstance(call, Mapping) and isinstance(call.get("id"), str)
        and call["id"] not in answered
    }


def _interrupts(outcome: Mapping[str, Any], upstream: UpstreamRound) -> list[dict[str, Any]]:
    """The upstream's interrupts for the client's run: each ``toolCallId`` of a call
    announced in this round becomes the client's id of that call.

    Raises:
        AgentError: ``INVALID_INTERRUPT``, no interrupt objects at all.
    """
    interrupts = []
    for interrupt in outcome.get("interrupts") or []:
        if not isinstance(interrupt, dict):
            continue
        interrupt = dict(interrupt)
        call_id = interrupt.get("toolCallId")
        if isinstance(call_id, str):
            interrupt["toolCallId"] = upstream.local_call_id(call_id) or call_id
        interrupts.append(interrupt)
    if not interrupts:
        raise AgentError("The upstream agent interrupted the run without an interrupt.",
                         code="INVALID_INTERRUPT")
    return interrupts


def _tool_call_ids(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """Tool call ids already in the history (an upstream's id that repeats one is replaced)."""
    return {
        call["id"]
        for message in messages
        for call in (message.get("toolCalls") or [])
        if isinstance(call, Mapping) and isinstance(call.get("id"), str)
    }
