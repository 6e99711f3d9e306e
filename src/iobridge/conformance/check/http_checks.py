"""Grade an io-bridge backend over HTTP, level by level (io-agent-protocol "Conformance Levels").

Everything goes over the wire with httpx: the grader knows the protocol text, nothing of the
server. Where the spec gives no portable way to make an agent call a tool, the grader uses
the conventions of ``docs/check.md``: it declares a frontend tool ``iobridge_check_echo`` and
names it in the user message with its arguments as JSON (iobridge's demo agent, or any LLM
agent, then calls it), and asks for the time for a server tool. A check the backend gave no
opportunity to grade is *skipped*, with the reason, never passed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from iobridge.conformance.check.agui10 import AgUi10Checks
from iobridge.conformance.check.conventions import (
    ECHO_TOOL,
    SERVER_TOOL_PROMPT,
    echo_prompt,
    echo_tool,
)
from iobridge.conformance.check.conversation import ConversationChecks
from iobridge.conformance.check.report import Failed, Outcome, Report, Result
from iobridge.conformance.check.stream import (
    GUARANTEES,
    SPEC_GUARANTEES,
    TERMINALS,
    Capture,
    SseDecoder,
    Violation,
    framing_violation,
    lifecycle_violations,
    null_violation,
)
from iobridge.conformance.check.threads import ThreadChecks, describe

__all__ = ["HttpTarget", "check_http"]

#: Largest stream (octets) or error body the grader reads from one request.
MAX_STREAM_BYTES = 8 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024

SPEC_STREAM = "io-agent-protocol: Streaming Contract"
SPEC_FRONTEND = "io-agent-protocol: Tool Execution Model, Frontend tools"
SPEC_SERVER = "io-agent-protocol: Tool Execution Model, Server-side tools"
SPEC_ROUTES = "io-agent-protocol: Default Route Surface"

#: The result-POST rules graded during the frontend round trip (skipped without one).
RESULT_RULES = {
    "L2.result-unknown-call": "a result for an unknown toolCallId is a 4xx",
    "L2.result-duplicate": "a second result for the same call is a 4xx",
}

Handler = Callable[[dict[str, Any], Capture], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """What to grade and how to reach it."""

    url: str
    prefix: str = "/io-bridge"
    agent: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    level: int = 4
    timeout: float = 30.0
    server_tool_prompt: str = SERVER_TOOL_PROMPT
    resources: tuple[str, str] = ("iobridge-check-a", "iobridge-check-b")

    @property
    def base(self) -> str:
        base, path = self.url.rstrip("/"), self.prefix.strip("/")
        prefix = f"/{path}" if path else ""
        return base if not prefix or base.endswith(prefix) else base + prefix


def _items(body: Any, key: str) -> list[Any] | None:
    """A list answer, bare or under ``key`` (``{"threads": [...]}``)."""
    value = body.get(key) if isinstance(body, dict) else body
    return value if isinstance(value, list) else None


class HttpCheck:
    def __init__(self, target: HttpTarget, client: httpx.AsyncClient) -> None:
        self.target, self.client = target, client
        self.report = Report(target.base)
        self.captures: list[Capture] = []
        self.nonce = uuid.uuid4().hex[:12]
        self.resource_a, self.resource_b = target.resources
        #: (threadId, toolCallId) of a completed tool round trip, for the L3 replay check.
        self.tool_thread: tuple[str, str] | None = None
        self.agui10 = AgUi10Checks(self)

    # --- plumbing -------------------------------------------------------------------------

    def add(self, rule: str, spec: str, title: str, outcome: Outcome, detail: str = "",
            event: Any = None) -> None:
        level = rule.split(".", 1)[0]
        self.report.add(Result(rule, level, spec, title, outcome, detail, event))

    def ids(self, kind: str) -> str:
        return f"check-{self.nonce}-{kind}-{uuid.uuid4().hex[:6]}"

    def body(self, thread_id: str, messages: list[dict[str, Any]], *,
             tools: list[dict[str, Any]] | None = None, resource: str | None = None
             ) -> dict[str, Any]:
        props: dict[str, Any] = {"resourceId": resource or self.resource_a}
        if self.target.agent:
            props["agentId"] = self.target.agent
        return {
            "threadId": thread_id,
            "runId": self.ids("run"),
            "messages": messages,
            "tools": tools or [],
            "context": [],
            "state": {},
            "forwardedProps": props,
        }

    def user(self, text: str) -> dict[str, Any]:
        return {"id": self.ids("msg"), "role": "user", "content": text}

    async def stream(self, label: str, body: Any, on_event: Handler | None = None,
                     *, content: bytes | None = None) -> Capture:
        """POST /run and read the whole answer (bounded in size and time)."""
        capture = Capture(label)
        decoder = SseDecoder(capture)
        kwargs: dict[str, Any] = (
            {"content": content, "headers": {"content-type": "application/json"}}
            if content is not None else {"json": body}
        )
        try:
            async with asyncio.timeout(self.target.timeout):
                async with self.client.stream("POST", "/run", **kwargs) as response:
                    capture.status = response.status_code
                    capture.content_type = response.headers.get("content-type", "")
                    streaming = capture.content_type.startswith("text/event-stream")
                    limit = MAX_STREAM_BYTES if streaming else MAX_ERROR_BYTES
                    async for chunk in response.aiter_bytes():
                        capture.raw += chunk
                        if len(capture.raw) > limit:
                            capture.cut = f"the answer exceeded {limit} octets"
                            break
                        if streaming:
                            for event in decoder.feed(chunk):
                                if on_event is not None:
                                    await on_event(event, capture)
        except TimeoutError:
            capture.cut = f"no end of stream within {self.target.timeout:g} s"
        except httpx.HTTPError as exc:
            capture.cut = f"{type(exc).__name__}: {exc}"
        if capture.content_type.startswith("text/event-stream"):
            self.captures.append(capture)
        return capture

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise Failed(f"{method} {path}: {type(exc).__name__}: {exc}") from None

    def streamed(self, capture: Capture) -> bool:
        return capture.status == 200 and capture.content_type.startswith("text/event-stream")

    def finished(self, capture: Capture) -> bool:
        """The run streamed and its (first) terminal event is RUN_FINISHED."""
        terminal = next((t for t in capture.types() if t in TERMINALS), None)
        return self.streamed(capture) and terminal == "RUN_FINISHED"

    # --- Level 1 ---------------------------------------------------------------------------

    async def level1(self) -> None:
        thread = self.ids("thread")
        body = self.body(thread, [self.user("Hello from iobridge check.")])
        body["forwardedProps"]["iobridgeCheckUnknownKey"] = {"tolerated": True}
        capture = await self.stream("L1 text run", body)
        title = "POST /run answers 200 text/event-stream"
        if not self.streamed(capture):
            self.add("L1.run-streams", SPEC_STREAM, title, Outcome.FAILED,
                     f"answered {capture.status} {capture.content_type or '(no type)'} "
                     f"{capture.cut}".strip(), capture.raw[:500].decode("utf-8", "replace"))
        else:
            self.add("L1.run-streams", SPEC_STREAM, title, Outcome.PASSED)
            started = next((e for e in capture.events if e.get("type") == "RUN_STARTED"), None)
            echo = "RUN_STARTED echoes the request's threadId and runId"
            if started is None:
                self.add("L1.run-started-ids", SPEC_STREAM, echo, Outcome.FAILED,
                         "no RUN_STARTED in the stream")
            elif (started.get("threadId"), started.get("runId")) != (thread, body["runId"]):
                self.add("L1.run-started-ids", SPEC_STREAM, echo, Outcome.FAILED,
                         f"expected threadId={thread} runId={body['runId']}", started)
            else:
                self.add("L1.run-started-ids", SPEC_STREAM, echo, Outcome.PASSED)
        await self.errors_before_stream()
        await self.agui10.versions()

    async def errors_before_stream(self) -> None:
        title = "a refused run is a JSON 4xx before any stream"
        bad: list[tuple[str, Any, bytes | None]] = [
            ("malformed JSON", None, b'{"threadId": '),
            ("runId and messages missing", {"threadId": self.ids("thread")}, None),
        ]
        for what, body, content in bad:
            capture = await self.stream(f"L1 {what}", body, content=content)
            media = capture.content_type.split(";")[0].strip()
            event = {"request": f"POST /run ({what})", "status": capture.status,
                     "contentType": capture.content_type,
                     "body": capture.raw[:500].decode("utf-8", "replace")}
            try:
                json.loads(capture.raw)
                is_json = media.endswith("json")
            except ValueError:
                is_json = False
            if not 400 <= capture.status < 500 or not is_json:
                self.add("L1.errors-before-stream", SPEC_STREAM, title, Outcome.FAILED,
                         f"{what}: expected a 4xx JSON answer", event)
                return
        self.add("L1.errors-before-stream", SPEC_STREAM, title, Outcome.PASSED)

    def grade_streams(self) -> None:
        """The stream rules, over every stream read at any level."""
        read = [c for c in self.captures if self.streamed(c)]
        count = f"{len(read)} stream(s) read"

        def first(find: Callable[[Capture], Violation | None]) -> tuple[str, Any]:
            for capture in read:
                found = find(capture)
                if found is not None:
                    return (f"{capture.label}: event {found.index}: {found.detail}",
                            found.event)
            return "", None

        rules: list[tuple[str, str, str, Callable[[Capture], Violation | None]]] = [
            ("L1.lf-framing", f"{SPEC_STREAM} (SSE; AG-UI clients split frames on LF LF)",
             "events are framed with LF only", lambda c: framing_violation(c.raw)),
            ("L1.no-null-fields", f"{SPEC_STREAM} (AG-UI event schemas: optional fields are "
             "omitted)", "optional fields are omitted, never null",
             lambda c: null_violation(c.events)),
            ("L1.data-json", f"{SPEC_STREAM} (the SSE event model)",
             "each data field is one JSON event object",
             lambda c: Violation("L1.data-json", f"not a JSON object: {c.undecodable[0][1][:200]}",
                                 c.undecodable[0][0], c.undecodable[0][1])
             if c.undecodable else None),
            ("L1.stream-complete", f"{SPEC_STREAM} (one request, one stream, one terminal "
             "event)", "the stream ends on its own, within bounds",
             lambda c: Violation("L1.stream-complete", c.cut, len(c.events), None)
             if c.cut else None),
        ]
        for rule, spec, title, find in rules:
            detail, event = first(find)
            self.verdict(rule, spec, title, detail, event, read, count)
        graded = [lifecycle_violations(c.events) for c in read]
        for rule, text in GUARANTEES:
            detail, event = "", None
            for capture, found in zip(read, graded, strict=True):
                if rule in found:
                    v = found[rule]
                    detail, event = f"{capture.label}: event {v.index}: {v.detail}", v.event
                    break
            self.verdict(rule, SPEC_GUARANTEES, text, detail, event, read, count)

    def verdict(self, rule: str, spec: str, title: str, detail: str, event: Any,
                read: list[Capture], count: str) -> None:
        if not read:
            self.add(rule, spec, title, Outcome.SKIPPED, "no stream was read")
        elif detail:
            self.add(rule, spec, title, Outcome.FAILED, detail, event)
        else:
            self.add(rule, spec, title, Outcome.PASSED, count)

    # --- Level 2 ---------------------------------------------------------------------------

    async def level2(self) -> None:
        await self.server_tool()
        await self.frontend_tool()
        await self.unknown_run_result()

    async def server_tool(self) -> None:
        title = "a server tool's call is answered by TOOL_CALL_RESULT in the stream"
        thread = self.ids("thread")
        capture = await self.stream(
            "L2 server tool run", self.body(thread, [self.user(self.target.server_tool_prompt)])
        )
        if not self.streamed(capture):
            self.add("L2.server-tool", SPEC_SERVER, title, Outcome.FAILED,
                     f"the run answered {capture.status}")
            return
        starts = [e for e in capture.events if e.get("type") == "TOOL_CALL_START"]
        if not starts:
            self.add("L2.server-tool", SPEC_SERVER, title, Outcome.SKIPPED,
                     f"the agent called no tool for {self.target.server_tool_prompt!r}: choose an "
                     "agent with a server tool (--agent) or a prompt (--server-tool-prompt)")
            return
        start = starts[0]
        call = start.get("toolCallId")
        results = [i for i, e in enumerate(capture.events)
                   if e.get("type") == "TOOL_CALL_RESULT" and e.get("toolCallId") == call]
        ends = [i for i, e in enumerate(capture.events)
                if e.get("type") == "TOOL_CALL_END" and e.get("toolCallId") == call]
        terminal = next((i for i, e in enumerate(capture.events) if e.get("type") in TERMINALS),
                        len(capture.events))
        if not results or results[0] > terminal:
            last = capture.events[terminal] if terminal < len(capture.events) else start
            self.add("L2.server-tool", SPEC_SERVER, title, Outcome.FAILED,
                     f"no TOOL_CALL_RESULT for server call {call} "
                     f"({start.get('toolCallName')}) before the terminal event", last)
        elif not ends or results[0] < ends[0]:
            self.add("L2.server-tool", SPEC_SERVER, title, Outcome.FAILED,
                     f"TOOL_CALL_RESULT for {call} before its TOOL_CALL_END",
                     capture.events[results[0]])
        else:
            self.add("L2.server-tool", SPEC_SERVER, title, Outcome.PASSED,
                     f"{start.get('toolCallName')} answered at event {results[0]}")
            self.tool_thread = self.tool_thread or (thread, str(call))

    async def post_result(self, run_id: str, call: str, payload: Any) -> httpx.Response:
        return await self.request("POST", f"/runs/{run_id}/tool-calls/{call}/result",
                                  json=payload)

    async def frontend_tool(self) -> None:
        title = "a frontend tool's result is resolved inside the same run"
        thread, token = self.ids("thread"), uuid.uuid4().hex
        body = self.body(thread, [self.user(echo_prompt(token))], tools=[echo_tool()])
        run_id = body["runId"]
        names: dict[str, str] = {}
        state: dict[str, Any] = {"token": token}

        async def on_event(event: dict[str, Any], capture: Capture) -> None:
            kind, call = event.get("type"), str(event.get("toolCallId"))
            if kind == "TOOL_CALL_START":
                names[call] = str(event.get("toolCallName"))
            elif kind == "TOOL_CALL_RESULT" and names.get(call) == ECHO_TOOL and (
                    "posted" not in state):
                state.setdefault("early", event)
            elif kind == "TOOL_CALL_END" and names.get(call) == ECHO_TOOL and "call" not in state:
                state["call"] = call
                state["posted_at"] = len(capture.events)
                state["unknown"] = await self.post_result(run_id, self.ids("call"),
                                                          {"result": "x"})
                state["posted"] = await self.post_result(run_id, call, {"result": {"token": token}})
                state["duplicate"] = await self.post_result(run_id, call, {"result": "again"})

        try:
            capture = await self.stream("L2 frontend tool run", body, on_event)
        except Failed as exc:
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED, exc.detail)
            return
        if not self.streamed(capture):
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED,
                     f"the run answered {capture.status}")
            return
        if "call" not in state:
            why = (f"the agent did not call the declared frontend tool {ECHO_TOOL}: the backend "
                   "needs an agent (--agent) that calls a frontend tool named in the message")
            for rule, text in (("L2.frontend-tool-in-run", title), *RESULT_RULES.items()):
                self.add(rule, SPEC_FRONTEND, text, Outcome.SKIPPED, why)
            return
        if self.grade_frontend(capture, state, run_id, title):
            self.tool_thread = (thread, state["call"])

    def grade_frontend(self, capture: Capture, state: dict[str, Any], run_id: str,
                       title: str) -> bool:
        """Grade the round trip; True when the frontend call was resolved in the run."""
        call, posted = state["call"], state["posted"]
        path = f"/runs/{run_id}/tool-calls/{call}/result"
        events = capture.events
        after = events[state["posted_at"]:]
        result = next((e for e in after if e.get("type") == "TOOL_CALL_RESULT"
                       and e.get("toolCallId") == call), None)
        terminal_at = next((i for i, e in enumerate(events) if e.get("type") in TERMINALS), None)
        passed = False
        if "early" in state:
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED,
                     f"TOOL_CALL_RESULT for frontend call {call} before its result was posted",
                     state["early"])
        elif result is None:
            detail = (f"no TOOL_CALL_RESULT for frontend call {call} in run {run_id} (its "
                      f"result POST answered {posted.status_code})")
            last = events[-1] if events else None
            if terminal_at is not None:
                last = events[terminal_at]
                detail += (f"; the run ended with {last.get('type')} at event {terminal_at}: "
                           "the result must be resolved inside the same run (step 4), not "
                           "by a second run")
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED, detail,
                     last)
        elif not posted.is_success:
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED,
                     f"the result POST was refused (step 3) with {posted.status_code}",
                     describe("POST", path, posted))
        elif state["token"] not in json.dumps(result.get("content"), default=str):
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED,
                     f"the TOOL_CALL_RESULT for frontend call {call} does not carry the posted "
                     f"result (token {state['token']}): a result the frontend never sent",
                     result)
        elif not self.finished(capture):
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.FAILED,
                     "the run did not finish (RUN_FINISHED) after the result", events[-1])
        else:
            passed = True
            self.add("L2.frontend-tool-in-run", SPEC_FRONTEND, title, Outcome.PASSED,
                     f"{call} resolved in run {run_id}")
        unknown, duplicate = state["unknown"], state["duplicate"]
        self.expect_refusal("L2.result-unknown-call", RESULT_RULES["L2.result-unknown-call"],
                            unknown, "POST", f"/runs/{run_id}/tool-calls/(unknown)/result",
                            (404,))
        self.expect_refusal("L2.result-duplicate", RESULT_RULES["L2.result-duplicate"],
                            duplicate, "POST", path, (409, 404, 400))
        results = [e for e in events if e.get("type") == "TOOL_CALL_RESULT"
                   and e.get("toolCallId") == call]
        if len(results) > 1:
            self.add("L2.result-once", SPEC_FRONTEND, "the stream carries one result per call",
                     Outcome.FAILED, f"{len(results)} TOOL_CALL_RESULT events for {call}",
                     results[1])
        else:
            self.add("L2.result-once", SPEC_FRONTEND, "the stream carries one result per call",
                     Outcome.PASSED)
        return passed

    def expect_refusal(self, rule: str, title: str, response: httpx.Response, method: str,
                       path: str, statuses: tuple[int, ...]) -> None:
        if 400 <= response.status_code < 500:
            note = "" if response.status_code in statuses else f" ({response.status_code})"
            self.add(rule, SPEC_FRONTEND, title, Outcome.PASSED, note.strip())
        else:
            self.add(rule, SPEC_FRONTEND, title, Outcome.FAILED,
                     f"answered {response.status_code}", describe(method, path, response))

    async def unknown_run_result(self) -> None:
        path = f"/runs/{self.ids('run')}/tool-calls/{self.ids('call')}/result"
        try:
            response = await self.request("POST", path, json={"result": "x"})
        except Failed as exc:
            self.add("L2.result-unknown-run", SPEC_FRONTEND, "a result for an unknown run is a "
                     "4xx", Outcome.FAILED, exc.detail)
            return
        self.expect_refusal("L2.result-unknown-run", "a result for an unknown run is a 4xx",
                            response, "POST", path, (404,))

    # --- Level 3 ---------------------------------------------------------------------------

    async def level3(self) -> None:
        await ThreadChecks(self).run()
        await ConversationChecks(self).run()

    # --- Level 4 ---------------------------------------------------------------------------

    async def level4(self) -> None:
        spec = SPEC_ROUTES
        try:
            listed = await self.request("GET", "/agents")
            agents = _items(listed.json(), "agents") if listed.status_code == 200 else None
        except (Failed, ValueError) as exc:
            self.add("L4.agents-list", spec, "GET /agents lists agents", Outcome.FAILED, str(exc))
            return
        if not agents or not all(isinstance(a, dict) and isinstance(a.get("id"), str)
                                 for a in agents):
            self.add("L4.agents-list", spec, "GET /agents lists agents", Outcome.FAILED,
                     "expected 200 with a non-empty list of agents, each with a string id",
                     describe("GET", "/agents", listed))
            return
        self.add("L4.agents-list", spec, "GET /agents lists agents", Outcome.PASSED,
                 f"{len(agents)} agent(s)")
        wanted = self.target.agent or agents[0]["id"]
        title = f"GET /agents/{wanted} reads that agent"
        try:
            read = await self.request("GET", f"/agents/{wanted}")
            body = read.json() if read.status_code == 200 else None
        except (Failed, ValueError) as exc:
            self.add("L4.agent-read", spec, title, Outcome.FAILED, str(exc))
            body = None
        else:
            agent = body.get("agent", body) if isinstance(body, dict) else None
            ids = {agent.get("id"), *(agent.get("aliases") or [])} if isinstance(agent, dict) \
                else set()
            if wanted in ids:
                self.add("L4.agent-read", spec, title, Outcome.PASSED)
            else:
                self.add("L4.agent-read", spec, title, Outcome.FAILED,
                         "expected 200 with that agent's id", describe("GET", title[4:], read))
        missing = f"/agents/iobridge-check-missing-{self.nonce}"
        title = "GET /agents/:agentId of an unknown agent is a 404"
        try:
            gone = await self.request("GET", missing)
        except Failed as exc:
            self.add("L4.agent-404", spec, title, Outcome.FAILED, exc.detail)
            return
        outcome = Outcome.PASSED if gone.status_code == 404 else Outcome.FAILED
        self.add("L4.agent-404", spec, title, outcome,
                 "" if outcome is Outcome.PASSED else f"answered {gone.status_code}",
                 None if outcome is Outcome.PASSED else describe("GET", missing, gone))
        await self.agui10.capabilities()

    async def run(self) -> Report:
        levels = [self.level1, self.level2, self.level3, self.level4]
        for level in levels[: self.target.level]:
            await level()
        self.grade_streams()
        self.agui10.grade_streams()
        order = {f"L{n}": n for n in range(1, 5)}
        self.report.results.sort(key=lambda r: order.get(r.level, 9))
        return self.report


async def check_http(target: HttpTarget, *, transport: httpx.AsyncBaseTransport | None = None
                     ) -> Report:
    """Grade the backend at ``target`` up to ``target.level`` and return the report."""
    if not 1 <= target.level <= 4:
        raise ValueError("level must be 1, 2, 3 or 4")
    async with httpx.AsyncClient(
        base_url=target.base, headers=target.headers, timeout=target.timeout,
        transport=transport, follow_redirects=False,
    ) as client:
        return await HttpCheck(target, client).run()
