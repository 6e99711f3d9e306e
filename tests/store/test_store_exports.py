"""The public names of the store package and the auth module."""

from __future__ import annotations

import iobridge.auth
import iobridge.protocol.messages
import iobridge.store


def test_store_package_exports() -> None:
    assert len(set(iobridge.store.__all__)) == len(iobridge.store.__all__)
    assert {"ThreadStore", "SqlThreadStore", "MemoryThreadStore", "open_store", "upgrade"} <= set(
        iobridge.store.__all__
    )
    for name in iobridge.store.__all__:
        assert getattr(iobridge.store, name) is not None


def test_module_exports_exist() -> None:
    for module in (iobridge.auth, iobridge.protocol.messages):
        assert len(set(module.__all__)) == len(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), name
