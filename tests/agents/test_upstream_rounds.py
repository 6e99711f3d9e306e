"""One upstream run's events as the client sees them, over real HTTP: messages switched without
their end events, the legacy THINKING family, empty or malformed steps, state and custom
events, streamed tool-call chunks, what a follow-up upstream run is sent, and the bound on
what one upstream run may make the server keep."""

from __future__ import annotations

from typing import Any

import pytest
from tests.agents.test_upstream import (
    RUN_FINISHED,
    call_events,
    kinds,
    run,
    text,
    text_events,
)
from tests.agents.upstream_apps import WEATHER, Script, frames, scripted_upstream
from tests.helpers import run_body

from iobridge.agents.upstream import AgUiUpstreamAgent


def agent(url: str) -> AgUiUpstreamAgent:
    return AgUiUpstreamAgent(url, id="up")


async def events_of(serve: Any, *upstream_events: dict[str, Any], **settings: Any) -> list[
    dict[str, Any]
]:
    """The client's events of one run whose upstream sends ``upstream_events``."""
    with scripted_upstream(Script(chunks=frames(*upstream_events))) as upstream:
        server = serve(agents=[agent(upstream.url)], **settings)
        return await run(server, run_body("go", agentId="up"))


def messages_of(events: list[dict[str, Any]], prefix: str) -> list[str]:
    """The content of each message of a kind (``TEXT`` or ``REASONING``), in order."""
    contents: dict[str, str] = {}
    for event in events:
        if event["type"] == f"{prefix}_MESSAGE_CONTENT":
            contents[event["messageId"]] = contents.get(event["messageId"], "") + event["delta"]
    return list(contents.values())


async def test_a_new_text_message_id_closes_the_open_message(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "one"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "two"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "!"},
        RUN_FINISHED,
    )
    assert messages_of(events, "TEXT") == ["one", "two!"]
    assert kinds(events).count("TEXT_MESSAGE_END") == 2


async def test_content_for_a_text_message_the_upstream_ended_is_dropped(serve: Any) -> None:
    events = await events_of(
        serve, *text_events("m1", "kept"),
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": " late"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        *text_events("m2", " more"), RUN_FINISHED,
    )
    assert messages_of(events, "TEXT") == ["kept", " more"]


async def test_a_text_end_for_another_message_leaves_the_open_one_open(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "a"},
        {"type": "TEXT_MESSAGE_END", "messageId": "other"},
        {"type": "TEXT_MESSAGE_END", "messageId": 7},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "b"},
        RUN_FINISHED,
    )
    assert messages_of(events, "TEXT") == ["ab"]


async def test_text_chunks_without_an_id_continue_the_open_message(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "x"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "y"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m9", "delta": "z"},
        RUN_FINISHED,
    )
    assert messages_of(events, "TEXT") == ["xy", "z"]


async def test_legacy_thinking_events_are_reasoning(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "THINKING_START"},
        {"type": "THINKING_TEXT_MESSAGE_START"},
        {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "hmm"},
        {"type": "THINKING_TEXT_MESSAGE_END"},
        {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "again"},
        {"type": "THINKING_END"},
        *text_events("m", "answer"), RUN_FINISHED,
    )
    assert messages_of(events, "REASONING") == ["hmm", "again"]
    assert text(events) == "answer"
    order = kinds(events)
    assert order.count("REASONING_MESSAGE_END") == 2
    assert order.index("REASONING_END") < order.index("TEXT_MESSAGE_START")


async def test_a_new_reasoning_message_id_closes_the_open_one(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "first"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r2", "delta": "second"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r2", "delta": ""},
        {"type": "REASONING_MESSAGE_CHUNK", "delta": "!"},
        RUN_FINISHED,
    )
    assert messages_of(events, "REASONING") == ["first", "second!"]
    assert kinds(events).count("REASONING_MESSAGE_START") == 2


async def test_steps_state_deltas_and_custom_events_without_their_key_are_dropped(
    serve: Any,
) -> None:
    patch = [{"op": "add", "path": "/n", "value": 1}]
    events = await events_of(
        serve,
        {"type": "STATE_SNAPSHOT", "snapshot": {}},
        {"type": "STEP_STARTED", "stepName": ""},
        {"type": "STEP_STARTED"},
        {"type": "STEP_STARTED", "stepName": "plan"},
        {"type": "STEP_FINISHED", "stepName": ""},
        {"type": "STEP_FINISHED", "stepName": 3},
        {"type": "STEP_FINISHED", "stepName": "plan"},
        {"type": "STATE_DELTA", "delta": {"op": "add"}},
        {"type": "STATE_DELTA", "delta": patch},
        {"type": "CUSTOM", "name": "", "value": 1},
        {"type": "CUSTOM", "value": 2},
        {"type": "CUSTOM", "name": "tick", "value": 3},
        RUN_FINISHED,
    )
    assert [e for e in events if e["type"] not in ("RUN_STARTED", "RUN_FINISHED")] == [
        {"type": "STATE_SNAPSHOT", "snapshot": {}},
        {"type": "STEP_STARTED", "stepName": "plan"},
        {"type": "STEP_FINISHED", "stepName": "plan"},
        {"type": "STATE_DELTA", "delta": patch},
        {"type": "CUSTOM", "name": "tick", "value": 3},
    ]


