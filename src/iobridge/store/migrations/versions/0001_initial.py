"""Threads and messages.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iobridge_threads",
        sa.Column("id", sa.String(256), primary_key=True),
        sa.Column("resource_id", sa.String(256), nullable=False),
        sa.Column("agent_id", sa.String(256), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_iobridge_threads_resource_updated",
        "iobridge_threads",
        ["resource_id", "updated_at", "id"],
    )
    op.create_index("ix_iobridge_threads_updated", "iobridge_threads", ["updated_at", "id"])
    op.create_table(
        "iobridge_messages",
        sa.Column(
            "thread_id",
            sa.String(256),
            sa.ForeignKey("iobridge_threads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.String(256), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("thread_id", "position", name="pk_iobridge_messages"),
        sa.UniqueConstraint("thread_id", "message_id", name="uq_iobridge_messages_id"),
    )
    op.create_index(
        "ix_iobridge_messages_tool_call", "iobridge_messages", ["thread_id", "tool_call_id"]
    )


def downgrade() -> None:
    op.drop_table("iobridge_messages")
    op.drop_table("iobridge_threads")
