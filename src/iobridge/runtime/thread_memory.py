"""Thread memory for runs: what the model sees, and what a run leaves in its thread.

On start, the incoming messages are merged into the stored thread by message id (a client
may send its whole history or only the new message), and the model sees the stored thread
windowed by ``memoryOptions.lastMessages`` plus the new messages. On end, the messages the
run produced are appended. ``memoryOptions``: ``lastMessages`` (default 40), ``readOnly``
(read history, store nothing), ``generateTitle`` (title from the first user message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from iobridge.errors import NotFoundError
from iobridge.protocol.messages import model_view, new_messages, window

if TYPE_CHECKING:
    from iobridge.protocol.options import RunOptions
    from iobridge.protocol.run_input import RunInput
    from iobridge.store.base import ThreadStore

TITLE_LENGTH = 80


class ThreadMemory(Protocol):
    """Persistence hooks of the run engine; without one the engine is stateless."""

    async def begin(
        self, run_input: RunInput, options: RunOptions, resource_id: str, agent_id: str
    ) -> list[dict[str, Any]]:
        """Check ownership, store the new messages, return the history the model sees."""
        ...

    async def end(
        self, thread_id: str, options: RunOptions, messages: list[dict[str, Any]]
    ) -> None:
        """Store the messages the run produced."""
        ...


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
        self, run_input: RunInput, options: RunOptions, resource_id: str, agent_id: str
    ) -> list[dict[str, Any]]:
        """Check ownership, store the new messages, return the model's history.

        Raises:
            NotFoundError: the thread belongs to another resource (answered as missing).
        """
        memory = options.memory
        thread = await self.store.get_thread(run_input.thread_id)
        if thread is not None and thread.resource_id != resource_id:
            raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
        stored = await self.store.list_messages(run_input.thread_id) if thread else []
        incoming = new_messages(stored, run_input.messages)
        if not memory.read_only:
            if thread is None:
                thread, _ = await self.store.get_or_create_thread(
                    run_input.thread_id, resource_id=resource_id, agent_id=agent_id
                )
                if thread.resource_id != resource_id:  # created by someone else meanwhile
                    raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
            if incoming:
                await self.store.append_messages(run_input.thread_id, incoming)
            if memory.generate_title:
                title = title_from(stored + incoming)
                if title:
                    await self.store.set_title_if_empty(run_input.thread_id, title)
        visible = window(stored, memory.last_messages) + incoming
        return [dict(m) for m in model_view(visible)]

    async def end(
        self, thread_id: str, options: RunOptions, messages: list[dict[str, Any]]
    ) -> None:
        """Append what the run produced (nothing when ``readOnly``)."""
        if messages and not options.memory.read_only:
            await self.store.append_messages(thread_id, messages)