async def test_a_raw_event_passes_without_its_metadata(serve: Any) -> None:
    events = await events_of(
        serve, {"type": "RAW", "event": {"x": 1}, "source": "s", "metadata": {"m": 1}},
        RUN_FINISHED,
    )
    [raw] = [e for e in events if e["type"] == "RAW"]
    assert raw["event"] == {"x": 1} and raw["source"] == "s"


async def test_a_tool_call_chunk_of_a_new_call_ends_the_streaming_one(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f", "delta": '{"a":'},
        {"type": "TOOL_CALL_CHUNK", "delta": "1}"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "g", "delta": "{}"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c2", "messageId": "r", "content": "done"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c3", "toolCallName": "h"},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c3", "messageId": "r3", "content": "ok"},
        RUN_FINISHED,
    )
    calls = [(e["type"], e["toolCallId"]) for e in events if e["type"].startswith("TOOL_CALL")]
    assert calls == [
        ("TOOL_CALL_START", "c1"), ("TOOL_CALL_ARGS", "c1"), ("TOOL_CALL_ARGS", "c1"),
        ("TOOL_CALL_END", "c1"),
        ("TOOL_CALL_START", "c2"), ("TOOL_CALL_ARGS", "c2"), ("TOOL_CALL_END", "c2"),
        ("TOOL_CALL_RESULT", "c2"),
        ("TOOL_CALL_START", "c3"), ("TOOL_CALL_ARGS", "c3"), ("TOOL_CALL_END", "c3"),
        ("TOOL_CALL_RESULT", "c3"),
    ]
    assert "".join(e["delta"] for e in events if e.get("toolCallId") == "c1"
                   and e["type"] == "TOOL_CALL_ARGS") == '{"a":1}'


