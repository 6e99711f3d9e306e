"""Threads and their AG-UI messages, owned by a resourceId (SQLite, PostgreSQL, or memory)."""

from iobridge.store.base import Thread, ThreadStore
from iobridge.store.memory_store import MemoryThreadStore
from iobridge.store.migrate import MEMORY_URL, open_store, upgrade
from iobridge.store.sqlalchemy_store import DEFAULT_DATABASE_URL, SqlThreadStore

__all__ = [
    "DEFAULT_DATABASE_URL",
    "MEMORY_URL",
    "MemoryThreadStore",
    "SqlThreadStore",
    "Thread",
    "ThreadStore",
    "open_store",
    "upgrade",
]
