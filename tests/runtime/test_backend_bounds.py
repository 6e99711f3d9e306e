"""What ``Backend.start_run`` and ``Backend.submit_tool_result`` check against the settings
before a run starts or a result is delivered (in process, memory store): the message count
and JSON depth of a body (small, and over the size parsed off the loop), the state and media
bounds, the structured-output schema bounds, the transport's frontend-tool mode, whom
``max_active_runs_per_principal`` counts, and ``diverging_history``; what refusals say, and
readiness."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.helpers import CollectingSink, free_port, run_body

from iobridge.agents.context import RunContext
from iobridge.agents.function import FunctionAgent
from iobridge.agents.outputs import AgentOutput
from iobridge.app import Backend
from iobridge.auth import ANONYMOUS, ApiKeyEntry, AuthSettings, Principal
from iobridge.config import Settings
from iobridge.errors import InputError, PayloadTooLarge, ServiceUnavailable, TooManyRequests
from iobridge.protocol.run_input import OFF_LOOP_BYTES
from iobridge.runtime.run import Run
from iobridge.store import MemoryThreadStore, SqlThreadStore
from iobridge.store.sqlalchemy_store import make_engine

WEATHER = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}


async def _asks_weather(ctx: RunContext) -> AsyncIterator[AgentOutput]:
    result = await ctx.call_tool("get_weather", {"city": "Oslo"})
    yield f"it is {result.content}"


def _backend(**settings: Any) -> Backend:
    settings.setdefault("database_url", "memory://")
    agents = [
        FunctionAgent(_asks_weather, id="asks"),
        FunctionAgent(_asks_weather, id="blind",
                      capabilities={"multimodal": {"input": {"image": False}}}),
    ]
    return Backend(Settings(**settings), agents=agents)


def _events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data in run.log.entries()]


async def _call_of(run: Run) -> str:
    """The id of the run's frontend call, once the client has it (TOOL_CALL_END)."""
    async with asyncio.timeout(10):  # a hang guard, not a timing check
        while not any(e["type"] == "TOOL_CALL_END" for e in _events(run)):
            await asyncio.sleep(0.01)
    return str(next(e["toolCallId"] for e in _events(run) if e["type"] == "TOOL_CALL_END"))


async def _ended(run: Run) -> None:
    assert run.task is not None
    await asyncio.wait_for(asyncio.shield(run.task), 10)  # a hang guard


def _messages(count: int, padding: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"u{i}", "role": "user", "content": "x" * padding} for i in range(count)]


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("large", [False, True], ids=["small", "over-off-loop-size"])
async def test_a_body_is_held_to_max_messages_and_max_json_depth(large: bool) -> None:
    padding = OFF_LOOP_BYTES // 2 if large else 0
    async with _backend(max_messages=2, max_json_depth=8) as backend:
        body = {**run_body("x", agentId="asks", tools=[WEATHER]),
                "messages": _messages(3, padding)}
        raw = json.dumps(body).encode()
        assert (len(raw) > OFF_LOOP_BYTES) is large
        with pytest.raises(PayloadTooLarge) as too_many:
            await backend.start_run(ANONYMOUS, raw)
        assert too_many.value.message == "a run request carries at most 2 messages"
        deep = {**body, "messages": _messages(2, padding), "state": {"v": _nested(10)}}
        with pytest.raises(InputError) as too_deep:
            await backend.start_run(ANONYMOUS, json.dumps(deep).encode())
        assert too_deep.value.code == "JSON_TOO_DEEP"
        fits = {**body, "messages": _messages(2, padding), "state": {"v": _nested(5)}}
        run = await backend.start_run(ANONYMOUS, json.dumps(fits).encode())
        assert run.run_id == "r1" and run.thread_id == "t1"
        await backend.submit_tool_result(ANONYMOUS, "r1", await _call_of(run), {"content": "ok"})
        await _ended(run)
        assert _events(run)[-1]["type"] == "RUN_FINISHED"