async def test_tool_calls_without_an_id_or_name_are_not_announced(serve: Any) -> None:
    events = await events_of(
        serve,
        {"type": "TOOL_CALL_START", "toolCallId": "", "toolCallName": "f"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": ""},
        {"type": "TOOL_CALL_START", "toolCallId": 5, "toolCallName": "f"},
        {"type": "TOOL_CALL_START", "toolCallId": "c2"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c3", "delta": "{}"},
        *text_events("m", "no calls"), RUN_FINISHED,
    )
    assert not any(e["type"].startswith("TOOL_CALL") for e in events)
    assert text(events) == "no calls"


async def test_arguments_after_a_call_ended_are_dropped(serve: Any) -> None:
    events = await events_of(
        serve, *call_events("c1", "f", '{"a":1}'),
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "xx"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": 5},
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "r", "content": "ok"},
        RUN_FINISHED,
    )
    assert [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"] == ['{"a":1}']


async def test_a_follow_up_run_gets_the_rounds_messages_in_the_upstreams_ids(
    serve: Any,
) -> None:
    """The text, the client call with its posted answer, the answered server call with its
    result, the text after it; a call without arguments has ``{}``, and the server calls the
    upstream never answered are left out (an unpaired call is refused by model providers)."""
    def script(body: dict[str, Any]) -> list[bytes]:
        if body["messages"][-1]["role"] == "tool":
            return frames(*text_events("m3", "done"), RUN_FINISHED)
        return frames(
            *text_events("m1", "Checking. "),
            {"type": "TOOL_CALL_START", "toolCallId": "w1", "toolCallName": "get_weather"},
            {"type": "TOOL_CALL_END", "toolCallId": "w1"},
            *call_events("s2", "unanswered", "{}"),
            *call_events("s1", "lookup", '{"q":1}'),
            {"type": "TOOL_CALL_RESULT", "toolCallId": "s1", "messageId": "r1",
             "content": [{"type": "text", "text": "found"}]},
            *text_events("m2", "Still here. "),
            *call_events("s3", "unanswered", "{}"),
            RUN_FINISHED,
        )

    with scripted_upstream(Script(chunks=script)) as upstream:
        server = serve(agents=[agent(upstream.url)])
        events = await run(server, run_body("go", tools=[WEATHER], agentId="up"),
                           results={"get_weather": {"sky": "clear"}})
    assert text(events) == "Checking. Still here. done"
    first, follow_up = upstream.bodies
    assert follow_up["parentRunId"] == first["runId"] == "r1"
    assert follow_up["runId"] != "r1"
    added = follow_up["messages"][len(first["messages"]):]
    assert [m["role"] for m in added] == ["assistant", "tool", "assistant", "tool"]
    assert added[0]["content"] == "Checking. "
    assert added[0]["toolCalls"] == [
        {"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "s1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":1}'}},
    ]
    assert (added[1]["toolCallId"], added[1]["content"]) == (
        "s1", [{"type": "text", "text": "found"}])
    assert added[2]["content"] == "Still here. " and "toolCalls" not in added[2]
    assert (added[3]["toolCallId"], added[3]["content"]) == ("w1", '{"sky":"clear"}')


async def test_upstream_usage_entries_that_are_not_objects_or_labels_are_ignored(
    serve: Any,
) -> None:
    events = await events_of(
        serve, *text_events("m", "ok"),
        {**RUN_FINISHED, "usage": [3, {"provider": 5, "model": ["x"], "inputTokens": 2},
                                   {"provider": "p", "model": "m", "outputTokens": 1}]},
    )
    assert events[-1]["usage"] == [{"inputTokens": 2},
                                   {"provider": "p", "model": "m", "outputTokens": 1}]


async def test_upstream_usage_that_is_not_a_list_is_ignored(serve: Any) -> None:
    events = await events_of(serve, *text_events("m", "ok"),
                             {**RUN_FINISHED, "usage": {"inputTokens": 2}})
    assert "usage" not in events[-1]


async def test_an_outcome_other_than_interrupt_or_cancelled_is_an_ordinary_finish(
    serve: Any,
) -> None:
    events = await events_of(serve, *text_events("m", "ok"),
                             {**RUN_FINISHED, "outcome": {"type": "success"}})
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


async def test_encrypted_values_without_a_value_or_a_known_owner_are_dropped(
    serve: Any,
) -> None:
    events = await events_of(
        serve,
        {"type": "REASONING_MESSAGE_START", "messageId": "rm", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm", "delta": "hmm"},
        {"type": "REASONING_MESSAGE_END", "messageId": "rm"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "rm",
         "encryptedValue": ""},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": 1,
         "encryptedValue": "v"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "rm",
         "encryptedValue": "v"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "c1",
         "encryptedValue": "v"},
        *call_events("c1", "t", "{}"),
        {"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c1", "content": "1"},
        RUN_FINISHED,
    )
    assert "REASONING_ENCRYPTED_VALUE" not in kinds(events)


# -- what one upstream run may make the server keep ------------------------------------------

#: The smallest ``max_upstream_round_bytes`` the server accepts.
ROUND_BYTES = 1024
#: What the one assistant message of a text-only round costs besides its text.
MESSAGE_COST = 64


async def test_text_up_to_the_round_limit_is_kept(serve: Any) -> None:
    delta = "x" * (ROUND_BYTES - MESSAGE_COST)
    events = await events_of(serve, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m",
                                     "delta": delta}, RUN_FINISHED,
                             max_upstream_round_bytes=ROUND_BYTES)
    assert text(events) == delta and events[-1]["type"] == "RUN_FINISHED"


async def test_one_byte_past_the_round_limit_ends_the_run(serve: Any) -> None:
    delta = "x" * (ROUND_BYTES - MESSAGE_COST + 1)
    events = await events_of(serve, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m",
                                     "delta": delta}, RUN_FINISHED,
                             max_upstream_round_bytes=ROUND_BYTES)
    assert events[-1] == {
        "type": "RUN_ERROR", "code": "UPSTREAM_TOO_LARGE",
        "message": "The upstream agent sent more than this server keeps for one run.",
    }


@pytest.mark.parametrize(("result_bytes", "finished"), [(469, True), (470, False)])
async def test_each_ended_message_and_call_counts_against_the_round_limit(
    serve: Any, result_bytes: int, finished: bool
) -> None:
    """A message id, a call's id and name, and a result each cost their text and an entry:
    with a result of 469 bytes the round keeps exactly the limit."""
    events = await events_of(
        serve,
        *text_events("m", "x" * 100),  # 100 + 64 (its message) + 1 + 64 (its id): 229
        *call_events("c", "f", "{}"),  # 2 + 128 (the call) + 2 (arguments): 361
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "r",
         "content": "y" * result_bytes},  # 469 + 64: 894
        *text_events("n", "z"),  # 1 + 64 (a new message) + 1 + 64 (its id): 1024
        RUN_FINISHED, max_upstream_round_bytes=ROUND_BYTES,
    )
    assert (events[-1]["type"] == "RUN_FINISHED") is finished
    assert (events[-1].get("code") == "UPSTREAM_TOO_LARGE") is not finished


async def test_a_result_list_that_is_not_content_parts_is_json_text(serve: Any) -> None:
    events = await events_of(
        serve, *call_events("c1", "f", "{}"),
        {"type": "TOOL_CALL_RESULT", "toolCallId": "c1", "messageId": "r",
         "content": [{"type": "text"}, 3]},
        RUN_FINISHED,
    )
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == '[{"type":"text"},3]'


async def test_the_usage_of_an_upstream_run_that_failed_is_on_the_run_error(serve: Any) -> None:
    usage = [{"provider": "p", "model": "m", "inputTokens": 5}]
    events = await events_of(serve, *text_events("m", "part"),
                             {"type": "RUN_ERROR", "message": "boom", "usage": usage})
    assert events[-1]["code"] == "UPSTREAM_RUN_ERROR"
    assert events[-1]["usage"] == usage
