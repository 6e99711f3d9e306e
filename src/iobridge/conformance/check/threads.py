"""Level 3 checks: thread CRUD, replayable tool history, merging, ownership.

The resource a request acts for is named the portable way: ``resourceId`` in the query of a
thread route and in ``forwardedProps`` of a run (io-agent-protocol, forwardedProps
Convention). A backend whose credentials fix the resource ignores it; the ownership check then
needs two resources the credentials may use, and is skipped when the second is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from iobridge.conformance.check.report import Failed, Outcome

if TYPE_CHECKING:
    from iobridge.conformance.check.http_checks import HttpCheck


def describe(method: str, path: str, response: httpx.Response) -> dict[str, Any]:
    """A response as a report shows it: the request, the status and the (JSON) body."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:500]
    return {"request": f"{method} {path}", "status": response.status_code, "body": body}

__all__ = ["ThreadChecks"]

SPEC_ROUTES = "io-agent-protocol: Default Route Surface (threads)"
SPEC_ROLES = "io-agent-protocol: Message Roles (replayable tool history)"
SPEC_PROPS = "io-agent-protocol: forwardedProps Convention (resourceId)"
SPEC_MERGE = "io-agent-protocol: Streaming Contract (threadId is the thread key)"


def _messages(body: Any) -> list[dict[str, Any]]:
    value = body.get("messages") if isinstance(body, dict) else body
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _tool_history(messages: list[dict[str, Any]], call: str) -> tuple[bool, bool, str]:
    """(assistant toolCalls kept, tool toolCallId kept, form) for ``call`` in either form.

    The AG-UI form keeps ``toolCalls`` and ``toolCallId``; a Mastra v2 message (what a Mastra
    bridge answers) keeps the pair inside one ``tool-invocation`` part.
    """
    called = any(
        m.get("role") == "assistant"
        and any(isinstance(c, dict) and c.get("id") == call for c in m.get("toolCalls") or [])
        for m in messages
    )
    answered = any(m.get("role") == "tool" and m.get("toolCallId") == call for m in messages)
    if called or answered:
        return called, answered, "agui"
    for m in messages:
        content = m.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            inv = part.get("toolInvocation") if isinstance(part, dict) else None
            if isinstance(inv, dict) and inv.get("toolCallId") == call:
                return True, inv.get("state") == "result", "mastra"
    return False, False, "none"


