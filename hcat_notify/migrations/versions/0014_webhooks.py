"""Webhook subscriptions and their delivery progress per topic (issue 30).

``hcat_webhooks`` holds one row per endpoint: its name, URL, table patterns, event kinds,
format, state (active, paused, disabled), its signing secret (and during a rotation the
previous one, with when it stops signing), stored encrypted when the operator configures
a key, and the event id delivery starts after. ``hcat_webhook_progress`` holds, per
(endpoint, topic), the highest event id delivered (written fenced by the topic's bucket
and its epoch, as relay progress is) and the failures of the events after it: attempts,
when to try again, since when it fails, the last error, and when it was parked.
Times are seconds since the epoch.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hcat_webhooks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("tables", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=True),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_until", sa.Float(), nullable=True),
        sa.Column("start_after", sa.BigInteger(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_webhooks"),
        sa.UniqueConstraint("name", name="uq_hcat_webhooks_name"),
    )
    op.create_table(
        "hcat_webhook_progress",
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("retry_at", sa.Float(), nullable=True),
        sa.Column("failing_since", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("parked_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["hcat_webhooks.id"],
            name="fk_hcat_webhook_progress_webhook_id_hcat_webhooks",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("webhook_id", "topic", name="pk_hcat_webhook_progress"),
    )
    op.create_index("ix_hcat_webhook_progress_bucket", "hcat_webhook_progress", ["bucket"])


def downgrade() -> None:
    op.drop_index("ix_hcat_webhook_progress_bucket", table_name="hcat_webhook_progress")
    op.drop_table("hcat_webhook_progress")
    op.drop_table("hcat_webhooks")
