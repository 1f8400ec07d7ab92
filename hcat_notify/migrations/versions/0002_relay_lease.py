"""Relay lease: one active relay owns the outbox.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hcat_relay_lease",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("acquired_at", UTCDateTime(), nullable=False),
        sa.Column("renewed_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_hcat_relay_lease"),
    )


def downgrade() -> None:
    op.drop_table("hcat_relay_lease")
