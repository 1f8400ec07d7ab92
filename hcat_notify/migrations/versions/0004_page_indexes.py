"""Indexes for the hot pages: the relay's pending events and catch-up of retained dones.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_hcat_mark_set_done_table_event", "hcat_mark_set_done", ["table_id", "event_id"]
    )
    op.create_index(
        "ix_hcat_outbox_pending",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text("published_at IS NULL"),
        postgresql_where=sa.text("published_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_outbox_pending", table_name="hcat_outbox")
    op.drop_index("ix_hcat_mark_set_done_table_event", table_name="hcat_mark_set_done")
