"""Multimodal input end to end over real HTTP: AG-UI 1.0 media parts reach an OpenAI-compatible
server as its own content types, come back in both history formats, and the limits refuse
what they must before anything is stored."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import FakeOpenAI, calls, text
from tests.helpers import parse_sse

from agui_verify import verify_events
from iobridge.agents.definitions import load_agents

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x01" * 32
PDF = b"%PDF-1.7\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 24


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def inline(kind: str, data: bytes, mime: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "data", "value": b64(data), "mimeType": mime},
            **extra}


IMAGE = inline("image", PNG, "image/png")
IMAGE_URL = {"type": "image", "source": {"type": "url", "value": "https://cdn.test/cat.png",
                                         "mimeType": "image/png"}}
DOCUMENT = inline("document", PDF, "application/pdf", metadata={"filename": "q3.pdf"})
AUDIO = inline("audio", WAV, "audio/wav")


def agent(fake: FakeOpenAI, model: str = "gpt-4o-audio-preview", **extra: Any) -> Any:
    [built], errors = load_agents([{"id": "vision", "model": f"openai:{model}",
                                    "base_url": fake.base_url, **extra}])
    assert not errors
    return built


def body(thread: str, run: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": messages, "tools": [], "context": [],
            "forwardedProps": {"agentId": "vision"}}


def user(message_id: str, *parts: dict[str, Any], say: str = "what is this?") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": [{"type": "text", "text": say}, *parts]}


async def post(server: Any, payload: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        return await client.post("/io-bridge/run", json=payload)


async def history(server: Any, thread: str, fmt: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.get(f"/io-bridge/threads/{thread}/messages",
                                    params={"format": fmt})
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


async def test_image_pdf_and_audio_reach_the_model_as_its_content_types(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(text("A cat, a report and a beep."))
    server = serve(agents=[agent(fake_openai)])
    message = user("u1", IMAGE, IMAGE_URL, DOCUMENT, AUDIO)
    response = await post(server, body("t-media", "r1", [message]))
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    verify_events(events, thread_id="t-media", run_id="r1")
    assert events[-1]["type"] == "RUN_FINISHED"

    [request] = fake_openai.requests
    sent = next(m for m in request["messages"] if m["role"] == "user")["content"]
    assert sent == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
        {"type": "image_url", "image_url": {"url": "https://cdn.test/cat.png"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{b64(PDF)}",
                                  "filename": "filename.pdf"}},
        {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
    ]

    # AG-UI history: the message exactly as the client sent it.
    stored = await history(server, "t-media", "agui")
    assert stored[0] == message
    # Mastra history: each media part as the file part Mastra stores (exact shapes).
    mastra = await history(server, "t-media", "mastra")
    assert mastra[0]["content"]["parts"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": f"data:image/png;base64,{b64(PNG)}"},
        {"type": "file", "mimeType": "image/png", "mediaType": "image/png",
         "data": "https://cdn.test/cat.png", "url": "https://cdn.test/cat.png"},
        {"type": "file", "mimeType": "application/pdf", "mediaType": "application/pdf",
         "data": f"data:application/pdf;base64,{b64(PDF)}", "filename": "q3.pdf"},
        {"type": "file", "mimeType": "audio/wav", "mediaType": "audio/wav",
         "data": f"data:audio/wav;base64,{b64(WAV)}"},
    ]
    assert mastra[0]["content"]["content"] == "what is this?"
    assert mastra[1]["content"]["parts"] == [{"type": "text",
                                              "text": "A cat, a report and a beep."}]


async def test_a_provider_file_handle_reaches_only_its_provider(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(text("read it"))
    server = serve(agents=[agent(fake_openai)])
    mine = {"type": "document", "source": {"type": "file", "value": "file-abc",
                                           "provider": "openai"}}
    theirs = {"type": "document", "source": {"type": "file", "value": "files/xyz",
                                             "provider": "google"}}
    response = await post(server, body("t-file", "r1", [user("u1", mine, theirs)]))
    assert response.status_code == 200, response.text
    [request] = fake_openai.requests
    sent = next(m for m in request["messages"] if m["role"] == "user")["content"]
    assert sent == [
        {"type": "text", "text": "what is this?"},
        {"type": "file", "file": {"file_id": "file-abc"}},
        {"type": "text", "text": "[document attachment not available to the model]"},
    ]


def stored_copies(tmp_path: Path, marker: str) -> int:
    """Rows of the thread store holding ``marker`` (the SQLite file of ``serve``)."""
    with sqlite3.connect(tmp_path / "iobridge.db") as db:
        (count,) = db.execute("SELECT count(*) FROM iobridge_messages WHERE data LIKE ?",
                              (f"%{marker}%",)).fetchone()
    return int(count)


async def test_a_whole_history_client_stores_its_image_once(
    fake_openai: FakeOpenAI, serve: Any, tmp_path: Path
) -> None:
    fake_openai.push(text("one"), text("two"), text("three"))
    server = serve(agents=[agent(fake_openai)])
    big = inline("image", b"\x89PNG" + bytes(range(256)) * 2000, "image/png")
    marker = big["source"]["value"][1000:1040]
    sent: list[dict[str, Any]] = [user("u1", big)]
    for run in ("r1", "r2", "r3"):
        response = await post(server, body("t-once", run, sent))
        events = parse_sse(response.text)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        reply = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")["messageId"]
        answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        # The stock @ag-ui/client way: the whole history again, plus the next message.
        sent = [*sent, {"id": reply, "role": "assistant", "content": answer},
                {"id": f"u-{run}", "role": "user", "content": "and now?"}]
        assert stored_copies(tmp_path, marker) == 1
    stored = await history(server, "t-once", "agui")
    assert [m["id"] for m in stored].count("u1") == 1
    # Every model request got the image (it is the history), the store kept one copy, and
    # the run logs kept for resume hold none (RUN_STARTED does not echo the input).
    assert all(marker in str(r["messages"]) for r in fake_openai.requests)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        replay = await client.get("/io-bridge/runs/r2/events")
    assert replay.status_code == 200 and marker not in replay.text


async def refused(server: Any, payload: dict[str, Any], status: int) -> dict[str, Any]:
    response = await post(server, payload)
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        # Nothing was stored: the thread the run named does not exist.
        assert (await client.get(f"/io-bridge/threads/{payload['threadId']}")).status_code == 404
    return error


async def test_media_limits_answer_413_at_one_byte_over_and_store_nothing(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(text("fits"), text("fits too"))
    server = serve(agents=[agent(fake_openai)], max_media_part_bytes=1000,
                   max_media_message_bytes=1500)
    at_limit = inline("image", b"x" * 1000, "image/png")
    response = await post(server, body("t-fits", "r1", [user("u1", at_limit)]))
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"

    error = await refused(server, body("t-big", "r2", [user("u1", inline(
        "image", b"x" * 1001, "image/png"))]), 413)
    assert error["code"] == "MEDIA_TOO_LARGE"
    assert error["details"] == {"loc": ["messages", 0, "content", 1], "bytes": 1001,
                                "limit": 1000}

    two = [inline("image", b"x" * 750, "image/png"), inline("image", b"y" * 750, "image/png")]
    response = await post(server, body("t-fits2", "r3", [user("u1", *two)]))
    assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    error = await refused(server, body("t-big2", "r4", [user("u1", *two, inline(
        "image", b"z", "image/png"))]), 413)
    assert error["details"] == {"loc": ["messages", 0], "bytes": 1501, "limit": 1500}
    assert len(fake_openai.requests) == 2  # the refused runs never reached the model


async def test_media_the_model_does_not_take_is_400_naming_what_it_takes(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    server = serve(agents=[agent(fake_openai, model="gpt-4o")])
    error = await refused(server, body("t-audio", "r1", [user("u1", IMAGE, AUDIO)]), 400)
    assert error["code"] == "UNSUPPORTED_MEDIA"
    assert error["message"] == (
        "agent 'vision' does not accept audio input (messages[0].content[2]); it accepts: "
        "image, pdf, file"
    )
    assert error["details"]["accepted"] == ["image", "pdf", "file"]
    demo = dict(body("t-demo", "r2", [user("u1", IMAGE)]), forwardedProps={"agentId": "demo"})
    error = await refused(server, demo, 400)
    assert "agent 'demo' does not accept image input" in error["message"]
    assert "it accepts: text only" in error["message"]
    assert fake_openai.requests == []


@pytest.mark.parametrize("part", [
    {"type": "image", "source": {"type": "data", "value": "%%%", "mimeType": "image/png"}},
    {"type": "image", "source": {"type": "data", "value": "aGk="}},
    {"type": "audio"},
])
async def test_malformed_media_is_400_and_stores_nothing(
    fake_openai: FakeOpenAI, serve: Any, part: dict[str, Any]
) -> None:
    server = serve(agents=[agent(fake_openai)])
    error = await refused(server, body("t-bad", "r1", [user("u1", part)]), 400)
    assert error["code"] == "INVALID_REQUEST"
    assert error["details"][0]["loc"][:4] == ["messages", 0, "content", 1]


SCREENSHOT = {"name": "screenshot", "description": "Capture the user's screen (browser).",
              "parameters": {"type": "object", "properties": {}}}
SHOT_PARTS = [{"type": "text", "text": "the screen"}, IMAGE]


#: What answers a frontend call while the run streams: a result body, or posts of one's own
#: to the call's result URL.
Answer = dict[str, Any] | Callable[[httpx.AsyncClient, str], Awaitable[None]]


async def stream_and_answer(server: Any, payload: dict[str, Any],
                            answer: Answer) -> list[dict[str, Any]]:
    """One run whose frontend calls are answered by ``answer`` while the stream is open."""
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=20) as client,
        client.stream("POST", "/io-bridge/run", json=payload) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            events.append(event)
            if event["type"] == "TOOL_CALL_END":
                url = f"/io-bridge/runs/{payload['runId']}/tool-calls/{event['toolCallId']}/result"
                if callable(answer):
                    await answer(client, url)
                else:
                    posted = await client.post(url, json=answer)
                    assert posted.status_code == 200, posted.text
    verify_events(events, thread_id=payload["threadId"], run_id=payload["runId"])
    return events


async def test_a_frontend_tool_answers_with_content_parts(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(calls(("call_s", "screenshot", "{}")), text("I see it."))
    server = serve(agents=[agent(fake_openai, model="gpt-4o")])
    payload = {**body("t-shot", "r1", [user("u1", say="look at my screen")]),
               "tools": [SCREENSHOT]}
    events = await stream_and_answer(server, payload, {"content": SHOT_PARTS})
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == SHOT_PARTS  # carried as parts, not flattened
    assert events[-1]["type"] == "RUN_FINISHED"

    # The model got the image as its own content type (OpenAI chat takes no images in a tool
    # message: pydantic-ai sends the text there and the image in a user message after it).
    second = fake_openai.requests[1]["messages"]
    tool = next(m for m in second if m["role"] == "tool")
    assert tool["tool_call_id"] == "call_s" and "the screen" in json.dumps(tool["content"])
    image_url = f"data:image/png;base64,{b64(PNG)}"
    assert image_url in json.dumps(second[second.index(tool) + 1:])

    stored = await history(server, "t-shot", "agui")
    [tool_message] = [m for m in stored if m["role"] == "tool"]
    assert tool_message["content"] == SHOT_PARTS
    mastra = await history(server, "t-shot", "mastra")
    [invocation] = [p["toolInvocation"] for m in mastra for p in m["content"]["parts"]
                    if p["type"] == "tool-invocation"]
    assert invocation["state"] == "result" and invocation["result"] == SHOT_PARTS


async def test_a_tool_message_of_content_parts_in_the_next_run_reaches_the_model(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(calls(("call_s", "screenshot", "{}")), text("Got it."))
    server = serve(agents=[agent(fake_openai, model="gpt-4o", tool_result_mode="next-run")])
    payload = {**body("t-next", "r1", [user("u1", say="look")]), "tools": [SCREENSHOT]}
    first = parse_sse((await post(server, payload)).text)
    [call_id] = [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START"]
    assert first[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
    answer = {"id": "tm1", "role": "tool", "toolCallId": call_id, "content": SHOT_PARTS}
    second = parse_sse((await post(server, {**body("t-next", "r2", [answer]),
                                            "tools": [SCREENSHOT]})).text)
    assert second[-1]["type"] == "RUN_FINISHED"
    request = fake_openai.requests[1]["messages"]
    assert f"data:image/png;base64,{b64(PNG)}" in json.dumps(request)
    stored = await history(server, "t-next", "agui")
    assert next(m for m in stored if m["role"] == "tool")["content"] == SHOT_PARTS


async def test_malformed_tool_result_parts_are_refused_and_the_call_still_waits(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(calls(("call_s", "screenshot", "{}")), text("ok"))
    server = serve(agents=[agent(fake_openai, model="gpt-4o")])
    payload = {**body("t-badshot", "r1", [user("u1", say="look")]), "tools": [SCREENSHOT]}

    async def answer(client: httpx.AsyncClient, url: str) -> None:
        bad = await client.post(url, json={"content": [{"type": "image"}]})
        assert bad.status_code == 400
        assert bad.json()["error"]["details"][0]["loc"] == ["content", 0, "source"]
        good = await client.post(url, json={"content": "fine"})
        assert good.status_code == 200

    events = await stream_and_answer(server, payload, answer)
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["fine"]


async def test_a_posted_result_over_the_media_limits_is_413_and_the_call_still_waits(
    fake_openai: FakeOpenAI, serve: Any
) -> None:
    fake_openai.push(calls(("call_s", "screenshot", "{}")), text("ok"))
    server = serve(agents=[agent(fake_openai, model="gpt-4o")], max_media_part_bytes=1000,
                   max_media_message_bytes=1500)
    payload = {**body("t-bigshot", "r1", [user("u1", say="look")]), "tools": [SCREENSHOT]}

    async def answer(client: httpx.AsyncClient, url: str) -> None:
        over = await client.post(url, json={"content": [inline("image", b"x" * 1001, "image/png")]})
        assert over.status_code == 413, over.text
        error = over.json()["error"]
        assert error["code"] == "MEDIA_TOO_LARGE"
        assert error["details"] == {"loc": ["content", 0], "bytes": 1001, "limit": 1000}
        two = [inline("image", b"x" * 750, "image/png"), inline("image", b"y" * 751, "image/png")]
        total = await client.post(url, json={"content": two})
        assert total.status_code == 413
        assert total.json()["error"]["details"]["bytes"] == 1501
        fits = await client.post(url, json={"content": [inline("image", b"x" * 1000, "image/png")]})
        assert fits.status_code == 200, fits.text

    events = await stream_and_answer(server, payload, answer)
    results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert len(results) == 1 and events[-1]["type"] == "RUN_FINISHED"
