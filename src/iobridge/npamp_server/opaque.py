"""Server side of opaque AG-UI carriage: OpaqueSession events → Backend calls.

A thin shell like :mod:`iobridge.npamp_server.server`: :class:`OpaqueSession` decides every
Bridge and CC-OPAQUE rule, :mod:`iobridge.npamp.bridge.agui_opaque` holds what the payloads
mean (the io route surface), and this module only calls the :class:`~iobridge.app.Backend`:

* ``POST /run`` → authorize (SafetyLabel, absent = destructive), ``start_run``, then the run
  log as the chunks of one JSON array, then BRIDGE_STREAM_END;
* ``POST /runs/{id}/tool-calls/{call}/result`` → ``submit_tool_result``, answered
  ``{"status":"accepted"}``;
* ``POST /runs/{id}/cancel`` → ``cancel_run``, answered ``{"status":"cancelling"|"ended"}``.

A refusal by the io protocol (bad body, unknown run, busy thread...) is a BRIDGE_ERROR holding
the same JSON error object HTTP would send; authorization failures and unknown routes are
transport errors (CC-OPAQUE §8). When the association drops, a run goes on for the resume
grace like any detached run (opaque carriage has no resume, so nobody picks it up).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from iobridge.app import EventSink
from iobridge.errors import EventsNotRetained, IobridgeError
from iobridge.npamp.bridge import Role, TransportErrorCode
from iobridge.npamp.bridge.agui_opaque import EventArrayWriter, Route, parse_route
from iobridge.npamp.bridge.events import BridgeFrameRejected
from iobridge.npamp.bridge.opaque import (
    ExchangeState,
    OpaqueErrorReceived,
    OpaqueEvent,
    OpaqueRequested,
    OpaqueSession,
)
from iobridge.npamp.errors import NpampError
from iobridge.npamp_server.principals import Refusal

if TYPE_CHECKING:
    from iobridge.app import Backend, FollowedRun
    from iobridge.auth import Principal
    from iobridge.npamp.bridge import SafetyLabel

__all__ = ["OpaqueCarrier"]

logger = logging.getLogger("iobridge.npamp")
_GONE = (NpampError, OSError, ssl.SSLError)
_REPLYING = frozenset({ExchangeState.REQUESTED, ExchangeState.STREAMING})


class OpaqueCarrier:
    """The opaque exchanges of one association (one session per AG-UI channel).

    Args:
        backend: The application core.
        sessions: channel → the OpaqueSession of that channel.
        authorize: Label → principal, raising :class:`Refusal` (the peer directory's rule).
        lock: The association's send lock (shared with the STREAM carriage).
        flush: Sends what a session queued; called under ``lock``.
        peer: Short peer fingerprint, for logs.
    """

    def __init__(
        self,
        backend: Backend,
        sessions: dict[int, OpaqueSession],
        *,
        authorize: Callable[[SafetyLabel | None], Principal],
        lock: asyncio.Lock,
        flush: Callable[[int, OpaqueSession], Awaitable[None]],
        peer: str,
    ) -> None:
        self.backend, self.sessions = backend, sessions
        self._authorize, self._lock, self._flush, self._peer = authorize, lock, flush, peer
        self.tasks: dict[tuple[int, bytes], asyncio.Task[None]] = {}

    async def receive(self, channel: int, frame_type: int, payload: bytes) -> None:
        """Feed one Bridge frame of this carriage and act on what it means."""
        session = self.sessions[channel]
        events = session.receive_frame(frame_type, payload)
        async with self._lock:
            await self._flush(channel, session)
        for event in events:
            self._dispatch(channel, event)

    async def aclose(self) -> None:
        """Stop forwarding (the runs themselves detach with the resume grace)."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _dispatch(self, channel: int, event: OpaqueEvent) -> None:
        if isinstance(event, OpaqueRequested):
            key = (channel, event.correlation_id)
            task = asyncio.create_task(self._serve(channel, event))
            self.tasks[key] = task
            task.add_done_callback(functools.partial(self._done, key))
        elif isinstance(event, OpaqueErrorReceived) and event.role is Role.PRODUCER:
            aborted = self.tasks.get((channel, event.correlation_id))  # the peer aborted it
            if aborted is not None:
                aborted.cancel()
        elif isinstance(event, BridgeFrameRejected):
            logger.info("N-PAMP peer %s: opaque frame refused: %s", self._peer, event.error)

    def _done(self, key: tuple[int, bytes], task: asyncio.Task[None]) -> None:
        if self.tasks.get(key) is task:
            del self.tasks[key]
        if not task.cancelled() and task.exception() is not None:
            logger.error("N-PAMP opaque exchange failed", exc_info=task.exception())

    async def _serve(self, channel: int, request: OpaqueRequested) -> None:
        session, corr = self.sessions[channel], request.correlation_id
        route = parse_route(request.method)
        try:
            if route is None:
                raise Refusal(
                    TransportErrorCode.METHOD_UNSUPPORTED,
                    f"no route {request.method[:64]!r} is carried",
                )
            principal = self._authorize(request.safety_label)
            if route.kind == "run":
                run = await self.backend.start_run(
                    principal,
                    request.body,
                    tool_result_mode=self.backend.settings.npamp.opaque_tool_result_mode,
                )
                await self._stream(channel, session, corr, run)
                return
            answer = await self._call(principal, route, request.body)
        except Refusal as exc:
            logger.info("N-PAMP peer %s: refused %s: %s", self._peer, request.method, exc)
            code, reason = exc.code, exc.message.encode()[:255].decode("utf-8", "ignore")
            await self._reply(channel, session, corr, lambda: session.fail(corr, code, reason))
            return
        except IobridgeError as exc:
            error = _json(exc.to_body())
            await self._reply(channel, session, corr, lambda: session.fail_foreign(corr, error))
            return
        body = _json(answer)
        await self._reply(channel, session, corr, lambda: session.respond(corr, body))

    async def _call(self, principal: Principal, route: Route, body: bytes) -> dict[str, Any]:
        """The answer of a route that is not a run (io protocol errors raise)."""
        if route.kind == "cancel":
            stopped = await self.backend.cancel_run(principal, route.run_id)
            return {"status": "cancelling" if stopped else "ended"}
        await self.backend.submit_tool_result(principal, route.run_id, route.tool_call_id, body)
        return {"status": "accepted"}

    async def _stream(
        self, channel: int, session: OpaqueSession, corr: bytes, run: FollowedRun
    ) -> None:
        """The run log as ``[event,event,...]``, one event per BRIDGE_STREAM_DATA, then END."""
        writer = _ReplyWriter(self, channel, session, corr)
        with contextlib.suppress(*_GONE):
            await self.backend.follow(
                run, writer, detach_grace=self.backend.settings.npamp.resume_grace_seconds
            )

    async def _reply(
        self, channel: int, session: OpaqueSession, corr: bytes, answer: Callable[[], None]
    ) -> None:
        with contextlib.suppress(*_GONE):
            async with self._lock:
                if session.state_of(Role.PRODUCER, corr) in _REPLYING:
                    answer()
                    await self._flush(channel, session)


class _ReplyWriter(EventSink):
    """One opaque reply's end of :meth:`Backend.follow`: the run's events as the chunks of
    one JSON array, each in a BRIDGE_STREAM_DATA, the array's close in the END."""

    def __init__(
        self, carrier: OpaqueCarrier, channel: int, session: OpaqueSession, corr: bytes
    ) -> None:
        self.carrier, self.channel, self.session, self.corr = carrier, channel, session, corr
        self.array = EventArrayWriter()

    async def send(
        self, events: list[tuple[int, bytes]], *, last: bool, tags: list[bytes] | None = None
    ) -> bool:
        session, corr = self.session, self.corr
        async with self.carrier._lock:
            if session.state_of(Role.PRODUCER, corr) not in _REPLYING:
                return False
            for _seq, data in events:
                session.send_data(corr, self.array.chunk(data))
            if last:
                session.end(corr, self.array.close())
            await self.carrier._flush(self.channel, session)
        return True

    async def keep_alive(self) -> None:
        return None  # followed without ``idle``

    async def end(self) -> None:
        closing = self.array.close()
        await self.carrier._reply(
            self.channel, self.session, self.corr, lambda: self.session.end(self.corr, closing)
        )

    async def cut_off(self, error: EventsNotRetained) -> None:
        # Fell behind the replay window: the reply cannot be whole.
        code, reason = TransportErrorCode.NOT_DELIVERED, error.message[:255]
        await self.carrier._reply(
            self.channel, self.session, self.corr,
            lambda: self.session.fail(self.corr, code, reason),
        )


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