async def test_state_and_media_over_their_bounds_are_refused_before_the_run() -> None:
    async with _backend(max_state_bytes=64, max_media_part_bytes=16) as backend:
        big_state = {**run_body("x", agentId="asks"), "state": {"k": "v" * 100}}
        with pytest.raises(PayloadTooLarge) as state:
            await backend.start_run(ANONYMOUS, big_state)
        assert state.value.code == "STATE_TOO_LARGE"
        assert state.value.message == "state is larger than 64 bytes"
        image = {"type": "image", "source": {"type": "url", "value": "https://cdn.test/c.png"}}
        pictured = run_body("x", agentId="asks")
        pictured["messages"][0]["content"] = [{"type": "text", "text": "see"}, image]
        with pytest.raises(PayloadTooLarge) as media:
            await backend.start_run(ANONYMOUS, pictured)
        assert media.value.code == "MEDIA_TOO_LARGE"
        assert media.value.details["limit"] == 16
        assert backend.runtime.active_runs == 0
    async with _backend() as backend:
        pictured["forwardedProps"] = {"agentId": "blind"}
        with pytest.raises(InputError) as unsupported:
            await backend.start_run(ANONYMOUS, pictured)
        assert unsupported.value.code == "UNSUPPORTED_MEDIA"
        assert "'blind'" in unsupported.value.message
        pictured["forwardedProps"] = {"agentId": "asks"}  # declares nothing: let through
        run = await backend.start_run(ANONYMOUS, pictured)
        assert run.agent_id == "asks"


async def test_a_tool_result_is_held_to_max_json_depth_and_the_media_part_bound() -> None:
    async with _backend(max_json_depth=8, max_media_part_bytes=16) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="asks", tools=[WEATHER]))
        call = await _call_of(run)
        with pytest.raises(InputError) as too_deep:
            await backend.submit_tool_result(ANONYMOUS, "r1", call, {"result": _nested(10)})
        assert too_deep.value.code == "JSON_TOO_DEEP"
        image = {"type": "image", "source": {"type": "url", "value": "https://cdn.test/c.png"}}
        with pytest.raises(PayloadTooLarge) as media:
            await backend.submit_tool_result(ANONYMOUS, "r1", call, {"content": [image]})
        assert media.value.code == "MEDIA_TOO_LARGE"
        # Neither was delivered: the call still takes a result.
        await backend.submit_tool_result(ANONYMOUS, "r1", call, {"result": _nested(5)})
        await _ended(run)
        results = [e for e in _events(run) if e["type"] == "TOOL_CALL_RESULT"]
        assert [e["toolCallId"] for e in results] == [call]


async def test_a_structured_output_schema_is_held_to_its_bounds() -> None:
    schema = {"type": "object", "properties": {
        f"field{i}": {"type": "string", "description": "d" * 40} for i in range(8)}}
    async with _backend(max_output_schema_bytes=256) as backend:
        body = run_body("x", agentId="asks", structuredOutput={"schema": schema})
        with pytest.raises(PayloadTooLarge) as too_large:
            await backend.start_run(ANONYMOUS, body)
        assert too_large.value.code == "STRUCTURED_OUTPUT_TOO_LARGE"
    async with _backend(max_output_schema_objects=3) as backend:
        with pytest.raises(PayloadTooLarge) as too_many:
            await backend.start_run(ANONYMOUS, body)
        assert too_many.value.code == "STRUCTURED_OUTPUT_TOO_LARGE"
    async with _backend() as backend:
        run = await backend.start_run(ANONYMOUS, body)
        assert run.run_id == "r1"


async def test_the_transports_tool_mode_applies_when_neither_the_request_nor_the_agent_names_one(
) -> None:
    async with _backend() as backend:
        run = await backend.start_run(
            ANONYMOUS, run_body("x", agentId="asks", tools=[WEATHER]), tool_result_mode="next-run"
        )
        await _ended(run)  # it does not wait for the result
        (call,) = [e["toolCallId"] for e in _events(run) if e["type"] == "TOOL_CALL_END"]
        assert _events(run)[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call]}


