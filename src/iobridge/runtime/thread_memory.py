"""Thread memory for runs: what the model sees, and what a run leaves in its thread.

On start, one read tells which incoming messages the thread already holds (a client may
send its whole history or only the new message) and gives the newest ``lastMessages``; the
model sees that window plus the new messages. Nothing is written before the run starts
streaming: the new messages are written right after RUN_STARTED (``save_start``, group
committed with other runs' writes), and what the run produced when it ends (``save_end``,
one transaction with any pending start write). ``memoryOptions``: ``lastMessages`` (default
40), ``readOnly`` (read history, store nothing), ``generateTitle``: once a run on an untitled
thread has finished, the agent's ``title`` hook names it (a model agent asks its own model,
bounded in tokens and time), falling back to the first user message's text; the title goes
in the end write, before the run's terminal event is released, so a client re-listing
threads then sees it.

The thread also keeps what a run leaves for the next one (``store.base.Carryover``): the
shared state it ended with (the next run starts from it when the client sends no
``state``) and its interrupts. ``begin`` checks a run's ``resume`` against the open
interrupts (``protocol.interrupts.check_resume``: refused with 400 before anything is
stored); a run without ``resume`` on a thread with open interrupts abandons them. A run that
ends with RUN_ERROR leaves the interrupts as they were, so the same answers can be sent
again; it still stores the state the client was shown.

``forwardedProps.messagesSnapshot: true`` also reads the whole thread, for a
MESSAGES_SNAPSHOT right after RUN_STARTED (a reloaded AG-UI client gets its history back); on
an existing thread, a run whose input brings no new user or tool message only hydrates.

Every store call made for a run is bounded by ``timeout`` (``store_timeout_seconds``): the
read in ``begin`` raises ``TimeoutError`` past it (the run is refused with 503
``STORE_UNAVAILABLE``), and a write not settled within it fails with ``TimeoutError`` and is
withdrawn (a write the store has not begun is never made; one it began is one transaction,
rolled back when the SQL store gives it up).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from iobridge.agents.base import Agent
from iobridge.errors import InputError, NotFoundError
from iobridge.protocol.interrupts import check_resume, next_record
from iobridge.protocol.messages import answered_call, merge_incoming, model_view, window
from iobridge.protocol.run_limits import DEFAULT_MAX_INTERRUPT_BYTES
from iobridge.protocol.text import reject_nul
from iobridge.store.base import (
    Carryover,
    CheckpointOp,
    RunRead,
    normalize_messages,
    replace_from_error,
)

if TYPE_CHECKING:
    from iobridge.observability.metrics import Metrics
    from iobridge.protocol.options import RunOptions
    from iobridge.protocol.run_input import RunInput
    from iobridge.store.base import ThreadStore

logger = logging.getLogger("iobridge.runtime")

Titler = Callable[[Sequence[dict[str, Any]]], Awaitable[str | None]]

TITLE_LENGTH = 80
#: Messages an agent sees to title a thread, and the longest its ``title`` hook may take.
TITLE_CONTEXT = 20
TITLE_DEADLINE = 30.0
#: Roles that give the agent something to answer (a run with none of them only hydrates).
TURN_ROLES = frozenset({"user", "tool"})


class RunMemory(Protocol):
    """One run's view of its thread."""

    #: What the model sees: the stored window plus the new messages, model view applied.
    history: list[dict[str, Any]]
    #: With ``messagesSnapshot``: the whole thread with this run's input merged in.
    snapshot: list[dict[str, Any]] | None
    #: Send the snapshot and finish without calling the agent (nothing new to answer).
    hydrate_only: bool
    #: The shared state the thread's last run ended with (``None``: none).
    state: Any
    #: This run's ``resume`` entries, checked, in the order the interrupts were raised.
    resume: list[dict[str, Any]]
    #: Every answer of the series of resumed runs, this run's last (empty: not resuming).
    answered: list[dict[str, Any]]

    def save_start(self, checkpoint: CheckpointOp | None = None) -> asyncio.Future[None] | None:
        """Begin storing the run's new incoming messages (right after RUN_STARTED), with
        ``checkpoint`` (a durable run's first point); the future settles once they are
        stored (``None``: nothing to store, the checkpoint is not written either)."""
        ...

    def durable_view(self) -> dict[str, Any]:
        """What another process needs to rebuild this view (``ThreadMemory.revive``)."""
        ...

    def save_end(
        self,
        produced: Sequence[dict[str, Any]],
        *,
        finished: bool,
        failed: bool = False,  # pragma: no mutate
        raised: Sequence[dict[str, Any]] = (),
        state: Any = None,
        checkpoint: CheckpointOp | None = None,
    ) -> asyncio.Future[None] | None:
        """Begin storing what the run produced (after ``save_start`` settled), titling the
        thread, with ``checkpoint`` (a durable run's drop); the future settles once it is
        stored (``None``: nothing to store, the checkpoint is not dropped either).

        ``finished``: the run ended with RUN_FINISHED (only then is the agent asked for a
        title; otherwise the first message's text is used). ``failed``: it ended with
        RUN_ERROR. ``raised``: the interrupts it finished with; ``state``: the shared
        state it ended with.
        """
        ...

    def rollback(self) -> asyncio.Future[int] | None:
        """Begin removing what the run stored (after ``save_start`` settled): a newer run
        rolled it back (``multitaskStrategy: rollback``). ``None``: nothing stored."""
        ...


