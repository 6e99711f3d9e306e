"""Branches in every store (memory, SQLite, PostgreSQL): fork, list, read, switch."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.backends import BACKENDS, open_backend

from iobridge.errors import InputError
from iobridge.store.base import MAIN_BRANCH


def _m(i: str, role: str = "user") -> dict[str, str]:
    return {"id": i, "role": role, "content": f"text of {i}"}


@pytest.mark.parametrize("kind", BACKENDS)
async def test_fork_read_and_switch_keep_every_message_once(kind: str, tmp_path: Path) -> None:
    async with open_backend(kind, tmp_path) as store:
        await store.create_thread("t", resource_id="r")
        await store.append_messages("t", [_m("u1"), _m("a1", "assistant"), _m("u2"),
                                          _m("a2", "assistant")])
        [only] = await store.list_branches("t")
        assert (only.id, only.from_message_id, only.current) == (MAIN_BRANCH, None, True)
        times = {s.message["id"]: s.created_at for s in await store.list_stored_messages("t")}

        branch = await store.fork_branch("t", "a2", "b1", max_branches=4)
        assert (branch.id, branch.from_message_id, branch.current) == ("b1", "a2", True)
        assert [m["id"] for m in await store.list_messages("t")] == ["u1", "a1", "u2"]
        await store.append_messages("t", [_m("a2b", "assistant")])
        listed = await store.list_branches("t")
        assert [(b.id, b.from_message_id, b.current) for b in listed] == [
            (MAIN_BRANCH, None, False), ("b1", "a2", True)]
        main = await store.branch_messages("t", MAIN_BRANCH)
        assert main is not None
        assert [s.message["id"] for s in main] == ["u1", "a1", "u2", "a2"]
        assert {s.message["id"]: s.created_at for s in main} == times

        assert await store.switch_branch("t", MAIN_BRANCH)
        assert [m["id"] for m in await store.list_messages("t")] == ["u1", "a1", "u2", "a2"]
        assert (await store.get_thread("t")).current_branch == MAIN_BRANCH  # type: ignore[union-attr]
        b1 = await store.branch_messages("t", "b1")
        assert b1 is not None
        assert [s.message["id"] for s in b1] == ["u1", "a1", "u2", "a2b"]
        # An edit of the first message on main: a third branch.
        await store.fork_branch("t", "u1", "b2", max_branches=4)
        assert await store.list_messages("t") == []
        await store.append_messages("t", [_m("u1e")])
        assert await store.switch_branch("t", "b1")
        assert [m["id"] for m in await store.list_messages("t")] == ["u1", "a1", "u2", "a2b"]
        stored = {s.message["id"]: s.created_at for s in await store.list_stored_messages("t")}
        assert {k: stored[k] for k in ("u1", "a1", "u2")} == {k: times[k] for k in
                                                             ("u1", "a1", "u2")}
        b2 = await store.branch_messages("t", "b2")
        assert b2 is not None
        assert [s.message["id"] for s in b2] == ["u1e"]
        assert await store.branch_messages("t", "nope") is None
        assert not await store.switch_branch("t", "nope")


@pytest.mark.parametrize("kind", BACKENDS)
async def test_bad_forks_change_nothing(kind: str, tmp_path: Path) -> None:
    async with open_backend(kind, tmp_path) as store:
        await store.create_thread("t", resource_id="r")
        await store.append_messages("t", [_m("u1"), _m("a1", "assistant")])
        with pytest.raises(InputError) as refused:
            await store.fork_branch("t", "nope", "b1", max_branches=4)
        assert refused.value.code == "INVALID_REPLACE_FROM"
        await store.fork_branch("t", "a1", "b1", max_branches=2)
        await store.append_messages("t", [_m("a1b", "assistant")])
        with pytest.raises(InputError) as full:
            await store.fork_branch("t", "a1b", "b2", max_branches=2)
        assert full.value.code == "TOO_MANY_BRANCHES"
        assert [m["id"] for m in await store.list_messages("t")] == ["u1", "a1b"]
        assert [b.id for b in await store.list_branches("t")] == [MAIN_BRANCH, "b1"]
        assert await store.delete_thread("t")
        assert await store.list_branches("t") == []
