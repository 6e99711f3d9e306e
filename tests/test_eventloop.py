"""``iobridge.eventloop.run``: the loop selection shared by ``serve`` and ``npamp run``."""

from __future__ import annotations

import asyncio
import sys

import pytest

from iobridge.eventloop import LoopUnavailable, run


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize(
    ("kind", "expected"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_run_returns_the_result_on_the_chosen_loop(kind: str, expected: str) -> None:
    assert run(_loop_module(), kind) == expected


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert run(_loop_module(), "auto") == "asyncio"


def test_uvloop_asked_for_but_missing_raises_and_closes_the_coroutine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    main = _loop_module()
    with pytest.raises(LoopUnavailable, match="uvloop is not installed"):
        run(main, "uvloop")
    assert main.cr_frame is None  # closed: no "never awaited" warning, never run
