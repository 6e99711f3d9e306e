"""``IoBridgeClient``: the io.Intelligence Agent Protocol over HTTP, from Python (httpx).

Runs are async iterators of typed AG-UI events (``ag_ui.core``); REST answers are the
``iobridge.protocol.resources`` models; every error answer raises ``IoBridgeError``. Nothing
the server sends is read unbounded: one event is at most ``max_event_bytes``, one JSON answer
at most ``max_response_bytes``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
import pydantic
from ag_ui.core import BaseEvent, Event, RawEvent
from pydantic import BaseModel

from iobridge.client.sse import EventTooLarge, SseFrame, SseReader
from iobridge.protocol.resources import Agent, AgentList, MessagePage, Thread, ThreadPage

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "IoBridgeClient", "IoBridgeError", "RunStream"]

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_EVENTS: pydantic.TypeAdapter[BaseEvent] = pydantic.TypeAdapter(Event)
_Model = TypeVar("_Model", bound=BaseModel)


class IoBridgeError(Exception):
    """An error answer (``status``, the envelope's ``code`` and ``message``), or a client-side
    failure with ``status`` 0 (``CONNECTION_FAILED``, ``EVENT_TOO_LARGE``, ``BAD_RESPONSE``)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def parse_event(data: str) -> BaseEvent:
    """One SSE ``data`` as its ``ag_ui.core`` event; a type this version does not know (or a
    malformed one) comes back as a ``RawEvent`` holding the decoded JSON.

    Raises:
        IoBridgeError: ``data`` is not JSON (``BAD_RESPONSE``).
    """
    try:
        return _EVENTS.validate_json(data)
    except pydantic.ValidationError:
        try:
            raw = json.loads(data)
        except ValueError:
            raise IoBridgeError(0, "BAD_RESPONSE", "an event is not JSON") from None
        return RawEvent(event=raw, source="iobridge.client")


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise IoBridgeError(0, "RESPONSE_TOO_LARGE", f"the answer exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _error_from(status: int, body: bytes) -> IoBridgeError:
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
        return IoBridgeError(status, code, message, error.get("details"))
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", errors="replace")
        return IoBridgeError(status, "HTTP_ERROR", text or f"HTTP {status}")


class RunStream:
    """One run's events, as an async iterator (use ``async with`` to close it early).

    The request is sent on first iteration; an error answer before the stream raises
    ``IoBridgeError``. ``last_event_id`` is the cursor for ``IoBridgeClient.resume``; the
    iteration ends after RUN_FINISHED or RUN_ERROR (or when the server closes the stream).
    """

    def __init__(self, client: IoBridgeClient, request: httpx.Request, run_id: str) -> None:
        self._client = client
        self._request = request
        self.run_id = run_id
        self.last_event_id: str | None = None
        self.finished = False
        self._stack = AsyncExitStack()
        self._events: AsyncGenerator[BaseEvent] | None = None

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> BaseEvent:
        if self._events is None:
            self._events = self._iterate()
        return await anext(self._events)

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (the server keeps the run for a grace period: resumable)."""
        if self._events is not None:
            await self._events.aclose()
        await self._stack.aclose()

    async def _iterate(self) -> AsyncGenerator[BaseEvent]:
        client = self._client
        try:
            response = await self._stack.enter_async_context(
                _Send(client.http, self._request)
            )
        except httpx.HTTPError as exc:
            raise IoBridgeError(0, "CONNECTION_FAILED", str(exc) or type(exc).__name__) from None
        if response.status_code != 200:
            raise _error_from(
                response.status_code, await _read_limited(response, client.max_response_bytes)
            )
        reader = SseReader(client.max_event_bytes)
        try:
            async for chunk in response.aiter_bytes():
                for frame in reader.feed(chunk):
                    event = self._event(frame)
                    yield event
                    if event.type in _TERMINAL:
                        return
            for frame in reader.end():
                yield self._event(frame)
        except EventTooLarge as exc:
            raise IoBridgeError(0, "EVENT_TOO_LARGE", str(exc)) from None
        except httpx.HTTPError as exc:
            raise IoBridgeError(0, "CONNECTION_FAILED", str(exc) or type(exc).__name__) from None
        finally:
            await self._stack.aclose()


    def _event(self, frame: SseFrame) -> BaseEvent:
        event = parse_event(frame.data)
        if frame.id is not None:
            self.last_event_id = frame.id
        self.finished = event.type in _TERMINAL
        return event


class _Send:
    """``client.send(request, stream=True)`` as an async context manager."""

    def __init__(self, http: httpx.AsyncClient, request: httpx.Request) -> None:
        self.http = http
        self.request = request
        self.response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        self.response = await self.http.send(self.request, stream=True)
        return self.response

    async def __aexit__(self, *exc: object) -> None:
        if self.response is not None:
            await self.response.aclose()


class IoBridgeClient:
    """An io protocol backend at ``base_url`` (routes under ``prefix``).

    ``api_key`` is sent as ``X-API-Key``; ``headers`` go on every request (a bearer token,
    ``Authorization: Bearer ...``). Use ``async with`` (or ``aclose``) to release connections.
    """

    def __init__(
        self,
        base_url: str,
        *,
        prefix: str = "/io-bridge",
        headers: Mapping[str, str] | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        all_headers = dict(headers or {})
        if api_key is not None:
            all_headers["X-API-Key"] = api_key
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.max_event_bytes = max_event_bytes
        self.max_response_bytes = max_response_bytes
        # Reads on a stream wait for the next event (pings come every 15 s): no read timeout.
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=all_headers,
            timeout=httpx.Timeout(timeout, read=None),
            transport=transport,
        )

    async def __aenter__(self) -> IoBridgeClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- plumbing -----------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return f"{self.prefix}{path}"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int | None] | None = None,
    ) -> tuple[int, Any]:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        headers = {"Content-Type": "application/json"} if method in ("POST", "PATCH") else {}
        content = json.dumps(body).encode() if body is not None else b""
        request = self.http.build_request(
            method, self._url(path), params=query, headers=headers, content=content
        )
        try:
            response = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise IoBridgeError(0, "CONNECTION_FAILED", str(exc) or type(exc).__name__) from None
        try:
            raw = await _read_limited(response, self.max_response_bytes)
        finally:
            await response.aclose()
        if response.status_code >= 400:
            raise _error_from(response.status_code, raw)
        if not raw:
            return response.status_code, None
        try:
            return response.status_code, json.loads(raw)
        except ValueError:
            raise IoBridgeError(
                response.status_code, "BAD_RESPONSE", "the answer is not JSON"
            ) from None

    @staticmethod
    def _model(model: type[_Model], data: Any) -> _Model:
        try:
            return model.model_validate(data)
        except pydantic.ValidationError as exc:
            raise IoBridgeError(
                0, "BAD_RESPONSE", f"unexpected {model.__name__}: {exc.error_count()} problem(s)"
            ) from None

    # -- runs ---------------------------------------------------------------------------

    def run(
        self,
        messages: str | Sequence[Mapping[str, Any]],
        *,
        thread_id: str,
        run_id: str | None = None,
        agent_id: str | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        context: Sequence[Mapping[str, Any]] = (),
        forwarded_props: Mapping[str, Any] | None = None,
        state: Any = None,
    ) -> RunStream:
        """Start a run; iterate the result for its events.

        ``messages`` is the new user text (one user message) or AG-UI messages; the server
        merges them into the stored thread. ``tools`` declares frontend tools (answer them
        with ``tool_result``). ``agent_id`` goes into ``forwardedProps.agentId``.
        """
        if isinstance(messages, str):
            messages = [{"id": str(uuid.uuid4()), "role": "user", "content": messages}]
        props = dict(forwarded_props or {})
        if agent_id is not None:
            props["agentId"] = agent_id
        run_id = run_id or str(uuid.uuid4())
        body: dict[str, Any] = {
            "threadId": thread_id,
            "runId": run_id,
            "messages": [dict(m) for m in messages],
            "tools": [dict(t) for t in tools],
            "context": [dict(c) for c in context],
            "forwardedProps": props,
        }
        if state is not None:
            body["state"] = state
        request = self.http.build_request(
            "POST",
            self._url("/run"),
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        return RunStream(self, request, run_id)

    def resume(self, run_id: str, after: str | int | None = None) -> RunStream:
        """The run's events after event id ``after`` (all retained ones when ``None``), then
        the live ones."""
        headers = {"Accept": "text/event-stream"}
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        request = self.http.build_request(
            "GET", self._url(f"/runs/{_segment(run_id)}/events"), headers=headers
        )
        return RunStream(self, request, run_id)

    async def tool_result(
        self,
        run_id: str,
        tool_call_id: str,
        result: Any = None,
        *,
        is_error: bool = False,
        error: str | None = None,
    ) -> None:
        """Answer a frontend tool call of a live run: ``result`` (text or any JSON value), or
        ``error`` (a failed tool)."""
        body: dict[str, Any] = {}
        if isinstance(result, str):
            body["content"] = result
        elif result is not None or error is None:
            body["result"] = result
        if error is not None:
            body["error"] = error
        if is_error:
            body["isError"] = True
        path = f"/runs/{_segment(run_id)}/tool-calls/{_segment(tool_call_id)}/result"
        await self._call("POST", path, body=body)

    async def cancel(self, run_id: str) -> Literal["cancelling", "ended"]:
        """Stop a run: ``cancelling`` if it was live, ``ended`` if it had already ended."""
        _, data = await self._call("POST", f"/runs/{_segment(run_id)}/cancel")
        status = data.get("status") if isinstance(data, dict) else None
        return "cancelling" if status == "cancelling" else "ended"

    # -- threads ------------------------------------------------------------------------

    async def create_thread(
        self,
        thread_id: str | None = None,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        resource_id: str | None = None,
        agent_id: str | None = None,
    ) -> Thread:
        body = {
            key: value
            for key, value in (
                ("id", thread_id), ("title", title), ("resourceId", resource_id),
                ("agentId", agent_id), ("metadata", dict(metadata) if metadata else None),
            )
            if value is not None
        }
        return self._model(Thread, (await self._call("POST", "/threads", body=body))[1])

    async def list_threads(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        resource_id: str | None = None,
        agent_id: str | None = None,
    ) -> ThreadPage:
        params = {"limit": limit, "cursor": cursor, "resourceId": resource_id, "agentId": agent_id}
        return self._model(ThreadPage, (await self._call("GET", "/threads", params=params))[1])

    async def get_thread(self, thread_id: str) -> Thread:
        return self._model(Thread, (await self._call("GET", f"/threads/{_segment(thread_id)}"))[1])

    async def rename_thread(self, thread_id: str, title: str) -> Thread:
        path = f"/threads/{_segment(thread_id)}"
        return self._model(Thread, (await self._call("PATCH", path, body={"title": title}))[1])

    async def update_thread(self, thread_id: str, *, metadata: Mapping[str, Any]) -> Thread:
        """Replace the thread's metadata (not merged)."""
        path = f"/threads/{_segment(thread_id)}"
        body = {"metadata": dict(metadata)}
        return self._model(Thread, (await self._call("PATCH", path, body=body))[1])

    async def delete_thread(self, thread_id: str) -> None:
        await self._call("DELETE", f"/threads/{_segment(thread_id)}")

    async def messages(
        self,
        thread_id: str,
        *,
        format: Literal["mastra", "agui"] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> MessagePage:
        """A page of the thread's messages, oldest first (``format``: the server's default)."""
        params = {"format": format, "limit": limit, "cursor": cursor}
        path = f"/threads/{_segment(thread_id)}/messages"
        return self._model(MessagePage, (await self._call("GET", path, params=params))[1])

    # -- agents -------------------------------------------------------------------------

    async def list_agents(self) -> list[Agent]:
        return self._model(AgentList, (await self._call("GET", "/agents"))[1]).agents

    async def get_agent(self, agent_id: str) -> Agent:
        return self._model(Agent, (await self._call("GET", f"/agents/{_segment(agent_id)}"))[1])


def _segment(value: str) -> str:
    """``value`` as one URL path segment (a ``/`` in an id must not reach another route)."""
    return quote(value, safe="")
