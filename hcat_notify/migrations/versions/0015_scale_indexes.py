"""Indexes that keep the operators' views flat however large the catalog grows.

``status`` and ``/metrics`` show the topics published last (the newest few by
``updated_at``, not every topic's row) and the events the broker refused and the relay
still tries (a partial index of the rare rows with ``attempts > 0``, not a scan of the
whole outbox); ``/metrics`` reads the tables that have a completeness rule (a partial
index of those, not a scan of every table).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_REFUSED = "attempts > 0 AND parked_at IS NULL AND dropped_at IS NULL"


def upgrade() -> None:
    op.create_index(
        "ix_hcat_tables_with_rule",
        "hcat_tables",
        ["id"],
        sqlite_where=sa.text("rule_version IS NOT NULL"),
        postgresql_where=sa.text("rule_version IS NOT NULL"),
    )
    op.create_index("ix_hcat_topic_progress_updated", "hcat_topic_progress", ["updated_at"])
    op.create_index(
        "ix_hcat_outbox_refused",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text(_REFUSED),
        postgresql_where=sa.text(_REFUSED),
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_outbox_refused", table_name="hcat_outbox")
    op.drop_index("ix_hcat_topic_progress_updated", table_name="hcat_topic_progress")
    op.drop_index("ix_hcat_tables_with_rule", table_name="hcat_tables")
