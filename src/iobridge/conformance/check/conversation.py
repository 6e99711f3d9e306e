"""Level 3 checks of conversation editing, graded only when a backend declares them:

* busy-thread strategies (``forwardedProps.multitaskStrategy``): declared when an unknown
  strategy answers 400 naming ``enqueue``; graded by a run parked on the echo frontend tool
  that a second run with ``interrupt`` stops (``outcome: cancelled``), the second finishing;
* branches (``replaceFrom``): declared when ``GET /threads/{id}/branches`` answers a
  ``branches`` list; graded by a regenerate that leaves the old reply readable as an earlier
  branch and the new one current.

A backend that declares neither gets two skips, with the reason.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from iobridge.conformance.check.conventions import ECHO_TOOL, echo_prompt, echo_tool
from iobridge.conformance.check.report import Failed, Outcome

if TYPE_CHECKING:
    from iobridge.conformance.check.http_checks import HttpCheck
    from iobridge.conformance.check.stream import Capture

__all__ = ["ConversationChecks"]

SPEC = "iobridge extension: concurrent input and conversation editing (docs/http-api.md)"


class ConversationChecks:
    def __init__(self, check: HttpCheck) -> None:
        self.check = check

    async def run(self) -> None:
        for rule, title, step in (
            ("L3.multitask-interrupt", "a run with multitaskStrategy interrupt stops the run "
             "holding the thread, then runs", self.interrupt),
            ("L3.branches-regenerate", "a regenerate (replaceFrom) keeps the old reply as an "
             "earlier branch", self.regenerate),
        ):
            try:
                outcome, detail = await step()
            except Failed as exc:
                self.check.add(rule, SPEC, title, Outcome.FAILED, exc.detail, exc.event)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self.check.add(rule, SPEC, title, Outcome.FAILED,
                               f"an answer has an unexpected shape ({type(exc).__name__}: {exc})")
            else:
                self.check.add(rule, SPEC, title, outcome, detail)

    async def interrupt(self) -> tuple[Outcome, str]:
        check = self.check
        probe = check.body(check.ids("thread"), [check.user("Hello.")])
        probe["forwardedProps"]["multitaskStrategy"] = "iobridge-check-unknown"
        answer = await check.request("POST", "/run", json=probe)
        if answer.status_code != 400 or "enqueue" not in answer.text:
            return Outcome.SKIPPED, ("the backend declares no busy-thread strategies (an "
                                     f"unknown multitaskStrategy answered {answer.status_code})")
        thread = check.ids("thread")
        first = check.body(thread, [check.user(echo_prompt(uuid.uuid4().hex))],
                           tools=[echo_tool()])
        second = check.body(thread, [check.user("Interrupting message.")])
        second["forwardedProps"]["multitaskStrategy"] = "interrupt"
        started: list[asyncio.Task[Capture]] = []
        names: dict[str, str] = {}

        async def on_event(event: dict[str, Any], capture: Capture) -> None:
            kind, call = event.get("type"), str(event.get("toolCallId"))
            if kind == "TOOL_CALL_START":
                names[call] = str(event.get("toolCallName"))
            elif kind == "TOOL_CALL_END" and names.get(call) == ECHO_TOOL and not started:
                started.append(asyncio.ensure_future(
                    check.stream("L3 interrupting run", second)))

        parked = await check.stream("L3 run parked on a frontend tool", first, on_event)
        if not started:
            return Outcome.SKIPPED, (f"the agent did not call the declared frontend tool "
                                     f"{ECHO_TOOL}, so no run was parked to interrupt")
        interrupting = await started[0]
        terminal = next((e for e in reversed(parked.events)
                         if e.get("type") in ("RUN_FINISHED", "RUN_ERROR")), None)
        if terminal is not None and (terminal.get("outcome") or {}).get("pendingToolCallIds"):
            return Outcome.SKIPPED, ("the frontend call did not keep its run open (next-run "
                                     "tool results), so no run was parked to interrupt")
        if terminal is None or terminal.get("type") != "RUN_FINISHED" or (
                (terminal.get("outcome") or {}).get("type") != "cancelled"):
            raise Failed("the interrupted run did not end with outcome cancelled",
                         terminal or parked.last_seen())
        if not check.finished(interrupting):
            raise Failed(f"the interrupting run did not finish (answered "
                         f"{interrupting.status})", interrupting.last_seen())
        return Outcome.PASSED, ""

    async def regenerate(self) -> tuple[Outcome, str]:
        check = self.check
        thread = check.ids("thread")
        capture = await check.stream("L3 branch base run",
                                     check.body(thread, [check.user("First message.")]))
        if not check.finished(capture):
            raise Failed(f"the run did not finish (answered {capture.status})",
                         capture.last_seen())
        query = {"resourceId": check.resource_a}
        listed = await check.request("GET", f"/threads/{thread}/branches", params=query)
        branches = listed.json().get("branches") if listed.status_code == 200 else None
        if not isinstance(branches, list):
            return Outcome.SKIPPED, ("the backend declares no branches (GET /threads/{id}/"
                                     f"branches answered {listed.status_code})")
        before = await self._messages(thread, None)
        reply = next((m for m in reversed(before) if m.get("role") == "assistant"), None)
        if reply is None:
            raise Failed("the base run stored no assistant reply", {"messages": before})
        body = check.body(thread, [])
        body["forwardedProps"]["replaceFrom"] = reply["id"]
        again = await check.stream("L3 regenerate run", body)
        if not check.finished(again):
            raise Failed(f"the regenerate run did not finish (answered {again.status})",
                         again.last_seen())
        listed = await check.request("GET", f"/threads/{thread}/branches", params=query)
        branches = listed.json()["branches"]
        current = [b for b in branches if b.get("current")]
        earlier = [b for b in branches if not b.get("current")]
        if len(current) != 1 or current[0].get("fromMessageId") != reply["id"] or not earlier:
            raise Failed("the branches do not show the regenerate", listed.json())
        now = await self._messages(thread, None)
        old = await self._messages(thread, str(earlier[0]["id"]))
        if reply["id"] in [m.get("id") for m in now] or reply["id"] not in [
                m.get("id") for m in old]:
            raise Failed("the old reply is not only on the earlier branch",
                         {"current": now[-3:], "earlier": old[-3:]})
        return Outcome.PASSED, ""

    async def _messages(self, thread: str, branch: str | None) -> list[dict[str, Any]]:
        params = {"resourceId": self.check.resource_a, "format": "agui"}
        if branch is not None:
            params["branch"] = branch
        answer = await self.check.request("GET", f"/threads/{thread}/messages", params=params)
        if answer.status_code != 200:
            raise Failed(f"GET /threads/{thread}/messages answered {answer.status_code}",
                         answer.text[:300])
        return [m for m in answer.json().get("messages", []) if isinstance(m, dict)]
