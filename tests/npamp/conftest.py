"""The asyncio shell's tests run on both event loops an endpoint may use."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

#: Test files (in this folder) that run on the stock loop (Python TLS, ``sslproto``) and on
#: uvloop (compiled TLS), which ``iobridge serve`` and ``iobridge npamp run`` pick by default.
BOTH_LOOPS = frozenset({"test_aio.py"})


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in BOTH_LOOPS:
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
