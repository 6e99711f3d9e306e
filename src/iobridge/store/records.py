"""The SQL tables behind ``SqlThreadStore`` (SQLAlchemy Core), mirroring the Alembic head.

Schema changes go through a new migration in ``migrations/versions``; these definitions only
describe the head revision for queries.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)

__all__ = [
    "ID_LENGTH", "UTCDateTime", "branches", "checkpoints", "messages", "metadata",
    "run_tool_results", "sqlite_insert", "sqlite_time", "threads",
]

ID_LENGTH = 256


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones, so values are stored as naive
    UTC text (fixed-width, so text order is time order) and come back tagged UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return _naive_utc(value) if dialect.name == "sqlite" else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _naive_utc(value: datetime) -> datetime:
    """What SQLite keeps of ``value``: its UTC time without a time zone."""
    return value.astimezone(UTC).replace(tzinfo=None)


def sqlite_time(value: datetime) -> str:
    """``value`` as ``UTCDateTime`` stores it on SQLite (SQLAlchemy's DATETIME text of the naive
    UTC time), for values given to the driver directly."""
    return _naive_utc(value).isoformat(" ", "microseconds")


def sqlite_insert(table: Table, *columns: str) -> str:
    """An INSERT of ``columns`` (named as in ``table``) into ``table``, as SQLite's driver
    takes it: values in column order, ``?`` placeholders."""
    names = ", ".join(table.c[column].name for column in columns)
    return f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(columns))})"


metadata = MetaData()

threads = Table(
    "iobridge_threads",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("agent_id", String(ID_LENGTH), nullable=True),
    Column("title", Text, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # Revision 0002: what the last run left for the next (``store.base.Carryover``).
    Column("state", JSON(none_as_null=True), nullable=True),
    Column("interrupts", JSON(none_as_null=True), nullable=True),
    # Revision 0004: the branch the thread's messages are (NULL: it never branched).
    Column("current_branch", String(ID_LENGTH), nullable=True),
    Index("ix_iobridge_threads_resource_updated", "resource_id", "updated_at", "id"),
    Index("ix_iobridge_threads_updated", "updated_at", "id"),
)

messages = Table(
    "iobridge_messages",
    metadata,
    Column(
        "thread_id",
        String(ID_LENGTH),
        ForeignKey("iobridge_threads.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("position", Integer, nullable=False),
    Column("message_id", String(ID_LENGTH), nullable=False),
    Column("role", Text, nullable=False),
    Column("tool_call_id", Text, nullable=True),
    Column("data", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("thread_id", "position", name="pk_iobridge_messages"),
    UniqueConstraint("thread_id", "message_id", name="uq_iobridge_messages_id"),
    Index("ix_iobridge_messages_tool_call", "thread_id", "tool_call_id"),
)

#: Revision 0004: a thread's branches; ``messages`` holds a branch's messages while it is not
#: the current one (``[{"message", "createdAt"}, ...]``; NULL while it is current).
branches = Table(
    "iobridge_branches",
    metadata,
    Column(
        "thread_id",
        String(ID_LENGTH),
        ForeignKey("iobridge_threads.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("from_message_id", String(ID_LENGTH), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("messages", JSON(none_as_null=True), nullable=True),
    PrimaryKeyConstraint("thread_id", "id", name="pk_iobridge_branches"),
)

# Revision 0005: durable runs (``store.base.Checkpoint``). ``base`` is written once, with the
# run's start write; ``point`` at each later durable point (the messages so far, the calls
# it waits on, its state); ``holder`` is the replica that holds the run. The row is deleted
# with the run's end write.
checkpoints = Table(
    "iobridge_run_checkpoints",
    metadata,
    Column("owner", String(ID_LENGTH), nullable=False),
    Column("run_id", String(ID_LENGTH), nullable=False),
    Column("thread_id", String(ID_LENGTH), nullable=False),
    Column("resource_id", String(ID_LENGTH), nullable=False),
    Column("agent_id", String(ID_LENGTH), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("last_seq", Integer, nullable=False),
    Column("nbytes", Integer, nullable=False),
    Column("base", Text, nullable=False),
    Column("point", Text, nullable=False),
    Column("holder", String(ID_LENGTH), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("owner", "run_id", name="pk_iobridge_run_checkpoints"),
    Index("ix_iobridge_run_checkpoints_holder", "holder", "phase"),
)

run_tool_results = Table(
    "iobridge_run_tool_results",
    metadata,
    Column("owner", String(ID_LENGTH), nullable=False),
    Column("run_id", String(ID_LENGTH), nullable=False),
    Column("tool_call_id", String(ID_LENGTH), nullable=False),
    Column("content", Text, nullable=False),
    Column("is_error", Boolean, nullable=False),
    Column("posted_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("owner", "run_id", "tool_call_id", name="pk_iobridge_run_tool_results"),
)
