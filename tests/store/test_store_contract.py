"""The ThreadStore contract, run against memory, a SQLite file and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.backends import StepClock

from iobridge.errors import ConflictError, InputError, NotFoundError
from iobridge.store import ThreadStore
from iobridge.store.base import Carryover, decode_cursor, encode_cursor


def user(mid: str, text: str = "hi") -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": text}


def assistant_call(mid: str, call: str) -> dict[str, Any]:
    return {
        "id": mid,
        "role": "assistant",
        "toolCalls": [
            {"id": call, "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
        ],
    }


def tool(mid: str, call: str) -> dict[str, Any]:
    return {"id": mid, "role": "tool", "toolCallId": call, "content": "42"}


async def test_create_get_update_delete(store: ThreadStore) -> None:
    created = await store.create_thread(
        "t1", resource_id="alice", agent_id="demo", title="Hello", metadata={"k": [1, "x"]}
    )
    assert created.created_at == created.updated_at
    assert created.created_at.tzinfo is not None
    got = await store.get_thread("t1")
    assert got == created
    updated = await store.update_thread("t1", title="Renamed")
    assert updated.title == "Renamed"
    assert updated.metadata == {"k": [1, "x"]}
    assert updated.updated_at > created.updated_at
    assert updated.created_at == created.created_at
    updated = await store.update_thread("t1", metadata={"new": True})
    assert (updated.title, dict(updated.metadata)) == ("Renamed", {"new": True})
    assert await store.get_thread("t1") == updated
    await store.append_messages("t1", [user("m1")])
    assert await store.delete_thread("t1") is True
    assert await store.get_thread("t1") is None
    assert await store.list_messages("t1") == []
    assert await store.delete_thread("t1") is False


async def test_thread_json_shape(store: ThreadStore) -> None:
    thread = await store.create_thread("t1", resource_id="r")
    body = thread.to_json()
    assert set(body) == {"id", "resourceId", "title", "metadata", "createdAt", "updatedAt"}
    assert body["createdAt"] == "2026-01-01T12:00:00.001Z"
    assert None not in body.values()
    with_agent = await store.create_thread("t2", resource_id="r", agent_id="a")
    assert with_agent.to_json()["agentId"] == "a"


async def test_create_duplicate_conflicts_and_keeps_original(store: ThreadStore) -> None:
    first = await store.create_thread("t1", resource_id="alice", title="mine")
    with pytest.raises(ConflictError) as info:
        await store.create_thread("t1", resource_id="mallory", title="theirs")
    assert info.value.code == "THREAD_EXISTS"
    assert await store.get_thread("t1") == first


@pytest.mark.parametrize(
    "ids",
    [("", "r", None), ("t", "x" * 257, None), ("t", "r", "a\tb"), ("t\x00", "r", None)],
)
async def test_create_with_bad_ids_is_input_error(
    store: ThreadStore, ids: tuple[str, str, str | None]
) -> None:
    thread_id, resource_id, agent_id = ids
    with pytest.raises(InputError) as info:
        await store.create_thread(thread_id, resource_id=resource_id, agent_id=agent_id)
    assert info.value.code == "INVALID_ID"
    assert await store.list_threads(None) == ([], None)


async def test_update_missing_thread(store: ThreadStore) -> None:
    with pytest.raises(NotFoundError):
        await store.update_thread("nope", title="x")
    with pytest.raises(NotFoundError):
        await store.append_messages("nope", [user("m1")])


async def test_get_or_create(store: ThreadStore) -> None:
    thread, created = await store.get_or_create_thread("t1", resource_id="r", agent_id="a")
    assert created and thread.agent_id == "a"
    again, created = await store.get_or_create_thread("t1", resource_id="other")
    assert not created and again == thread


async def test_set_title_if_empty(store: ThreadStore) -> None:
    await store.create_thread("t1", resource_id="r")
    assert await store.set_title_if_empty("t1", "Generated") is True
    assert await store.set_title_if_empty("t1", "Second") is False
    thread = await store.get_thread("t1")
    assert thread is not None and thread.title == "Generated"
    assert await store.set_title_if_empty("missing", "x") is False


async def test_append_preserves_messages_exactly(store: ThreadStore) -> None:
    await store.create_thread("t1", resource_id="r")
    messages = [
        user("m1"),
        assistant_call("m2", "c1"),
        tool("m3", "c1"),
        {"id": "m4", "role": "activity", "activityType": "plan", "content": {"steps": [1]}},
        {"id": "m5", "role": "reasoning", "content": "thinking", "futureKey": {"x": None}},
        {"id": "m6", "role": "user", "content": [{"type": "text", "text": "ünïcødé ✓"}]},
    ]
    appended = await store.append_messages("t1", messages)
    assert appended == messages
    assert await store.list_messages("t1") == messages


async def test_append_skips_stored_ids_and_touches_updated_at(
    store: ThreadStore, clock: StepClock
) -> None:
    created = await store.create_thread("t1", resource_id="r")
    await store.append_messages("t1", [user("m1"), user("m2")])
    after_first = await store.get_thread("t1")
    assert after_first is not None and after_first.updated_at > created.updated_at
    # Whole history again plus one new message: only the new one is stored.
    appended = await store.append_messages("t1", [user("m1", "edited?"), user("m2"), user("m3")])
    assert [m["id"] for m in appended] == ["m3"]
    stored = await store.list_messages("t1")
    assert [m["id"] for m in stored] == ["m1", "m2", "m3"]
    assert stored[0]["content"] == "hi"
    # Nothing new: updated_at is not touched.
    before = await store.get_thread("t1")
    assert await store.append_messages("t1", [user("m1")]) == []
    assert await store.get_thread("t1") == before
    # Repeated ids inside one batch: the first wins.
    appended = await store.append_messages("t1", [user("m4", "a"), user("m4", "b")])
    assert appended == [user("m4", "a")]


async def test_append_is_all_or_nothing(store: ThreadStore) -> None:
    await store.create_thread("t1", resource_id="r")
    await store.append_messages("t1", [user("m1")])
    before = await store.get_thread("t1")
    bad_batches: list[list[Any]] = [
        [user("m2"), {"role": "user", "content": "no id"}],
        [user("m2"), {"id": "", "role": "user"}],
        [user("m2"), {"id": "m3"}],
        [user("m2"), "not an object"],
        [user("m2"), {"id": "m3", "role": "user", "content": {1, 2}}],
        [user("m2"), {"id": "x\x00y", "role": "user"}],
        [user("m2"), {"id": "x" * 257, "role": "user"}],
    ]
    for batch in bad_batches:
        with pytest.raises(InputError) as info:
            await store.append_messages("t1", batch)
        assert info.value.code == "INVALID_MESSAGE"
    assert [m["id"] for m in await store.list_messages("t1")] == ["m1"]
    assert await store.get_thread("t1") == before


async def test_list_messages_limit_and_before(store: ThreadStore) -> None:
    await store.create_thread("t1", resource_id="r")
    await store.append_messages("t1", [user(f"m{i}") for i in range(10)])

    def ids(messages: list[dict[str, Any]]) -> list[str]:
        return [m["id"] for m in messages]

    assert ids(await store.list_messages("t1", limit=3)) == ["m7", "m8", "m9"]
    assert ids(await store.list_messages("t1", before="m5")) == ["m0", "m1", "m2", "m3", "m4"]
    assert ids(await store.list_messages("t1", limit=2, before="m5")) == ["m3", "m4"]
    assert await store.list_messages("t1", before="m0") == []
    assert ids(await store.list_messages("t1", limit=100)) == [f"m{i}" for i in range(10)]
    with pytest.raises(InputError) as info:
        await store.list_messages("t1", before="unknown")
    assert info.value.code == "INVALID_CURSOR"
    with pytest.raises(InputError):
        await store.list_messages("t1", limit=0)


async def test_stored_messages_carry_their_append_time(
    store: ThreadStore, clock: StepClock
) -> None:
    await store.create_thread("t1", resource_id="r")
    await store.append_messages("t1", [user("m1"), user("m2")])
    first_batch = clock.now
    await store.append_messages("t1", [user("m3")])
    second_batch = clock.now
    stored = await store.list_stored_messages("t1")
    assert [(s.message["id"], s.created_at) for s in stored] == [
        ("m1", first_batch), ("m2", first_batch), ("m3", second_batch)
    ]
    assert stored[0].message == user("m1")
    page = await store.list_stored_messages("t1", limit=1, before="m3")
    assert [(s.message["id"], s.created_at) for s in page] == [("m2", first_batch)]
    assert await store.list_stored_messages("missing") == []
    with pytest.raises(InputError):
        await store.list_stored_messages("t1", before="nope")


async def test_messages_are_per_thread(store: ThreadStore) -> None:
    await store.create_thread("a", resource_id="r")
    await store.create_thread("b", resource_id="r")
    await store.append_messages("a", [user("m1", "in a")])
    # The same message id in another thread is a different message.
    assert await store.append_messages("b", [user("m1", "in b")]) == [user("m1", "in b")]
    assert await store.list_messages("a") == [user("m1", "in a")]
    await store.delete_thread("a")
    assert await store.list_messages("b") == [user("m1", "in b")]


async def _walk(
    store: ThreadStore, resources: list[str] | None, limit: int, agent: str | None = None
) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        page, cursor = await store.list_threads(resources, agent, limit, cursor)
        assert len(page) <= limit
        seen.extend(t.id for t in page)
        if cursor is None:
            return seen
        assert page, "a non-final page must not be empty"
    raise AssertionError("cursor walk did not end")


async def test_list_threads_newest_first_with_cursor_walk(store: ThreadStore) -> None:
    for i in range(7):
        await store.create_thread(f"t{i}", resource_id="alice", agent_id="a" if i % 2 else "b")
    await store.create_thread("other", resource_id="bob")
    # Touching t2 moves it to the front.
    await store.append_messages("t2", [user("m1")])
    expected = ["t2", "t6", "t5", "t4", "t3", "t1", "t0"]
    assert await _walk(store, ["alice"], 3) == expected
    assert await _walk(store, ["alice"], 100) == expected
    assert await _walk(store, ["alice"], 1) == expected
    assert await _walk(store, ["alice"], 3, agent="a") == ["t5", "t3", "t1"]
    assert await _walk(store, ["alice", "bob"], 2) == ["t2", "other", *expected[1:]]
    assert set(await _walk(store, None, 4)) == {*expected, "other"}
    assert await store.list_threads([], None, 5) == ([], None)
    assert await store.list_threads(["nobody"], None, 5) == ([], None)


async def test_list_threads_stable_under_equal_timestamps(
    store: ThreadStore, clock: StepClock
) -> None:
    clock.step = timedelta(0)
    for i in range(25):
        await store.create_thread(f"t{i:02d}", resource_id="r")
    walked = await _walk(store, ["r"], 4)
    assert walked == sorted((f"t{i:02d}" for i in range(25)), reverse=True)
    # A thread created after the walk began, with the same timestamp, sorts before the
    # cursor position it would otherwise duplicate: pages never repeat or skip old threads.
    page, cursor = await store.list_threads(["r"], None, 10)
    await store.create_thread("t99", resource_id="r")
    rest = await store.list_threads(["r"], None, 100, cursor)
    assert [t.id for t in page] + [t.id for t in rest[0]] == walked


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90LWpzb24", "WzEsMl0", "WyJ4IiwieSJd", "e30"])
async def test_bad_cursor_is_input_error(store: ThreadStore, cursor: str) -> None:
    await store.create_thread("t1", resource_id="r")
    with pytest.raises(InputError) as info:
        await store.list_threads(["r"], None, 5, cursor)
    assert info.value.code == "INVALID_CURSOR"


async def test_bad_limit_is_input_error(store: ThreadStore) -> None:
    with pytest.raises(InputError):
        await store.list_threads(["r"], None, 0)


def test_cursor_roundtrip_keeps_microseconds() -> None:
    clock = StepClock(timedelta(microseconds=7))
    when = clock()
    assert decode_cursor(encode_cursor(when, "id/ü")) == (when, "id/ü")


# -- the run path: one read before a run, one write per step --------------------------------


async def test_read_for_run_of_a_missing_thread(store: ThreadStore) -> None:
    read = await store.read_for_run("nope", message_ids=["a"], tool_call_ids=["c"], last_n=10)
    assert read.thread is None and read.window == [] and not read.stored_ids


async def test_read_for_run_answers_ids_calls_window_and_first_user(store: ThreadStore) -> None:
    await store.create_thread("t", resource_id="r")
    history = [user("u0", "first question")]
    for n in range(1, 30):  # assistant call / tool result pairs, then a user turn
        history += [assistant_call(f"a{n}", f"c{n}"), tool(f"t{n}", f"c{n}"), user(f"u{n}")]
    await store.append_messages("t", history)
    read = await store.read_for_run(
        "t", message_ids=["u0", "u5", "new"], tool_call_ids=["c3", "c-new"], last_n=5,
        first_user=True,
    )
    assert read.thread is not None and read.thread.resource_id == "r"
    assert read.stored_ids == {"u0", "u5"}
    assert read.answered == {"c3"}
    # The last 5 start with a tool result: the window reaches back to the call it answers.
    assert [m["id"] for m in read.window] == ["a28", "t28", "u28", "a29", "t29", "u29"]
    assert read.first_user == user("u0", "first question")
    without = await store.read_for_run("t", message_ids=[], tool_call_ids=[], last_n=0)
    assert without.window == [] and without.first_user is None


async def test_read_for_run_window_reaches_far_back_for_an_issuer(store: ThreadStore) -> None:
    await store.create_thread("t", resource_id="r")
    # A call answered much later (next-run tool mode with chatter in between).
    history = [user("u0"), assistant_call("a0", "late")]
    history += [user(f"u{n}") for n in range(1, 20)]
    history += [tool("t-late", "late"), user("u-last")]
    await store.append_messages("t", history)
    read = await store.read_for_run("t", message_ids=[], tool_call_ids=[], last_n=2)
    ids = [m["id"] for m in read.window]
    assert ids[0] == "a0" and ids[-2:] == ["t-late", "u-last"]


async def test_write_for_run_creates_appends_and_titles_in_one_step(store: ThreadStore) -> None:
    await store.write_for_run(
        "t", resource_id="r", agent_id="demo", messages=[user("u1")], title="Hello"
    )
    thread = await store.get_thread("t")
    assert thread is not None and (thread.resource_id, thread.agent_id, thread.title) == (
        "r", "demo", "Hello")
    # Again with the same message and more: ids already stored are skipped; the title stays.
    await store.write_for_run(
        "t", resource_id="r", agent_id="demo", messages=[user("u1"), user("u2")], title="Other"
    )
    assert [m["id"] for m in await store.list_messages("t")] == ["u1", "u2"]
    thread = await store.get_thread("t")
    assert thread is not None and thread.title == "Hello"


async def test_write_for_run_refuses_a_foreign_thread_and_bad_messages(store: ThreadStore) -> None:
    await store.write_for_run("t", resource_id="r", agent_id=None, messages=[user("u1")])
    with pytest.raises(NotFoundError):
        await store.write_for_run("t", resource_id="other", agent_id=None, messages=[user("x")])
    with pytest.raises(InputError):
        await store.write_for_run(
            "t2", resource_id="r", agent_id=None, messages=[{"id": "m", "role": 3}]
        )
    assert await store.get_thread("t2") is None  # nothing stored for a refused write
    assert [m["id"] for m in await store.list_messages("t")] == ["u1"]


async def test_a_started_run_write_settles_as_the_awaited_one_would(store: ThreadStore) -> None:
    """``start_write_for_run`` (how the engine writes): the future settles once the write is
    stored, or with the same error as ``write_for_run`` and nothing stored."""
    await store.start_write_for_run(
        "t", resource_id="r", agent_id="demo", messages=[user("u1")], title="Hello"
    )
    assert [m["id"] for m in await store.list_messages("t")] == ["u1"]
    thread = await store.get_thread("t")
    assert thread is not None and thread.title == "Hello"
    foreign = store.start_write_for_run("t", resource_id="other", agent_id=None,
                                        messages=[user("x")])
    bad = store.start_write_for_run("t2", resource_id="r", agent_id=None,
                                    messages=[{"id": "m", "role": 3}])
    with pytest.raises(NotFoundError):
        await foreign
    with pytest.raises(InputError):
        await bad
    assert await store.get_thread("t2") is None
    assert [m["id"] for m in await store.list_messages("t")] == ["u1"]


# --- U+0000 and printable roles: refused alike on every store, nothing written -----------------


async def test_nul_in_titles_and_metadata_is_refused_on_every_store(store: ThreadStore) -> None:
    for kwargs in ({"title": "a\x00"}, {"metadata": {"k": "\x00"}}, {"metadata": {"\x00": 1}}):
        with pytest.raises(InputError) as info:
            await store.create_thread("t", resource_id="r", **kwargs)
        assert info.value.code == "INVALID_TEXT"
    assert await store.get_thread("t") is None
    await store.create_thread("t", resource_id="r", title="kept")
    with pytest.raises(InputError):
        await store.update_thread("t", title="\x00")
    with pytest.raises(InputError):
        await store.update_thread("t", metadata={"a": ["\x00"]})
    await store.create_thread("u", resource_id="r")
    with pytest.raises(InputError):
        await store.set_title_if_empty("u", "gen\x00erated")
    t, u = await store.get_thread("t"), await store.get_thread("u")
    assert t is not None and t.title == "kept" and t.metadata == {}
    assert u is not None and u.title == ""


@pytest.mark.parametrize(
    "message",
    [{"id": "m", "role": "user", "content": "a\x00"},
     {"id": "m", "role": "tool", "toolCallId": "c\x00", "content": "x"},
     {"id": "m", "role": "fut\x00ure"},
     {"id": "m", "role": "fut\nure"}],
    ids=["content", "tool-call-id", "role-nul", "role-newline"],
)
async def test_unstorable_messages_are_refused_on_every_store(
    store: ThreadStore, message: dict[str, Any]
) -> None:
    await store.create_thread("t", resource_id="r")
    ok = {"id": "ok", "role": "user", "content": "fine"}
    with pytest.raises(InputError) as info:
        await store.append_messages("t", [ok, message])
    assert info.value.code == "INVALID_MESSAGE"
    assert await store.list_messages("t") == []


@pytest.mark.parametrize(
    "state", [0, 7, 1.5, "12", "text", True, False, [], {}, [1, {"a": None}], {"n": {"m": [0]}}]
)
async def test_a_threads_state_of_any_json_kind_reads_back_as_written(
    store: ThreadStore, state: Any
) -> None:
    record = {"open": [{"id": "i", "reason": "r"}], "answered": []}
    await store.write_for_run("t", resource_id="r", agent_id=None, messages=[],
                              carryover=Carryover(state=state, interrupts=record))
    thread = await store.get_thread("t")
    assert thread is not None
    assert thread.state == state and type(thread.state) is type(state)
    assert thread.interrupts == record
    # Listing and reading the thread still work (a bad column would break every read).
    assert [t.id for t in (await store.list_threads(None))[0]] == ["t"]
    await store.write_for_run("t", resource_id="r", agent_id=None, messages=[],
                              carryover=Carryover(state=None, interrupts=None))
    cleared = await store.get_thread("t")
    assert cleared is not None and cleared.state is None and cleared.interrupts is None


async def test_write_for_run_touches_only_for_new_messages_and_keeps_what_it_is_not_given(
    store: ThreadStore,
) -> None:
    carry = Carryover(state={"n": 1}, interrupts={"open": [{"id": "i1"}], "answered": []})
    await store.write_for_run(
        "t", resource_id="r", agent_id="a", messages=[user("u1")], carryover=carry
    )
    created = await store.get_thread("t")
    assert created is not None
    # Nothing new, no title, no carryover: the thread is left exactly as it was.
    await store.write_for_run("t", resource_id="r", agent_id="a", messages=[user("u1")])
    assert await store.get_thread("t") == created
    await store.write_for_run(
        "t", resource_id="r", agent_id="a", messages=[user("u1"), user("u2")], title="Named"
    )
    after = await store.get_thread("t")
    assert after is not None and after.updated_at > created.updated_at
    assert (after.title, after.state, after.interrupts) == ("Named", {"n": 1}, carry.interrupts)
    # A carryover replaces both fields, None included; messages need not come with it.
    await store.write_for_run(
        "t", resource_id="r", agent_id="a", messages=[], carryover=Carryover(state=None)
    )
    cleared = await store.get_thread("t")
    assert cleared is not None and (cleared.state, cleared.interrupts) == (None, None)
    assert cleared.updated_at == after.updated_at and cleared.title == "Named"
    assert [m["id"] for m in await store.list_messages("t")] == ["u1", "u2"]


async def test_run_path_keeps_message_json_exactly(store: ThreadStore) -> None:
    odd = {
        "role": "assistant", "id": "m1", "zeta": [1.5, -0.0, 10**18, None, True],
        "content": "héllo \U0001f600 \"quoted\" \\ back\nline",
        "toolCalls": [{"id": "c1", "type": "function",
                       "function": {"name": "f", "arguments": "{\"a\": [1]}"}}],
        "nested": {"b": {}, "a": []},
    }
    await store.write_for_run("t", resource_id="r", agent_id=None, messages=[user("u0"), odd])
    read = await store.read_for_run(
        "t", message_ids=["m1", "zz"], tool_call_ids=[], last_n=5, first_user=True
    )
    assert read.window == [user("u0"), odd] and read.stored_ids == {"m1"}
    assert list(read.window[1]) == list(odd)  # key order too
    assert read.first_user == user("u0")
    assert await store.list_messages("t") == [user("u0"), odd]
