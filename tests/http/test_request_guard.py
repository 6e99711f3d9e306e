"""``RequestGuard`` as any ASGI server drives it: the head it measures (target, query and
every header line at the byte), the Host it needs, the JSON it requires of a body, the
``%2F`` it refuses, and what each refusal says. Requests it lets through reach the app."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iobridge.http.guards import RequestGuard


async def _answer(
    headers: list[tuple[bytes, bytes]], *, method: str = "GET", raw_path: bytes | None = b"/x",
    query: bytes = b"", max_headers: int = 10, max_header_bytes: int = 1000,
) -> tuple[int, Any]:
    """The guard's status and JSON body, or ``(200, "app")`` when the app got the request."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'"app"'})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": method, "path": "/x", "headers": headers,
                             "query_string": query}
    if raw_path is not None:
        scope["raw_path"] = raw_path
    guard = RequestGuard(app, allowed_hosts=["example.test", "::1"], max_headers=max_headers,
                         max_header_bytes=max_header_bytes)
    await guard(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


HOST = (b"host", b"example.test")


def _size(headers: list[tuple[bytes, bytes]], raw_path: bytes, query: bytes) -> int:
    """The guard's measure of a head: target and query, each header line with its ``: ``
    and CRLF."""
    return len(raw_path) + len(query) + sum(len(n) + len(v) + 4 for n, v in headers)


@pytest.mark.parametrize("raw_path", [b"/a/long/target", None], ids=["target", "no-raw-path"])
async def test_the_head_is_measured_to_the_byte(raw_path: bytes | None) -> None:
    headers = [HOST, (b"x-pad", b"p" * 50), (b"x-other", b"o" * 10)]
    query = b"q=1&r=2"
    size = _size(headers, raw_path or b"", query)
    at_limit = await _answer(headers, raw_path=raw_path, query=query, max_header_bytes=size)
    assert at_limit == (200, "app")
    over = await _answer(headers, raw_path=raw_path, query=query, max_header_bytes=size - 1)
    assert over == (431, {"error": {"code": "HEADERS_TOO_LARGE",
                                    "message": "the request headers are too large"}})


async def test_too_many_headers_says_how_many_are_allowed() -> None:
    headers = [HOST, (b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert await _answer(headers, max_headers=4) == (200, "app")
    assert await _answer(headers, max_headers=3) == (431, {"error": {
        "code": "TOO_MANY_HEADERS", "message": "a request carries at most 3 headers"}})


@pytest.mark.parametrize(
    "headers",
    [[], [(b"host", b"evil.test")], [(b"host", b"evil.test"), HOST]],
    ids=["no-host", "other-host", "first-host-counts"],
)
async def test_a_request_without_an_allowed_host_is_refused(
    headers: list[tuple[bytes, bytes]],
) -> None:
    assert await _answer(headers) == (400, {"error": {
        "code": "HOST_NOT_ALLOWED", "message": "the Host header is not allowed"}})


async def test_an_ipv6_literal_host_is_matched_without_its_port() -> None:
    assert await _answer([(b"host", b"[::1]:8000")]) == (200, "app")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
@pytest.mark.parametrize("content_type", [None, b"text/plain", b"application/jsonx"])
async def test_a_body_method_must_declare_json(method: str, content_type: bytes | None) -> None:
    headers = [HOST] + ([(b"content-type", content_type)] if content_type else [])
    assert await _answer(headers, method=method) == (415, {"error": {
        "code": "UNSUPPORTED_MEDIA_TYPE",
        "message": "the request body must be application/json"}})
    json_type = [HOST, (b"content-type", b" Application/JSON ; charset=utf-8")]
    assert await _answer(json_type, method=method) == (200, "app")


async def test_an_encoded_slash_in_the_path_is_not_found() -> None:
    assert await _answer([HOST], raw_path=b"/threads/a%2Fb") == (404, {"error": {
        "code": "NOT_FOUND", "message": "no route takes an id holding '/' (%2F in the path)"}})
    assert (await _answer([HOST], raw_path=b"/threads/a%2fb"))[0] == 404
    assert await _answer([HOST], raw_path=b"/threads/a%20b") == (200, "app")
