"""Indexes that keep the webhooks' figures flat however many topics they deliver.

``/metrics`` gives each webhook's failing and parked topics and the highest event id
delivered to it; ``status`` lists the parked (webhook, topic) pairs; ``webhooks show``
pages a webhook's topics (all, or only the failing and parked). Each reads an index, not
every progress row of every webhook: the rare rows of failing topics (``attempts > 0``,
not parked) and of parked ones are partial indexes by (webhook, topic), and the
highest position of a webhook is the last entry of its part of a (webhook, position)
index.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_TABLE = "hcat_webhook_progress"
_FAILING = "attempts > 0 AND parked_at IS NULL"
_PARKED = "parked_at IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_hcat_webhook_progress_delivered", _TABLE, ["webhook_id", "last_event_id"])
    for name, condition in (("failing", _FAILING), ("parked", _PARKED)):
        op.create_index(
            f"ix_hcat_webhook_progress_{name}",
            _TABLE,
            ["webhook_id", "topic"],
            sqlite_where=sa.text(condition),
            postgresql_where=sa.text(condition),
        )


def downgrade() -> None:
    for name in ("parked", "failing", "delivered"):
        op.drop_index(f"ix_hcat_webhook_progress_{name}", table_name=_TABLE)
