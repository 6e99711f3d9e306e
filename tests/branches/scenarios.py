"""Two overlapping runs on one thread, over HTTP, for each busy-thread strategy.

The first run is either parked on a frontend tool (the demo agent's ``get_weather``) or
streaming (``slow_agents``); the second comes while it is, with ``multitaskStrategy``. The
same scenario runs against one server and across two replicas (the first run on one, the
second on the other).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}
#: What a parked call's stored result says once its run was stopped (as for a cancel).
CANCELLED_RESULT = "the run was cancelled before the client answered"


def body(thread: str, text: str, *, tools: list[Any] | None = None,
         **props: Any) -> dict[str, Any]:
    run = f"run-{uuid.uuid4().hex[:10]}"
    return {"threadId": thread, "runId": run,
            "messages": [{"id": f"u-{run}", "role": "user", "content": text}],
            "tools": tools or [], "context": [], "forwardedProps": props}


def first_body(thread: str, first: str) -> dict[str, Any]:
    if first == "parked":
        return body(thread, "get_weather city=Oslo", tools=[WEATHER])
    return body(thread, "stream please", agentId="slow")


class Stream:
    """An SSE response read frame by frame: comments and events, in order."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.comments: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._lines = response.iter_lines()

    def frames(self) -> Iterator[dict[str, Any] | str]:
        for line in self._lines:
            if line.startswith(":"):
                self.comments.append(line)
                yield line
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                self.events.append(event)
                yield event

    def until(self, kind: str) -> dict[str, Any]:
        for frame in self.frames():
            if isinstance(frame, dict) and frame["type"] == kind:
                return frame
        raise AssertionError(f"no {kind}: {[e['type'] for e in self.events]}")

    def first_frame(self) -> dict[str, Any] | str:
        return next(self.frames())

    def rest(self) -> list[dict[str, Any]]:
        for _ in self.frames():
            pass
        return self.events


def park_or_stream(stream: Stream, first: str) -> str | None:
    """Read the first run until it is parked (its call's id) or streaming."""
    if first == "parked":
        return str(stream.until("TOOL_CALL_END")["toolCallId"])
    stream.until("TEXT_MESSAGE_CONTENT")
    return None


def stored(client: httpx.Client, thread: str) -> list[dict[str, Any]]:
    page = client.get(f"/threads/{thread}/messages", params={"format": "agui"})
    assert page.status_code == 200, page.text
    return list(page.json()["messages"])


def overlap(
    one: httpx.Client, other: httpx.Client, thread: str, first: str, strategy: str
) -> tuple[list[dict[str, Any]], Stream | None, list[dict[str, Any]], dict[str, Any]]:
    """Start the first run on ``one``, the second (``strategy``) on ``other`` while the first
    is parked or streaming; finish both. Returns the first run's events, the second's stream
    (``None``: refused), the thread's stored messages and the two bodies."""
    a, b = first_body(thread, first), body(thread, "second", multitaskStrategy=strategy)
    with one.stream("POST", "/run", json=a) as response:
        assert response.status_code == 200
        s1 = Stream(response)
        call = park_or_stream(s1, first)
        if strategy == "reject":
            refused = other.post("/run", json=b)
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["code"] == "THREAD_BUSY"
            _finish(one, a, s1, call)
            return s1.events, None, stored(one, thread), {"first": a, "second": b}
        with other.stream("POST", "/run", json=b) as response2:
            assert response2.status_code == 200
            s2 = Stream(response2)
            assert s2.first_frame() == ": queued"
            if strategy == "enqueue":
                _finish(one, a, s1, call)
            else:
                s1.rest()
            s2.rest()
    return s1.events, s2, stored(one, thread), {"first": a, "second": b}


def _finish(client: httpx.Client, a: dict[str, Any], s1: Stream, call: str | None) -> None:
    if call is not None:
        posted = client.post(f"/runs/{a['runId']}/tool-calls/{call}/result",
                             json={"result": {"temperature": 21}})
        assert posted.status_code == 200, posted.text
    s1.rest()


def check_overlap(
    first_events: list[dict[str, Any]], second: Stream | None,
    messages: list[dict[str, Any]], bodies: dict[str, Any], first: str, strategy: str,
) -> None:
    """The documented outcome of ``strategy``, and exactly the documented messages."""
    ids = [m["id"] for m in messages]
    assert len(ids) == len(set(ids)), f"a message is stored twice: {ids}"
    u1, u2 = bodies["first"]["messages"][0]["id"], bodies["second"]["messages"][0]["id"]
    terminal = first_events[-1]
    roles = [m["role"] for m in messages]
    if strategy in ("reject", "enqueue"):
        assert terminal["type"] == "RUN_FINISHED", terminal
        assert terminal.get("outcome", {"type": "success"})["type"] == "success", terminal
        done = ["user", "assistant", "tool", "assistant"] if first == "parked" else [
            "user", "assistant"]
        if strategy == "reject":
            assert second is None
            assert roles == done and ids[0] == u1
            return
        assert roles == [*done, "user", "assistant"]
        assert ids[0] == u1 and ids[len(done)] == u2
    else:
        assert terminal["type"] == "RUN_FINISHED", terminal
        assert terminal["outcome"] == {"type": "cancelled"}
        kept = ["user", "assistant", "tool"] if first == "parked" else ["user", "assistant"]
        if strategy == "interrupt":
            assert roles == [*kept, "user", "assistant"], roles
            assert ids[0] == u1 and ids[len(kept)] == u2
            if first == "parked":
                assert CANCELLED_RESULT in messages[2]["content"]
            else:
                assert messages[1]["content"].startswith("tick")
        else:
            assert roles == ["user", "assistant"], roles
            assert ids[0] == u2
    assert second is not None
    events = second.events
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1].get("outcome", {"type": "success"})["type"] == "success"
    assert "You said: second" in "".join(
        e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