class ThreadMemory(Protocol):
    """Persistence of the run engine; without one the engine is stateless."""

    async def begin(
        self, run_input: RunInput, options: RunOptions, resource_id: str, agent: Agent
    ) -> RunMemory:
        """Check ownership and read the thread (no write)."""
        ...

    async def revive(
        self, view: dict[str, Any], *, thread_id: str, resource_id: str, agent: Agent,
        options: RunOptions,
    ) -> RunMemory:
        """The view of a run continued in this process (from ``RunMemory.durable_view``):
        the history its agent saw is read from the thread again."""
        ...


def title_from(messages: Sequence[dict[str, Any]]) -> str | None:
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
        head = text[: TITLE_LENGTH + 1]  # one more: a space there ends a word that fits
        cut = head.rsplit(" ", 1)[0] if " " in head else text[:TITLE_LENGTH]
        return cut + "…"
    return None


@dataclass(eq=False, kw_only=True)
class _StoreRun:
    """``RunMemory`` of one run over a ``ThreadStore``."""

    store: ThreadStore
    thread_id: str
    resource_id: str
    agent_id: str
    read_only: bool
    incoming: list[dict[str, Any]]
    #: The fallback title (first user message) when the thread is to be titled, else None.
    title: str | None
    history: list[dict[str, Any]]
    #: The agent's ``title`` hook (``None``: it has none of its own), and what it is shown
    #: besides what the run produces.
    titler: Titler | None
    context: list[dict[str, Any]]
    metrics: Metrics | None = None
    #: Seconds each write may take before it fails (``None``: unbounded).
    timeout: float | None = None
    snapshot: list[dict[str, Any]] | None = None
    hydrate_only: bool = False
    state: Any = None
    #: The thread's interrupt record as read.
    record: dict[str, Any] | None = None
    resume: list[dict[str, Any]] = field(default_factory=list)
    answered: list[dict[str, Any]] = field(default_factory=list)
    #: The start write, once begun.
    _started: asyncio.Future[None] | None = field(default=None, init=False)

    def save_start(self, checkpoint: CheckpointOp | None = None) -> asyncio.Future[None] | None:
        if self.read_only or not self.incoming:
            return None
        self._started = self._write(self.incoming, None, checkpoint=checkpoint)
        return self._started

    def durable_view(self) -> dict[str, Any]:
        # The start write stores the incoming messages with the checkpoint's first point:
        # their ids are enough (a read-only run stores none, so it keeps them here).
        return {
            "readOnly": self.read_only, "incomingIds": [m["id"] for m in self.incoming],
            "incoming": self.incoming if self.read_only else [], "title": self.title,
            "state": self.state, "record": self.record, "resume": self.resume,
            "answered": self.answered,
        }

    def save_end(
        self,
        produced: Sequence[dict[str, Any]],
        *,
        finished: bool,
        failed: bool = False,  # pragma: no mutate
        raised: Sequence[dict[str, Any]] = (),
        state: Any = None,
        checkpoint: CheckpointOp | None = None,
    ) -> asyncio.Future[None] | None:
        if self.read_only:
            return None
        carryover = self._carryover(failed, raised, state)
        # The incoming messages go again unless the start write stored them (ids already
        # stored are skipped): the thread is complete even if the start write failed.
        started = self._started
        stored = (
            started is not None and started.done() and not started.cancelled()
            and started.exception() is None
        )
        messages = list(produced) if stored else [*self.incoming, *produced]
        titler = self.titler
        if self.title is not None and finished and not self.hydrate_only and titler is not None:
            return asyncio.ensure_future(
                self._titled_write(titler, messages, produced, carryover, checkpoint)
            )
        return self._write(messages, self.title, carryover, checkpoint=checkpoint)

    def rollback(self) -> asyncio.Future[int] | None:
        started = self._started
        if started is None or not started.done() or started.cancelled() or started.exception():
            return None
        ids = [m["id"] for m in self.incoming]
        return asyncio.ensure_future(self.store.delete_messages(self.thread_id, ids))

    async def _titled_write(
        self,
        titler: Titler,
        messages: list[dict[str, Any]],
        produced: Sequence[dict[str, Any]],
        carryover: Carryover | None,
        checkpoint: CheckpointOp | None,
    ) -> None:
        title = await self._generated_title(titler, produced) or self.title
        await self._write(messages, title, carryover, checkpoint=checkpoint)

    def _carryover(
        self, failed: bool, raised: Sequence[dict[str, Any]], state: Any
    ) -> Carryover | None:
        """What to leave for the next run, or ``None`` when the thread already has it."""
        record = (
            self.record
            if failed
            else next_record(raised=raised, answered=self.answered, resuming=bool(self.resume))
        )
        try:
            reject_nul(state)
        except InputError:
            logger.warning("run on thread %s: its state holds U+0000, not stored", self.thread_id)
            state = self.state
        if record == self.record and state == self.state:
            return None
        return Carryover(state=state, interrupts=record)

    async def _generated_title(
        self, titler: Titler, produced: Sequence[dict[str, Any]]
    ) -> str | None:
        conversation = [*self.context, *self.incoming, *produced]
        try:
            async with asyncio.timeout(TITLE_DEADLINE):
                return await titler(conversation[:TITLE_CONTEXT])
        except Exception as exc:  # any failure falls back to the first message
            logger.warning("agent %s could not title thread %s: %s",
                           self.agent_id, self.thread_id, type(exc).__name__)
            return None

    def _write(
        self,
        messages: Sequence[dict[str, Any]],
        title: str | None,
        carryover: Carryover | None = None,
        *,
        checkpoint: CheckpointOp | None = None,
    ) -> asyncio.Future[None]:
        begun = time.perf_counter()
        # Named only when given: a store written before checkpoints keeps working.
        extra = {} if checkpoint is None else {"checkpoint": checkpoint}
        write = _within(self.timeout, self.store.start_write_for_run(
            self.thread_id,
            resource_id=self.resource_id,
            agent_id=self.agent_id,
            messages=messages,
            title=title,
            carryover=carryover,
            **extra,
        ))
        metrics = self.metrics
        if metrics is not None:
            def timed(done: asyncio.Future[None]) -> None:
                if not done.cancelled() and done.exception() is None:
                    metrics.store_operation("write_for_run", time.perf_counter() - begun)

            if write.done():
                timed(write)  # no callback handle for a write that is already done
            else:
                write.add_done_callback(timed)
        return write


