"""The sets not done, and the sets done by when, indexed apart.

``/metrics`` counts, per table with a completeness rule, its late sets and the parts
missing from its sets not done, and the done latencies of the last day: partial indexes
of those rows (the sets still open; the dones by time, with the latency's columns)
instead of a scan of every set ever done.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_NOT_DONE = "state <> 'done'"
_DONE = "state = 'done'"


def upgrade() -> None:
    op.create_index(
        "ix_hcat_set_states_not_done",
        "hcat_set_states",
        ["table_id", "last_change_at"],
        sqlite_where=sa.text(_NOT_DONE),
        postgresql_where=sa.text(_NOT_DONE),
    )
    op.create_index(
        "ix_hcat_set_states_done_at",
        "hcat_set_states",
        ["done_at", "done_reason", "last_change_at"],
        sqlite_where=sa.text(_DONE),
        postgresql_where=sa.text(_DONE),
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_set_states_done_at", table_name="hcat_set_states")
    op.drop_index("ix_hcat_set_states_not_done", table_name="hcat_set_states")