async def test_with_auth_the_per_principal_limit_counts_each_principal() -> None:
    keys = [ApiKeyEntry(sha256="0" * 64, principal=name) for name in ("p1", "p2")]
    async with _backend(auth=AuthSettings(mode="api-key", api_keys=keys),
                        max_active_runs_per_principal=1) as backend:
        first, second = (Principal(id=n, resource_ids=None, default_resource="default")
                         for n in ("p1", "p2"))
        for n, principal in enumerate((first, second, first)):
            body = run_body("x", thread_id=f"t{n}", run_id=f"r{n}", agentId="asks",
                            tools=[WEATHER])
            if n < 2:
                await backend.start_run(principal, body)
                continue
            with pytest.raises(TooManyRequests):
                await backend.start_run(principal, body)
        assert backend.runtime.active_runs == 2


@pytest.mark.parametrize(("diverging", "branches"), [("merge", 1), ("branch", 2)])
async def test_a_history_that_leaves_out_the_reply_regenerates_it_only_when_set_to_branch(
    diverging: str, branches: int
) -> None:
    async def reply(ctx: RunContext) -> str:
        return "answer"

    settings = Settings.model_validate({"database_url": "memory://",
                                        "diverging_history": diverging})
    backend = Backend(settings, agents=[FunctionAgent(reply, id="reply")])
    async with backend:
        for run_id in ("r1", "r2"):  # the same one user message, twice
            body = run_body("question", run_id=run_id, agentId="reply")
            body["messages"][0]["id"] = "u1"
            await _ended(await backend.start_run(ANONYMOUS, body))
        assert len(await backend.list_branches(ANONYMOUS, "t1")) == branches
        stored = (await backend.list_messages(ANONYMOUS, "t1", format="agui")).messages
        assert [m["role"] for m in stored] == (
            ["user", "assistant", "assistant"] if branches == 1 else ["user", "assistant"])


async def test_a_message_s_media_are_held_to_max_media_message_bytes_together() -> None:
    def image(n: int) -> dict[str, Any]:
        return {"type": "image", "source": {"type": "url", "value": f"https://cdn.test/{n}.png"}}

    async with _backend(max_media_part_bytes=64, max_media_message_bytes=40) as backend:
        one = run_body("x", agentId="asks")
        one["messages"][0]["content"] = [image(1)]
        run = await backend.start_run(ANONYMOUS, one)
        two = run_body("x", thread_id="t2", run_id="r2", agentId="asks")
        two["messages"][0]["content"] = [image(1), image(2)]
        with pytest.raises(PayloadTooLarge) as together:
            await backend.start_run(ANONYMOUS, two)
        assert together.value.code == "MEDIA_TOO_LARGE"
        with pytest.raises(PayloadTooLarge) as result:
            await backend.submit_tool_result(ANONYMOUS, "r1", await _call_of(run),
                                             {"content": [image(1), image(2)]})
        assert result.value.code == "MEDIA_TOO_LARGE"


async def test_refusals_say_what_was_refused() -> None:
    async with _backend(drain_seconds=0) as backend:
        run = await backend.start_run(ANONYMOUS, run_body("x", agentId="asks", tools=[WEATHER]))
        with pytest.raises(InputError) as cursor:
            await backend.resume(ANONYMOUS, run.run_id, "not-an-id")
        assert (cursor.value.code, cursor.value.message) == (
            "INVALID_CURSOR", "Last-Event-ID must be an event id of this run")
        with pytest.raises(InputError) as agent:
            backend.describe_agent("")
        assert agent.value.message == "agentId must be a non-empty string"
        await backend.shutdown()
        assert await backend.readiness_problem() == "shutting down"
        with pytest.raises(ServiceUnavailable) as closing:
            await backend.start_run(ANONYMOUS, run_body("x", run_id="r2", agentId="asks"))
        assert (closing.value.code, closing.value.message) == (
            "SERVER_SHUTTING_DOWN", "the server is shutting down")


