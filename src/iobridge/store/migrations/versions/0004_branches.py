"""Branches: a thread's earlier versions after a regenerate or an edit (``replaceFrom``).

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: the thread never branched (its one branch is "main").
    op.add_column("iobridge_threads", sa.Column("current_branch", sa.String(256), nullable=True))
    op.create_table(
        "iobridge_branches",
        sa.Column(
            "thread_id",
            sa.String(256),
            sa.ForeignKey("iobridge_threads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("from_message_id", sa.String(256), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        # The branch's messages while it is not the current one (NULL while it is: then they
        # are the thread's messages).
        sa.Column("messages", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("thread_id", "id", name="pk_iobridge_branches"),
    )


def downgrade() -> None:
    op.drop_table("iobridge_branches")
    with op.batch_alter_table("iobridge_threads") as batch:
        batch.drop_column("current_branch")
