"""Commit journal: writes in progress, for all-or-nothing commits and recovery.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hcat_commit_journal",
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("partitions", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_hcat_commit_journal"),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["hcat_tables.id"],
            name="fk_hcat_commit_journal_table_id_hcat_tables",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_hcat_commit_journal_table_state", "hcat_commit_journal", ["table_id", "state"]
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_commit_journal_table_state", table_name="hcat_commit_journal")
    op.drop_table("hcat_commit_journal")
