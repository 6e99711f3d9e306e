"""The ThreadStore contract at its edges, on memory, a SQLite file and PostgreSQL: what a
refused call says (the text and code a client is shown), page sizes at their bounds, what one
thread's delete leaves of the others, and the defaults a custom store inherits."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.backends import StepClock

from iobridge.errors import ConflictError, InputError, IobridgeError, NotFoundError
from iobridge.store import MemoryThreadStore, ThreadStore
from iobridge.store.base import MAIN_BRANCH, Carryover, RunRead, StoreUnavailable
from iobridge.store.migrate import open_store


def user(mid: str, text: str = "hi") -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": text}


def tool(mid: str, call: Any) -> dict[str, Any]:
    return {"id": mid, "role": "tool", "toolCallId": call, "content": "42"}


async def _refused(call: Any) -> IobridgeError:
    with pytest.raises((InputError, NotFoundError, ConflictError)) as info:
        await call
    return info.value


# -- what a refusal says --------------------------------------------------------------------


async def test_a_bad_page_size_is_refused_with_its_reason(store: ThreadStore) -> None:
    await store.create_thread("t", resource_id="r")
    for call in (store.list_threads(["r"], None, 0), store.list_messages("t", limit=0),
                 store.list_stored_messages("t", limit=-1)):
        refused = await _refused(call)
        assert (type(refused), refused.code, refused.message) == (
            InputError, "INVALID_REQUEST", "limit must be at least 1")


async def test_a_missing_thread_is_named_in_its_refusal(store: ThreadStore) -> None:
    for call in (store.update_thread("nope", title="x"),
                 store.append_messages("nope", [user("m1")])):
        refused = await _refused(call)
        assert (type(refused), refused.code, refused.message) == (
            NotFoundError, "THREAD_NOT_FOUND", "thread 'nope' not found")
    await store.create_thread("t1", resource_id="r")
    refused = await _refused(store.create_thread("t1", resource_id="r"))
    assert (type(refused), refused.code, refused.message) == (
        ConflictError, "THREAD_EXISTS", "thread 't1' already exists")
    await store.write_for_run("t2", resource_id="r", agent_id=None, messages=[user("u")])
    refused = await _refused(store.write_for_run(
        "t2", resource_id="other", agent_id=None, messages=[user("x")]))
    assert (type(refused), refused.code, refused.message) == (
        NotFoundError, "THREAD_NOT_FOUND", "thread not found")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("not an object", "message 1 is not an object"),
        ({"role": "user"}, "message 1 id must be a non-empty string"),
        ({"id": "m\n", "role": "user"}, "message 1 id contains non-printable characters"),
        ({"id": "m"}, "message 1 has no role"),
        ({"id": "m", "role": "x" * 257}, "message 1 role is longer than 256 characters"),
        ({"id": "m", "role": "user", "content": {1}}, "message 1 is not JSON"),
    ],
)
async def test_an_unstorable_message_is_named_by_its_place_in_the_batch(
    store: ThreadStore, bad: Any, message: str
) -> None:
    await store.create_thread("t", resource_id="r")
    refused = await _refused(store.append_messages("t", [user("ok"), bad]))
    assert (refused.code, refused.message) == ("INVALID_MESSAGE", message)
    assert await store.list_messages("t") == []


async def test_a_cursor_message_of_another_thread_is_not_a_cursor_here(store: ThreadStore) -> None:
    await store.create_thread("a", resource_id="r")
    await store.create_thread("b", resource_id="r")
    await store.append_messages("a", [user("a1"), user("a2")])
    await store.append_messages("b", [user("b1")])
    for before in ("a2", "unknown"):
        refused = await _refused(store.list_stored_messages("b", before=before))
        assert (refused.code, refused.message) == (
            "INVALID_CURSOR", f"no message {before!r} in this thread")
    assert [m["id"] for m in await store.list_messages("a", before="a2")] == ["a1"]


# -- pages, batches and deletes at their bounds ----------------------------------------------


async def test_a_thread_listing_pages_twenty_by_default_and_ends_at_an_exact_fit(
    store: ThreadStore,
) -> None:
    for n in range(21):
        await store.create_thread(f"t{n:02d}", resource_id="r")
    page, cursor = await store.list_threads(["r"])
    assert [t.id for t in page] == [f"t{n:02d}" for n in range(20, 0, -1)]
    assert cursor is not None
    rest, end = await store.list_threads(["r"], cursor=cursor)
    assert ([t.id for t in rest], end) == (["t00"], None)
    # Exactly a page's worth left: the page is the last one (no cursor to an empty page).
    exact, none = await store.list_threads(["r"], None, 21)
    assert len(exact) == 21 and none is None


async def test_a_repeated_id_in_a_batch_skips_that_message_only(store: ThreadStore) -> None:
    await store.create_thread("t", resource_id="r")
    appended = await store.append_messages("t", [user("m1", "a"), user("m1", "b"), user("m2")])
    assert appended == [user("m1", "a"), user("m2")]
    assert await store.list_messages("t") == [user("m1", "a"), user("m2")]


async def test_deleting_a_thread_leaves_the_other_threads_and_their_branches(
    store: ThreadStore,
) -> None:
    for thread in ("gone", "kept"):
        await store.create_thread(thread, resource_id="r")
        await store.append_messages(thread, [user(f"{thread}-u"), user(f"{thread}-v")])
        await store.fork_branch(thread, f"{thread}-v", "b1", max_branches=4)
    assert await store.delete_thread("gone")
    assert [b.id for b in await store.list_branches("kept")] == [MAIN_BRANCH, "b1"]
    old = await store.branch_messages("kept", MAIN_BRANCH)
    assert old is not None and [s.message["id"] for s in old] == ["kept-u", "kept-v"]
    # A thread made again under the deleted one's id starts with nothing of it.
    await store.create_thread("gone", resource_id="r")
    assert await store.list_messages("gone") == []
    [only] = await store.list_branches("gone")
    assert (only.id, only.current) == (MAIN_BRANCH, True)
    assert await store.branch_messages("gone", "b1") is None


async def test_deleted_messages_leave_the_rest_and_touch_the_thread(
    store: ThreadStore, clock: StepClock
) -> None:
    await store.create_thread("t", resource_id="r")
    await store.create_thread("other", resource_id="r")
    await store.append_messages("t", [user("u1"), user("u2"), user("u3")])
    await store.append_messages("other", [user("u2")])
    before = await store.get_thread("t")
    assert await store.delete_messages("t", []) == 0
    assert await store.delete_messages("t", ["nope"]) == 0
    assert await store.get_thread("t") == before  # nothing removed: not touched
    assert await store.delete_messages("t", ["u2", "u3", "nope"]) == 2
    assert [m["id"] for m in await store.list_messages("t")] == ["u1"]
    assert [m["id"] for m in await store.list_messages("other")] == ["u2"]
    after = await store.get_thread("t")
    assert before is not None and after is not None
    assert after.updated_at == clock.now and after.updated_at > before.updated_at
    assert await store.delete_messages("missing", ["u1"]) == 0


# -- the run's write: new threads, checks and carryovers -------------------------------------


async def test_a_run_write_makes_its_thread_with_the_run_s_time_and_no_metadata(
    store: ThreadStore, clock: StepClock
) -> None:
    await store.write_for_run("t", resource_id="r", agent_id="a", messages=[user("u1")])
    thread = await store.get_thread("t")
    assert thread is not None
    assert thread.created_at == thread.updated_at == clock.now
    assert thread.to_json()["metadata"] == {} and dict(thread.metadata) == {}
    [stored] = await store.list_stored_messages("t")
    assert stored.created_at == clock.now


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [({"agent_id": "a\tb"}, "INVALID_ID"), ({"agent_id": "a", "title": "T\x00"}, "INVALID_TEXT")],
)
async def test_a_run_write_checks_the_new_thread_s_agent_and_title(
    store: ThreadStore, kwargs: dict[str, Any], code: str
) -> None:
    refused = await _refused(store.write_for_run("t", resource_id="r", messages=[user("u")],
                                                 **kwargs))
    assert refused.code == code
    assert await store.get_thread("t") is None


async def test_a_started_run_write_stores_its_carryover(store: ThreadStore) -> None:
    carry = Carryover(state={"n": 1}, interrupts={"open": [{"id": "i1"}], "answered": []})
    await store.start_write_for_run("t", resource_id="r", agent_id=None, messages=[user("u")],
                                    title="T", carryover=carry)
    thread = await store.get_thread("t")
    assert thread is not None
    assert (thread.title, thread.state, thread.interrupts) == ("T", {"n": 1}, carry.interrupts)


async def test_a_tool_result_whose_call_id_is_not_text_is_stored_and_read_back(
    store: ThreadStore,
) -> None:
    odd = tool("t1", 7)
    await store.write_for_run("t", resource_id="r", agent_id=None,
                              messages=[user("u"), odd, tool("t2", "c2")])
    read = await store.read_for_run("t", message_ids=["t1"], tool_call_ids=["7", "c2"],
                                    last_n=5)
    assert read.window == [user("u"), odd, tool("t2", "c2")]
    assert read.answered == {"c2"}  # a call id that is not text answers no call
    assert read.stored_ids == {"t1"}


# -- the defaults a store inherits from ThreadStore ------------------------------------------


class _DefaultRunPath(MemoryThreadStore):
    """A store that keeps ``ThreadStore``'s own run read and write (a custom store that
    implements only the basic operations gets these)."""

    async def read_for_run(
        self, thread_id: str, *, message_ids: Collection[str], tool_call_ids: Collection[str],
        last_n: int, first_user: bool = False,
    ) -> RunRead:
        return await ThreadStore.read_for_run(
            self, thread_id, message_ids=message_ids, tool_call_ids=tool_call_ids,
            last_n=last_n, first_user=first_user)

    async def write_for_run(
        self, thread_id: str, *, resource_id: str, agent_id: str | None,
        messages: Sequence[Any], title: str | None = None, carryover: Carryover | None = None,
    ) -> None:
        await ThreadStore.write_for_run(
            self, thread_id, resource_id=resource_id, agent_id=agent_id, messages=messages,
            title=title, carryover=carryover)


async def test_the_default_run_path_answers_as_the_stores_own_do() -> None:
    clock = StepClock()
    plain = _DefaultRunPath(clock=clock)
    carry = Carryover(state=[1], interrupts={"open": [], "answered": []})
    await plain.write_for_run("t", resource_id="r", agent_id="a",
                              messages=[{"id": "a0", "role": "assistant"}, user("u1")],
                              title="First", carryover=carry)
    await plain.write_for_run("t", resource_id="r", agent_id="a",
                              messages=[user("u1"), tool("t1", "c1")], title="Second")
    thread = await plain.get_thread("t")
    assert thread is not None
    assert (thread.agent_id, thread.title, thread.state, thread.interrupts) == (
        "a", "First", [1], carry.interrupts)
    assert [m["id"] for m in await plain.list_messages("t")] == ["a0", "u1", "t1"]
    with pytest.raises(NotFoundError) as foreign:
        await plain.write_for_run("t", resource_id="x", agent_id=None, messages=[])
    assert (foreign.value.code, foreign.value.message) == ("THREAD_NOT_FOUND", "thread not found")
    with pytest.raises(InputError):
        await plain.write_for_run("t3", resource_id="r", agent_id=None,
                                  messages=[{"id": "m", "role": 3}])
    assert await plain.get_thread("t3") is None

    read = await plain.read_for_run("t", message_ids=["u1", "zz"], tool_call_ids=["c1", "c9"],
                                    last_n=2, first_user=True)
    assert read.stored_ids == {"u1"} and read.answered == {"c1"}
    assert [m["id"] for m in read.window] == ["u1", "t1"]
    assert read.first_user == user("u1")
    assert (await plain.read_for_run("missing", message_ids=[], tool_call_ids=[],
                                     last_n=1)).thread is None
    # A thread without a user message: no first user, and no error looking for one.
    await plain.write_for_run("bare", resource_id="r", agent_id=None,
                              messages=[{"id": "a", "role": "assistant"}])
    bare = await plain.read_for_run("bare", message_ids=[], tool_call_ids=[], last_n=1,
                                    first_user=True)
    assert bare.first_user is None and [m["id"] for m in bare.window] == ["a"]


# -- opening a store ---------------------------------------------------------------------------


async def test_a_memory_store_opened_by_url_keeps_the_given_clock() -> None:
    clock = StepClock()
    store = await open_store("memory://", clock=clock)
    thread = await store.create_thread("t", resource_id="r")
    assert thread.created_at == clock.now


async def test_a_sqlite_store_s_timeout_bounds_a_write_the_database_holds(tmp_path: Path) -> None:
    """``store_timeout_seconds`` reaches the SQLite store: a write held by another process's
    lock fails as an outage after the timeout, not after SQLite's 30 s busy wait."""
    path = tmp_path / "held.db"
    store = await open_store(f"sqlite:///{path}", timeout=0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises((StoreUnavailable, TimeoutError)):
            await store.create_thread("t", resource_id="r")
        assert time.monotonic() - started < 5
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        await store.close()
