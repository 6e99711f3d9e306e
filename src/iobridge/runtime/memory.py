"""Thread memory for runs: what the model sees, and what a run leaves in its thread.

On start, the incoming messages are merged into the stored thread by message id (a client
may send its whole history or only the new message), and the model sees the stored thread
windowed by ``memoryOptions.lastMessages`` plus the new messages. On end, the messages the
run produced are appended. ``memoryOptions``: ``lastMessages`` (default 40), ``readOnly``
(read history, store nothing), ``generateTitle`` (title from the first user message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iobridge.errors import InputError, NotFoundError
from iobridge.store.history import model_view, new_messages, window

if TYPE_CHECKING:
    from iobridge.protocol.run_input import RunInput
    from iobridge.runtime.run import Run
    from iobridge.store.base import ThreadStore

DEFAULT_LAST_MESSAGES = 40
TITLE_LENGTH = 80


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryOptions:
    """``forwardedProps.memoryOptions``, validated."""

    last_messages: int = DEFAULT_LAST_MESSAGES
    read_only: bool = False
    generate_title: bool = False

    @classmethod
    def parse(cls, forwarded_props: dict[str, Any]) -> MemoryOptions:
        """Read the options; unknown keys are ignored.

        Raises:
            InputError: a known key has the wrong type or range.
        """
        raw = forwarded_props.get("memoryOptions")
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise InputError("forwardedProps.memoryOptions must be an object",
                             code="INVALID_FORWARDED_PROPS")
        last = raw.get("lastMessages", DEFAULT_LAST_MESSAGES)
        if last is False or last is None:
            last = DEFAULT_LAST_MESSAGES
        if type(last) is not int or last < 0:
            raise InputError("memoryOptions.lastMessages must be a non-negative integer",
                             code="INVALID_FORWARDED_PROPS")
        flags = {}
        for key in ("readOnly", "generateTitle"):
            value = raw.get(key, False)
            if not isinstance(value, bool):
                raise InputError(f"memoryOptions.{key} must be a boolean",
                                 code="INVALID_FORWARDED_PROPS")
            flags[key] = value
        return cls(last_messages=last, read_only=flags["readOnly"],
                   generate_title=flags["generateTitle"])


def title_from(messages: list[dict[str, Any]]) -> str | None:
    """A thread title from the first user message's text."""
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = " ".join(str(content or "").split())
        if not text:
            continue
        if len(text) <= TITLE_LENGTH:
            return text
        cut = text[:TITLE_LENGTH].rsplit(" ", 1)[0]
        return cut + "…"
    return None


class StoreMemory:
    """``ThreadMemory`` over a ``ThreadStore``; a threadId is never a credential."""

    def __init__(self, store: ThreadStore) -> None:
        self.store = store

    async def begin(
        self, run_input: RunInput, resource_id: str, agent_id: str
    ) -> list[dict[str, Any]]:
        """Check ownership, store the new messages, return the model's history.

        Raises:
            NotFoundError: the thread belongs to another resource (answered as missing).
            InputError: bad ``memoryOptions``.
        """
        options = MemoryOptions.parse(run_input.forwarded_props)
        thread = await self.store.get_thread(run_input.thread_id)
        if thread is not None and thread.resource_id != resource_id:
            raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
        stored = await self.store.list_messages(run_input.thread_id) if thread else []
        incoming = new_messages(stored, run_input.messages)
        if not options.read_only:
            if thread is None:
                thread, _ = await self.store.get_or_create_thread(
                    run_input.thread_id, resource_id=resource_id, agent_id=agent_id
                )
                if thread.resource_id != resource_id:  # created by someone else meanwhile
                    raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
            if incoming:
                await self.store.append_messages(run_input.thread_id, incoming)
            if options.generate_title:
                title = title_from(stored + incoming)
                if title:
                    await self.store.set_title_if_empty(run_input.thread_id, title)
        visible = window(stored, options.last_messages) + incoming
        return [dict(m) for m in model_view(visible)]

    async def end(self, run: Run, messages: list[dict[str, Any]]) -> None:
        """Append what the run produced (nothing when ``readOnly``)."""
        if not messages or MemoryOptions.parse(run.forwarded_props).read_only:
            return
        await self.store.append_messages(run.thread_id, messages)
