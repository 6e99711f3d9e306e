"""``iobridge.client`` against a real server on loopback: runs, frontend tools, cancel,
resume, threads, agents and errors."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import (
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from iobridge.auth import ApiKeyEntry, AuthSettings
from iobridge.client import IoBridgeClient, IoBridgeError

WEATHER = {
    "name": "get_weather",
    "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))


async def test_a_run_is_an_iterator_of_typed_events(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        stream = client.run("What is 2 + 3 * 4?", thread_id="t-run")
        events = [event async for event in stream]
    assert isinstance(events[0], RunStartedEvent)
    assert events[0].run_id == stream.run_id
    assert isinstance(events[-1], RunFinishedEvent)
    assert any(isinstance(e, ToolCallResultEvent) for e in events)  # the server tool
    assert "2 + 3 * 4 = 14." in _text(events)
    assert stream.finished
    assert stream.last_event_id == str(len(events))


async def test_a_frontend_tool_is_answered_in_the_same_run(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        stream = client.run('get_weather {"city": "Oslo"}', thread_id="t-tool", tools=[WEATHER])
        events = []
        async for event in stream:
            events.append(event)
            if isinstance(event, ToolCallEndEvent):
                start = next(e for e in events if isinstance(e, ToolCallStartEvent))
                assert start.tool_call_name == "get_weather"
                await client.tool_result(stream.run_id, event.tool_call_id, {"sky": "clear"})
        page = await client.messages("t-tool", format="agui")
    assert isinstance(events[-1], RunFinishedEvent)
    assert sum(isinstance(e, RunStartedEvent) for e in events) == 1
    assert 'The tool get_weather returned {"sky":"clear"}.' in _text(events)
    tool = [m for m in page.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool] == ['{"sky":"clear"}']


async def test_a_second_result_for_the_same_call_is_a_conflict(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        stream = client.run("get_weather", thread_id="t-dup", tools=[WEATHER])
        async for event in stream:
            if isinstance(event, ToolCallEndEvent):
                await client.tool_result(stream.run_id, event.tool_call_id, "sunny")
                with pytest.raises(IoBridgeError) as second:
                    await client.tool_result(stream.run_id, event.tool_call_id, "rain")
        with pytest.raises(IoBridgeError) as unknown:
            await client.tool_result(stream.run_id, "no-such-call", "x")
    assert second.value.status == 409
    assert unknown.value.status == 404
    assert unknown.value.code == "TOOL_CALL_NOT_FOUND"


async def test_cancel_stops_a_live_run_and_then_reports_it_ended(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        stream = client.run("get_weather", thread_id="t-cancel", tools=[WEATHER])
        events = []
        async for event in stream:
            events.append(event)
            if isinstance(event, ToolCallEndEvent):  # the run now waits for the result
                assert await client.cancel(stream.run_id) == "cancelling"
        assert await client.cancel(stream.run_id) == "ended"
        with pytest.raises(IoBridgeError) as missing:
            await client.cancel("no-such-run")
    assert isinstance(events[-1], RunFinishedEvent)
    assert events[-1].outcome is not None
    assert missing.value.status == 404


async def test_resume_replays_each_event_after_the_cursor_exactly_once(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        first = client.run("What is 6 * 7?", thread_id="t-resume")
        seen = [event async for event in first]
        cursor = 3
        again = client.resume(first.run_id, after=cursor)
        replayed, ids = [], []
        async for event in again:
            replayed.append(event)
            ids.append(again.last_event_id)
    assert len(seen) > cursor + 2
    assert ids == [str(n) for n in range(cursor + 1, len(seen) + 1)]
    assert replayed == seen[cursor:]
    assert isinstance(replayed[-1], RunFinishedEvent)


async def test_threads_create_list_get_rename_delete_and_messages(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        created = await client.create_thread("t-crud", title="first", metadata={"k": 1})
        assert (created.id, created.title, created.metadata) == ("t-crud", "first", {"k": 1})
        async for _ in client.run("hello", thread_id="t-crud"):
            pass
        page = await client.list_threads()
        assert [t.id for t in page.threads] == ["t-crud"]
        assert page.nextCursor is None
        renamed = await client.rename_thread("t-crud", "second")
        assert (await client.get_thread("t-crud")).title == renamed.title == "second"
        mastra = await client.messages("t-crud")
        agui = await client.messages("t-crud", format="agui")
        assert [m["role"] for m in agui.messages] == ["user", "assistant"]
        assert [m["type"] for m in mastra.messages] == ["v2", "v2"]
        assert mastra.messages[0]["content"]["parts"] == [{"type": "text", "text": "hello"}]
        with pytest.raises(IoBridgeError) as taken:
            await client.create_thread("t-crud")
        await client.delete_thread("t-crud")
        with pytest.raises(IoBridgeError) as gone:
            await client.get_thread("t-crud")
        assert (await client.list_threads()).threads == []
    assert (taken.value.status, taken.value.code) == (409, "THREAD_EXISTS")
    assert (gone.value.status, gone.value.code) == (404, "THREAD_NOT_FOUND")


async def test_an_id_with_a_slash_never_reaches_another_route(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        await client.create_thread("x")
        with pytest.raises(IoBridgeError) as error:
            await client.delete_thread("x/messages")  # not DELETE /threads/x/messages
        assert (await client.get_thread("x")).id == "x"
    assert (error.value.status, error.value.code) == (404, "NOT_FOUND")


async def test_agents_list_and_get(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        agents = await client.list_agents()
        demo = await client.get_agent("demo")
        with pytest.raises(IoBridgeError) as unknown:
            await client.get_agent("nope")
    assert [a.id for a in agents] == ["demo"]
    assert demo.status == "available"
    assert {t.name for t in demo.tools} == {"current_time", "calculate"}
    assert (unknown.value.status, unknown.value.code) == (404, "AGENT_NOT_FOUND")


async def test_errors_before_the_stream_raise_with_status_code_and_message(serve: Any) -> None:
    key = "k-" + uuid.uuid4().hex
    auth = AuthSettings(mode="api-key", api_keys=[
        ApiKeyEntry(sha256=hashlib.sha256(key.encode()).hexdigest(), principal="alice")])
    server = serve(auth=auth)
    async with IoBridgeClient(server.url) as anonymous:
        with pytest.raises(IoBridgeError) as refused:
            async for _ in anonymous.run("hi", thread_id="t-auth"):
                pass
        with pytest.raises(IoBridgeError) as refused_rest:
            await anonymous.list_threads()
    async with IoBridgeClient(server.url, api_key=key) as client:
        with pytest.raises(IoBridgeError) as bad_agent:
            async for _ in client.run("hi", thread_id="t-auth", agent_id="nope"):
                pass
        events = [e async for e in client.run("hi", thread_id="t-auth")]
        with pytest.raises(IoBridgeError) as bad_cursor:
            async for _ in client.resume("whatever", after=1):
                pass
    for error in (refused.value, refused_rest.value):
        assert (error.status, error.code) == (401, "UNAUTHORIZED")
    assert (bad_agent.value.status, bad_agent.value.code) == (404, "AGENT_NOT_FOUND")
    assert "nope" in bad_agent.value.message
    assert bad_cursor.value.status == 404
    assert isinstance(events[-1], RunFinishedEvent)
    assert not any(isinstance(e, RunErrorEvent) for e in events)


async def test_a_busy_thread_is_a_conflict(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url) as client:
        first = client.run("get_weather", thread_id="t-busy", tools=[WEATHER])
        async for event in first:
            if isinstance(event, ToolCallEndEvent):
                with pytest.raises(IoBridgeError) as busy:
                    async for _ in client.run("again", thread_id="t-busy"):
                        pass
                await client.tool_result(first.run_id, event.tool_call_id, "ok")
    assert (busy.value.status, busy.value.code) == (409, "THREAD_BUSY")


async def test_an_event_over_max_event_bytes_stops_the_stream(serve: Any) -> None:
    server = serve()
    async with IoBridgeClient(server.url, max_event_bytes=300) as client:
        with pytest.raises(IoBridgeError) as error:
            # MESSAGES_SNAPSHOT carries the whole message: one event over the limit.
            big = client.run("x" * 1000, thread_id="t-big", forwarded_props={
                "messagesSnapshot": True})
            async for _ in big:
                pass
    assert (error.value.status, error.value.code) == (0, "EVENT_TOO_LARGE")


async def test_an_unreachable_server_is_a_connection_error() -> None:
    async with IoBridgeClient("http://127.0.0.1:9") as client:
        with pytest.raises(IoBridgeError) as error:
            await client.list_agents()
    assert (error.value.status, error.value.code) == (0, "CONNECTION_FAILED")


def test_the_example_in_docs_client_md_runs(serve: Any, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    server = serve()
    page = (Path(__file__).parents[2] / "docs" / "client.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert "http://127.0.0.1:8000" in code
    exec(compile(code.replace("http://127.0.0.1:8000", server.url), "client.md", "exec"), {})
    assert 'The tool get_weather returned {"sky":"clear"}.' in capsys.readouterr().out


async def test_the_prefix_is_configurable(serve: Any) -> None:
    server = serve(prefix="/custom")
    async with IoBridgeClient(server.url, prefix="/custom/") as client:
        assert [a.id for a in await client.list_agents()] == ["demo"]
    async with IoBridgeClient(server.url) as client:
        with pytest.raises(IoBridgeError) as error:
            await client.list_agents()
    assert (error.value.status, error.value.code) == (404, "NOT_FOUND")