class ThreadChecks:
    def __init__(self, check: HttpCheck) -> None:
        self.check = check
        self.a, self.b = check.resource_a, check.resource_b
        #: The thread of the merge check, reused by the ownership check.
        self.merged: str | None = None

    def add(self, rule: str, spec: str, title: str, outcome: Outcome, detail: str = "",
            event: Any = None) -> None:
        self.check.add(rule, spec, title, outcome, detail, event)

    async def call(self, method: str, path: str, resource: str, *, expect: tuple[int, ...],
                   json: Any = None, query: dict[str, str] | None = None) -> httpx.Response:
        kwargs: dict[str, Any] = {"params": {"resourceId": resource, **(query or {})}}
        if json is not None:
            kwargs["json"] = json
        response = await self.check.request(method, path, **kwargs)
        if response.status_code not in expect:
            raise Failed(f"{method} {path} answered {response.status_code}, expected "
                        f"{' or '.join(map(str, expect))}", describe(method, path, response))
        return response

    async def messages(self, thread: str, resource: str) -> list[dict[str, Any]]:
        # format=agui asks iobridge for the AG-UI form; other backends ignore it.
        response = await self.call("GET", f"/threads/{thread}/messages", resource,
                                   expect=(200,), query={"format": "agui"})
        return _messages(response.json())

    async def run(self) -> None:
        for rule, spec, title, step in (
            ("L3.thread-crud", SPEC_ROUTES, "threads are created, read, listed, updated and "
             "deleted", self.crud),
            ("L3.history-replay", SPEC_ROLES, "stored history keeps assistant toolCalls and "
             "tool toolCallId, and replays", self.replay),
            ("L3.merge-new-messages", SPEC_MERGE, "a client sending only its new message (or "
             "its whole history) gets one stored copy of each", self.merge),
            ("L3.ownership", SPEC_PROPS, "another resource's thread answers exactly like a "
             "missing one", self.ownership),
        ):
            try:
                outcome, detail = await step()
            except Failed as exc:
                self.add(rule, spec, title, Outcome.FAILED, exc.detail, exc.event)
            except ValueError as exc:  # a body that is not JSON
                self.add(rule, spec, title, Outcome.FAILED, f"an answer is not JSON: {exc}")
            except (TypeError, KeyError, AttributeError) as exc:  # JSON of another shape
                self.add(rule, spec, title, Outcome.FAILED,
                         f"an answer has an unexpected shape ({type(exc).__name__}: {exc})")
            else:
                self.add(rule, spec, title, outcome, detail)

    async def crud(self) -> tuple[Outcome, str]:
        title = f"iobridge check {self.check.nonce}"
        created = await self.call("POST", "/threads", self.a, expect=(200, 201),
                                  json={"title": title, "resourceId": self.a})
        thread = created.json().get("id") if isinstance(created.json(), dict) else None
        if not isinstance(thread, str) or not thread:
            raise Failed("POST /threads answered no thread id", created.json())
        path = f"/threads/{thread}"
        read = (await self.call("GET", path, self.a, expect=(200,))).json()
        if not isinstance(read, dict) or read.get("id") != thread:
            raise Failed(f"GET {path} answered another thread", read)
        listed = await self.call("GET", "/threads", self.a, expect=(200,))
        ids = [t.get("id") for t in _messages_or_threads(listed.json())]
        if thread not in ids:
            raise Failed(f"GET /threads does not list {thread}", listed.json())
        await self.call("PATCH", path, self.a, expect=(200,), json={"title": title + " renamed"})
        renamed = (await self.call("GET", path, self.a, expect=(200,))).json()
        if not isinstance(renamed, dict) or renamed.get("title") != title + " renamed":
            raise Failed("PATCH did not change the title", renamed)
        await self.call("GET", f"{path}/messages", self.a, expect=(200,))
        await self.call("DELETE", path, self.a, expect=(200, 202, 204))
        await self.call("GET", path, self.a, expect=(404,))
        missing = f"/threads/{self.check.ids('missing')}"
        await self.call("GET", missing, self.a, expect=(404,))
        return Outcome.PASSED, ""

    async def replay(self) -> tuple[Outcome, str]:
        if self.check.tool_thread is None:
            return Outcome.SKIPPED, "no tool round trip completed at level 2 to replay"
        thread, call = self.check.tool_thread
        stored = await self.messages(thread, self.a)
        called, answered, form = _tool_history(stored, call)
        if not called or not answered:
            missing = "assistant toolCalls" if not called else "the tool message's toolCallId"
            raise Failed(f"thread {thread} lost {missing} for call {call}",
                        {"messages": stored[-6:]})
        if form != "agui":
            return Outcome.PASSED, f"kept in {form} form; not re-sent (no AG-UI form offered)"
        follow = self.check.user("Thanks, that is all.")
        body = self.check.body(thread, [*stored, follow])
        capture = await self.check.stream("L3 history replay run", body)
        if not self.check.finished(capture):
            last = capture.last_seen()
            raise Failed(f"re-sending the stored history with a new message did not finish "
                        f"(answered {capture.status})", last)
        again = await self.messages(thread, self.a)
        copies = sum(1 for m in again if m.get("role") == "tool" and m.get("toolCallId") == call)
        if copies != 1:
            raise Failed(f"after the replay the thread holds {copies} tool results for {call}",
                        {"messages": again[-6:]})
        return Outcome.PASSED, ""

    async def merge(self) -> tuple[Outcome, str]:
        thread = self.check.ids("thread")
        first, second, third = (self.check.user(text) for text in (
            "First message of the merge check.", "Second message, sent alone.",
            "Third message, sent with the whole history."))
        for label, messages in (("first run", [first]), ("only-new-message run", [second]),
                                ("whole-history run", [first, second, third])):
            capture = await self.check.stream(f"L3 merge {label}",
                                              self.check.body(thread, messages))
            if not self.check.finished(capture):
                last = capture.last_seen()
                raise Failed(f"the {label} did not finish (answered {capture.status})", last)
        stored = await self.messages(thread, self.a)
        ids = [m.get("id") for m in stored]
        for message in (first, second, third):
            if ids.count(message["id"]) != 1:
                raise Failed(f"user message {message['id']} is stored {ids.count(message['id'])} "
                            "times, expected once", {"ids": ids})
        order = [ids.index(m["id"]) for m in (first, second, third)]
        if order != sorted(order):
            raise Failed("the stored user messages are out of order", {"ids": ids})
        self.merged = thread
        return Outcome.PASSED, ""

    async def ownership(self) -> tuple[Outcome, str]:
        try:
            return await self._ownership()
        except Failed as exc:
            raise Failed(f"{self.a}'s thread, as {self.b}: {exc.detail}", exc.event) from None

    async def _ownership(self) -> tuple[Outcome, str]:
        thread = self.merged
        if thread is None:
            created = await self.call("POST", "/threads", self.a, expect=(200, 201),
                                      json={"title": "owned", "resourceId": self.a})
            thread = created.json()["id"]
        probe = await self.check.request("GET", "/threads", params={"resourceId": self.b})
        if probe.status_code != 200:
            return Outcome.SKIPPED, (f"resource {self.b!r} is refused ({probe.status_code}) with "
                                     "these credentials; give two usable resources (--resource)")
        ids = [t.get("id") for t in _messages_or_threads(probe.json())]
        if thread in ids:
            raise Failed(f"GET /threads?resourceId={self.b} lists {self.a}'s thread {thread}",
                        probe.json())
        missing = self.check.ids("missing")
        for method, suffix, body in (("GET", "", None), ("GET", "/messages", None),
                                     ("PATCH", "", {"title": "taken over"}),
                                     ("DELETE", "", None)):
            foreign = await self.call(method, f"/threads/{thread}{suffix}", self.b,
                                      expect=(404,), json=body)
            absent = await self.call(method, f"/threads/{missing}{suffix}", self.b,
                                     expect=(404,), json=body)
            if _error_code(foreign) != _error_code(absent):
                raise Failed(f"{method} of a foreign thread answers differently from a missing "
                            f"one ({_error_code(foreign)} vs {_error_code(absent)})",
                            foreign.json())
        before = await self.messages(thread, self.a)
        run = self.check.body(thread, [self.check.user("Foreign run.")], resource=self.b)
        capture = await self.check.stream("L3 foreign thread run", run)
        if capture.status == 200:
            raise Failed(f"POST /run on {self.a}'s thread as {self.b} was accepted",
                        capture.events[:3])
        owner = await self.call("GET", f"/threads/{thread}", self.a, expect=(200,))
        after = await self.messages(thread, self.a)
        if len(after) != len(before) or owner.json().get("title") == "taken over":
            raise Failed("the foreign requests changed the thread", owner.json())
        return Outcome.PASSED, ""


def _messages_or_threads(body: Any) -> list[dict[str, Any]]:
    value = body.get("threads") if isinstance(body, dict) else body
    return [t for t in value if isinstance(t, dict)] if isinstance(value, list) else []


def _error_code(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None
