"""Frontend tool calls waiting for the client's result, indexed by run."""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field

from iobridge.errors import ConflictError, NotFoundError
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.run import RunKey


@dataclass(eq=False)
class PendingToolCall:
    """One announced frontend tool call and the future its result resolves."""

    run: RunKey
    tool_call_id: str
    name: str
    future: asyncio.Future[ToolResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class PendingRegistry:
    """The frontend tool calls of all live runs.

    A call is registered before its TOOL_CALL_END is emitted (so a fast client can never
    post too early), resolved once by the result route, and removed when its waiter ends
    (result, timeout or cancellation): nothing outlives its run. Calls are indexed by run,
    so ending a run costs what that run's calls cost, not what every run's calls cost.
    """

    def __init__(self) -> None:
        self._calls: dict[RunKey, dict[str, PendingToolCall]] = {}
        #: Calls already answered, so a second post gets 409 rather than 404.
        self._answered: dict[RunKey, set[str]] = {}

    def __len__(self) -> int:
        return sum(len(calls) for calls in self._calls.values())

    def register(self, run: RunKey, tool_call_id: str, name: str) -> PendingToolCall:
        """Register a call (idempotent for the same run and id)."""
        calls = self._calls.setdefault(run, {})
        call = calls.get(tool_call_id)
        if call is None:
            call = calls[tool_call_id] = PendingToolCall(run, tool_call_id, name)
        return call

    def resolve(self, run: RunKey, tool_call_id: str, result: ToolResult) -> None:
        """Deliver the client's result.

        Raises:
            ConflictError: the call was already answered.
            NotFoundError: no such pending call in this run.
        """
        call = self._calls.get(run, {}).get(tool_call_id)
        if call is None or call.future.done():
            if call is not None or tool_call_id in self._answered.get(run, ()):
                raise ConflictError(
                    "this tool call already has a result", code="TOOL_RESULT_ALREADY_SUBMITTED"
                )
            raise NotFoundError("unknown tool call for this run", code="TOOL_CALL_NOT_FOUND")
        call.future.set_result(result)
        self._answered.setdefault(run, set()).add(tool_call_id)

    async def wait(self, call: PendingToolCall, timeout: float) -> ToolResult:
        """Wait for the call's result; the call is unregistered however the wait ends.

        Raises:
            TimeoutError: no result within ``timeout`` seconds.
        """
        timer = asyncio.get_running_loop().call_later(
            timeout, self._expire, call, context=_NO_CONTEXT
        )
        try:
            return await call.future
        finally:
            timer.cancel()
            self._discard(call)
            if not call.future.done():
                call.future.cancel()

    def _expire(self, call: PendingToolCall) -> None:
        """The deadline passed: unregister the call first, so a late result is refused as
        unknown, then fail the wait."""
        self._discard(call)
        if not call.future.done():
            call.future.set_exception(TimeoutError())

    def _discard(self, call: PendingToolCall) -> None:
        calls = self._calls.get(call.run)
        if calls is not None and calls.get(call.tool_call_id) is call:
            del calls[call.tool_call_id]
            if not calls:
                del self._calls[call.run]

    def cancel_run(self, run: RunKey) -> None:
        """Cancel the run's waiting calls (the run ended); answers are remembered."""
        for call in self._calls.pop(run, {}).values():
            if not call.future.done():
                call.future.cancel()

    def forget_run(self, run: RunKey) -> None:
        """Drop every trace of a run that is no longer retained."""
        self.cancel_run(run)
        self._answered.pop(run, None)


#: The context of the result deadlines: they only fail a future, so they need no copy of the
#: caller's (``call_later`` copies the current context for each timer otherwise).
_NO_CONTEXT = contextvars.Context()
