"""Frontend tool calls waiting for the client's result, keyed by (runId, toolCallId)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from iobridge.agents.context import ToolResult
from iobridge.errors import ConflictError, NotFoundError


@dataclass(eq=False)
class PendingToolCall:
    """One announced frontend tool call and the future its result resolves."""

    run_id: str
    tool_call_id: str
    name: str
    future: asyncio.Future[ToolResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class PendingRegistry:
    """The frontend tool calls of all live runs.

    A call is registered before its TOOL_CALL_END is emitted (so a fast client can never
    post too early), resolved once by the result route, and removed when its waiter ends
    (result, timeout or cancellation): nothing outlives its run.
    """

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], PendingToolCall] = {}
        #: Calls already answered, so a second post gets 409 rather than 404.
        self._answered: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._calls)

    def register(self, run_id: str, tool_call_id: str, name: str) -> PendingToolCall:
        """Register a call (idempotent for the same key)."""
        key = (run_id, tool_call_id)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = PendingToolCall(run_id, tool_call_id, name)
        return call

    def resolve(self, run_id: str, tool_call_id: str, result: ToolResult) -> None:
        """Deliver the client's result.

        Raises:
            ConflictError: the call was already answered.
            NotFoundError: no such pending call in this run.
        """
        key = (run_id, tool_call_id)
        call = self._calls.get(key)
        if call is None or call.future.done():
            if key in self._answered or call is not None:
                raise ConflictError(
                    "this tool call already has a result", code="TOOL_RESULT_ALREADY_SUBMITTED"
                )
            raise NotFoundError("unknown tool call for this run", code="TOOL_CALL_NOT_FOUND")
        call.future.set_result(result)
        self._answered.add(key)

    async def wait(self, call: PendingToolCall, timeout: float) -> ToolResult:
        """Wait for the call's result; the call is unregistered however the wait ends.

        Raises:
            TimeoutError: no result within ``timeout`` seconds.
        """
        try:
            return await asyncio.wait_for(asyncio.shield(call.future), timeout)
        finally:
            self._calls.pop((call.run_id, call.tool_call_id), None)
            if not call.future.done():
                call.future.cancel()

    def cancel_run(self, run_id: str) -> None:
        """Cancel the run's waiting calls (the run ended); answers are remembered."""
        for key in [k for k in self._calls if k[0] == run_id]:
            call = self._calls.pop(key)
            if not call.future.done():
                call.future.cancel()

    def forget_run(self, run_id: str) -> None:
        """Drop every trace of a run that is no longer retained."""
        self.cancel_run(run_id)
        self._answered = {k for k in self._answered if k[0] != run_id}