class StoreMemory:
    """``ThreadMemory`` over a ``ThreadStore``; a threadId is never a credential.

    With ``metrics``, the run's reads and writes are timed (``iobridge_store_operation_seconds``);
    ``timeout`` bounds each of them in seconds (``None``: unbounded).
    """

    def __init__(
        self,
        store: ThreadStore,
        metrics: Metrics | None = None,
        *,
        max_interrupt_bytes: int = DEFAULT_MAX_INTERRUPT_BYTES,
        max_branches: int = 32,
        diverging: Literal["merge", "branch"] = "merge",
        timeout: float | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.max_interrupt_bytes = max_interrupt_bytes
        self.max_branches = max_branches
        self.diverging = diverging
        self.timeout = timeout

    async def _omitted(self, run_input: RunInput, read: RunRead) -> str | None:
        """With ``diverging_history = "branch"``: the first stored message a whole-history
        client left out, if the stored ones it sent are the thread's first ones in order
        and it omits the rest (a regenerate); ``None`` for any other history."""
        stored = [m["id"] for m in await self.store.list_messages(run_input.thread_id)]
        sent = [m["id"] for m in run_input.messages if m.get("id") in read.stored_ids]
        if len(sent) < len(stored) and sent == stored[: len(sent)]:
            return str(stored[len(sent)])
        return None

    async def _read(self, run_input: RunInput, options: RunOptions) -> RunRead:
        messages = run_input.messages
        begun = time.perf_counter()
        read = await self.store.read_for_run(
            run_input.thread_id,
            message_ids=[m["id"] for m in messages if isinstance(m.get("id"), str)],
            tool_call_ids=[c for m in messages if (c := answered_call(m)) is not None],
            last_n=options.memory.last_messages,
            first_user=options.memory.generate_title,
        )
        if self.metrics is not None:
            self.metrics.store_operation("read_for_run", time.perf_counter() - begun)
        return read

    async def revive(
        self, view: dict[str, Any], *, thread_id: str, resource_id: str, agent: Agent,
        options: RunOptions,
    ) -> RunMemory:
        incoming_ids = set(view["incomingIds"])
        last = options.memory.last_messages
        async with asyncio.timeout(self.timeout):
            read = await self.store.read_for_run(
                thread_id, message_ids=[], tool_call_ids=[], last_n=last + len(incoming_ids)
            )
        stored = [m for m in read.window if m.get("id") not in incoming_ids]
        incoming = list(view["incoming"]) or [
            m for m in read.window if m.get("id") in incoming_ids
        ]
        return _StoreRun(
            store=self.store, thread_id=thread_id, resource_id=resource_id, agent_id=agent.id,
            read_only=bool(view["readOnly"]), incoming=incoming, title=view["title"],
            history=[dict(m) for m in model_view(window(stored, last) + incoming)],
            titler=agent.title if type(agent).title is not Agent.title else None,
            context=[dict(m) for m in window(stored, TITLE_CONTEXT)], metrics=self.metrics,
            timeout=self.timeout,
            state=view["state"], record=view["record"], resume=list(view["resume"]),
            answered=list(view["answered"]),
        )

    async def begin(
        self, run_input: RunInput, options: RunOptions, resource_id: str, agent: Agent
    ) -> RunMemory:
        """Check ownership and read the thread; the model's history is ready, nothing stored.

        Raises:
            NotFoundError: the thread belongs to another resource (answered as missing).
            InputError: a new message cannot be stored (``INVALID_MESSAGE``; nothing stored),
                or ``resume`` does not answer the open interrupts (``INTERRUPT_*`` codes).
            TimeoutError: the store did not answer within ``timeout``.
        """
        try:
            async with asyncio.timeout(self.timeout):
                return await self._begin(run_input, options, resource_id, agent)
        except TimeoutError as exc:
            raise TimeoutError(f"the store did not answer within {self.timeout} s") from exc

    async def _begin(
        self, run_input: RunInput, options: RunOptions, resource_id: str, agent: Agent
    ) -> RunMemory:
        memory = options.memory
        read = await self._read(run_input, options)
        thread = read.thread
        if thread is not None and thread.resource_id != resource_id:
            raise NotFoundError("thread not found", code="THREAD_NOT_FOUND")
        record = dict(thread.interrupts) if thread is not None and thread.interrupts else None
        resume, answered = check_resume(
            record, run_input.resume, max_bytes=self.max_interrupt_bytes
        )
        replace_from = options.replace_from
        if replace_from is None and self.diverging == "branch" and read.stored_ids:
            replace_from = await self._omitted(run_input, read)
        if replace_from is not None:
            # Regenerate / edit: the one write before RUN_STARTED, once the run is checked;
            # the model then sees the new branch only.
            if thread is None or memory.read_only:
                raise replace_from_error(replace_from)
            await self.store.fork_branch(
                run_input.thread_id, replace_from, f"b-{uuid.uuid4().hex[:16]}",
                max_branches=self.max_branches,
            )
            read = await self._read(run_input, options)
        incoming = merge_incoming(read.stored_ids, read.answered, run_input.messages)
        normalize_messages(incoming)
        title = None
        first = [read.first_user] if read.first_user is not None else []
        if memory.generate_title and not memory.read_only and (thread is None or not thread.title):
            title = title_from([*first, *incoming])
        first_ids = {m.get("id") for m in first}
        visible = window(read.window, memory.last_messages) + incoming
        snapshot = None
        if options.messages_snapshot:
            stored = await self.store.list_messages(run_input.thread_id) if thread else []
            snapshot = [*stored, *incoming]
        return _StoreRun(
            store=self.store,
            thread_id=run_input.thread_id,
            resource_id=resource_id,
            agent_id=agent.id,
            read_only=memory.read_only,
            incoming=incoming,
            title=title,
            history=[dict(m) for m in model_view(visible)],
            # An agent without its own ``title`` hook has nothing to add to the fallback.
            titler=agent.title if type(agent).title is not Agent.title else None,
            context=[*first, *(m for m in read.window if m.get("id") not in first_ids)],
            metrics=self.metrics,
            timeout=self.timeout,
            snapshot=snapshot,
            hydrate_only=snapshot is not None
            and thread is not None
            and not resume
            and not any(m.get("role") in TURN_ROLES for m in incoming),
            state=thread.state if thread is not None else None,
            record=record,
            resume=resume,
            answered=answered,
        )


def _within(timeout: float | None, write: asyncio.Future[None]) -> asyncio.Future[None]:
    """``write``, failed with ``TimeoutError`` (and withdrawn: cancelled) if it has not
    settled within ``timeout`` seconds. No task: a timer and a callback."""
    if timeout is None or write.done():
        return write
    loop = asyncio.get_running_loop()
    bounded: asyncio.Future[None] = loop.create_future()

    def expire() -> None:
        if not bounded.done():
            bounded.set_exception(
                TimeoutError(f"the store did not answer within {timeout} s")
            )
            write.cancel()

    timer = loop.call_later(timeout, expire)

    def settled(done: asyncio.Future[None]) -> None:
        timer.cancel()
        if bounded.done():
            return
        if done.cancelled():
            bounded.cancel()
        elif (error := done.exception()) is not None:
            bounded.set_exception(error)
        else:
            bounded.set_result(None)

    write.add_done_callback(settled)
    return bounded