async def test_readiness_says_when_the_store_does_not_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Backend(Settings(database_url="memory://")) as backend:
        assert await backend.readiness_problem() is None
        probes = backend.metrics.registry.get_sample_value(
            "iobridge_store_operation_seconds_count", {"operation": "readiness"})
        assert probes == 1
    # A PostgreSQL store whose server is gone: nothing listens on its port.
    gone = f"postgresql+asyncpg://u:p@127.0.0.1:{free_port()}/db"
    async with Backend(Settings(database_url="memory://"),
                       store=SqlThreadStore(make_engine(gone), timeout=2)) as backend:
        with caplog.at_level(logging.WARNING, logger="iobridge"):
            assert await backend.readiness_problem() == "the store does not answer"
    assert [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("readiness")] == [
        "readiness: the store does not answer (ConnectionRefusedError)"]


async def test_a_given_store_stays_the_backend_s_after_it_closes() -> None:
    store = MemoryThreadStore()
    backend = Backend(Settings(database_url="memory://"), store=store)
    assert backend.store is store
    async with backend:
        assert backend.store is store
    assert backend.store is store
    with pytest.raises(RuntimeError):
        _ = Backend(Settings(database_url="memory://")).store  # opened on entry only


class _WaitingSink(CollectingSink):
    """A ``CollectingSink`` that tells a wait for the thread from a quiet run."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0
        self.waited = asyncio.Event()

    async def queued(self) -> None:
        self.waits += 1
        if self.waits == 2:
            self.waited.set()



async def test_a_follower_of_a_queued_run_is_told_it_waits_for_its_thread() -> None:
    async with _backend() as backend:
        first = await backend.start_run(
            ANONYMOUS, run_body("x", agentId="asks", tools=[WEATHER]))
        call = await _call_of(first)
        second = await backend.start_run(ANONYMOUS, run_body(
            "y", run_id="r2", tools=[WEATHER], agentId="asks", multitaskStrategy="enqueue"))
        assert second.queued
        sink = _WaitingSink()
        follower = asyncio.create_task(backend.follow(second, sink, idle=0.05))
        async with asyncio.timeout(10):  # a hang guard
            await sink.waited.wait()  # once at once, then instead of a keep-alive
        assert sink.keep_alives == 0 and sink.events == []
        await backend.submit_tool_result(ANONYMOUS, "r1", call, {"content": "sunny"})
        second_call = await _call_of(second)
        await backend.submit_tool_result(ANONYMOUS, "r2", second_call, {"content": "rain"})
        async with asyncio.timeout(10):
            await follower
        assert sink.lasts[-1] is True  # the terminal event ends the stream
        assert json.loads(sink.events[-1][1])["type"] == "RUN_FINISHED"


async def test_answers_to_interrupts_are_held_to_max_interrupt_bytes() -> None:
    async def ask(ctx: RunContext) -> AsyncIterator[AgentOutput]:
        yield f"got {await ctx.interrupt('input', message='name?')}"

    settings = Settings(database_url="memory://", max_interrupt_bytes=1024)
    async with Backend(settings, agents=[FunctionAgent(ask, id="ask")]) as backend:
        asked = await backend.start_run(ANONYMOUS, run_body("go", agentId="ask"))
        await _ended(asked)
        (interrupt,) = _events(asked)[-1]["outcome"]["interrupts"]

        def answer(payload: str, run_id: str) -> dict[str, Any]:
            return {**run_body("", run_id=run_id, agentId="ask"), "messages": [], "resume": [
                {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]}

        with pytest.raises(PayloadTooLarge) as too_large:
            await backend.start_run(ANONYMOUS, answer("x" * 1024, "r2"))
        assert too_large.value.code == "INTERRUPTS_TOO_LARGE"
        answered = await backend.start_run(ANONYMOUS, answer("Ada", "r3"))
        await _ended(answered)
        assert _events(answered)[-1]["type"] == "RUN_FINISHED"
