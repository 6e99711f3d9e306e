"""A durable run's stream as a client gets it: events with their SSE ids (the number and the
open state, ``protocol.event_ids``), and the checks every concatenated stream must pass."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
from tests.agui_verify import verify_events

from iobridge.app import Backend
from iobridge.auth import ANONYMOUS, Principal
from iobridge.conformance.check.stream import lifecycle_violations

Stream = list[tuple[str, dict[str, Any]]]


async def parked(backend: Backend, owner: str, run_id: str) -> None:
    """Until the run's checkpoint says it is parked (its park point is written after the
    client has the call: not waited for by the run)."""
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        while (point := await backend.store.load_checkpoint(owner, run_id)) is None or (
            point.phase != "parked"
        ):
            await asyncio.sleep(0.02)


def number(event_id: str) -> int:
    return int(event_id.partition("~")[0])


class _Client:
    """An ``EventSink`` that keeps (id, event) and stops following after ``until``."""

    def __init__(self, until: str | None) -> None:
        self.events: Stream = []
        self.until = until
        self.done = asyncio.Event()

    async def send(self, events: list[tuple[int, bytes]], *, last: bool,
                   tags: list[bytes] | None = None) -> bool:
        for index, (value, data) in enumerate(events):
            tag = tags[index].decode() if tags is not None else ""
            event = orjson.loads(data)
            self.events.append((f"{value}{tag}", event))
            if event["type"] == self.until:
                self.done.set()
                return False
        return True

    async def keep_alive(self) -> None:
        return None

    async def queued(self) -> None:
        return None

    async def end(self) -> None:
        self.done.set()

    async def cut_off(self, error: Exception) -> None:
        self.done.set()


async def follow(
    backend: Backend, run_id: str, *, after: str | None = None, until: str | None = None,
    principal: Principal = ANONYMOUS, timeout: float = 20,
) -> Stream:
    """What a client that resumes with ``after`` (a last SSE id) gets, up to the first event
    of type ``until`` or the stream's end. The run is not cancelled when it stops following."""
    run, cursor = await backend.resume(principal, run_id, after)
    client = _Client(until)
    async with asyncio.timeout(timeout):
        await backend.follow(run, client, after=cursor, detach_grace=3600)
    return client.events


def sse_ids(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(id, event)`` of an SSE response as frames arrive (the id as sent)."""
    event_id = ""
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            yield event_id, json.loads(line[6:])


def assert_valid_stream(events: Stream | list[tuple[Any, dict[str, Any]]],
                        *, thread_id: str | None = None, run_id: str | None = None) -> None:
    """The client's concatenated stream: ids strictly increasing, one RUN_STARTED, the real
    terminal last, and the lifecycle guarantees by the project's two independent checks
    (``iobridge check``'s rules and ``tests/agui_verify``, written from the specs)."""
    ids = [number(str(i)) for i, _ in events]
    assert ids == sorted(set(ids)), ids
    kinds = [e for _, e in events]
    assert lifecycle_violations(kinds) == {}, lifecycle_violations(kinds)
    assert [e["type"] for e in kinds].count("RUN_STARTED") == 1
    verify_events(kinds, thread_id=thread_id, run_id=run_id)
