"""Undeliverable events: refusal counts, parking, and the log of what was done to them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.add_column(
            sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("parked_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("dropped_at", UTCDateTime(), nullable=True))
    op.drop_index("ix_hcat_outbox_pending", table_name="hcat_outbox")
    op.create_index(
        "ix_hcat_outbox_pending",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
        postgresql_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
    )
    op.create_index(
        "ix_hcat_outbox_parked",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text("parked_at IS NOT NULL AND dropped_at IS NULL"),
        postgresql_where=sa.text("parked_at IS NOT NULL AND dropped_at IS NULL"),
    )
    op.create_table(
        "hcat_outbox_actions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("new_event_id", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_outbox_actions"),
    )
    op.create_index("ix_hcat_outbox_actions_event", "hcat_outbox_actions", ["event_id"])


def downgrade() -> None:
    op.drop_index("ix_hcat_outbox_actions_event", table_name="hcat_outbox_actions")
    op.drop_table("hcat_outbox_actions")
    op.drop_index("ix_hcat_outbox_parked", table_name="hcat_outbox")
    op.drop_index("ix_hcat_outbox_pending", table_name="hcat_outbox")
    op.create_index(
        "ix_hcat_outbox_pending",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text("published_at IS NULL"),
        postgresql_where=sa.text("published_at IS NULL"),
    )
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.drop_column("dropped_at")
        batch.drop_column("parked_at")
        batch.drop_column("last_error")
        batch.drop_column("attempts")
