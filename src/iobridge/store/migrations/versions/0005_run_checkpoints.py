"""Run checkpoints: what a durable run needs to go on in another process.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iobridge_run_checkpoints",
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("run_id", sa.String(256), nullable=False),
        sa.Column("thread_id", sa.String(256), nullable=False),
        sa.Column("resource_id", sa.String(256), nullable=False),
        sa.Column("agent_id", sa.String(256), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("nbytes", sa.Integer(), nullable=False),
        sa.Column("base", sa.Text(), nullable=False),
        sa.Column("point", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "run_id", name="pk_iobridge_run_checkpoints"),
    )
    op.create_index(
        "ix_iobridge_run_checkpoints_holder", "iobridge_run_checkpoints", ["holder", "phase"]
    )
    op.create_table(
        "iobridge_run_tool_results",
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("run_id", sa.String(256), nullable=False),
        sa.Column("tool_call_id", sa.String(256), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "owner", "run_id", "tool_call_id", name="pk_iobridge_run_tool_results"
        ),
    )


def downgrade() -> None:
    op.drop_table("iobridge_run_tool_results")
    op.drop_table("iobridge_run_checkpoints")
