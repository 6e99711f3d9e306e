"""Thread state and interrupts: what a run leaves for the next one.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns: existing threads simply have no state and no interrupts yet.
    op.add_column("iobridge_threads", sa.Column("state", sa.JSON(), nullable=True))
    op.add_column("iobridge_threads", sa.Column("interrupts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("iobridge_threads") as batch:
        batch.drop_column("interrupts")
        batch.drop_column("state")
