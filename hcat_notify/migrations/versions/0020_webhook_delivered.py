"""A webhook's highest delivered event id on its own row, not in an index of its
progress rows.

0018 read it as the last entry of a (webhook, position) index of
``hcat_webhook_progress``; but a 2xx recorded moves a topic's position, so on PostgreSQL
every such update changed an indexed column: never a heap-only (HOT) update, a new entry
in each index of the table every time. ``hcat_webhooks.delivered_event_id`` keeps it
instead (its start before any), moved forward by the recorder's fence, which updates the
webhook's row anyway; it starts at what the index gave. On PostgreSQL the progress table
also leaves each page 10% free (fillfactor 90) for the new versions of its rows: pages
written from now on (existing ones fill as rows move; ``VACUUM FULL hcat_webhook_progress``
rewrites them all at once).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_PROGRESS = "hcat_webhook_progress"
_INDEX = "ix_hcat_webhook_progress_delivered"
_FILLFACTOR = 90


def upgrade() -> None:
    # in place, on SQLite too: a batch would copy hcat_webhooks and drop it, and the drop
    # deletes every progress row by their foreign key's ON DELETE CASCADE
    op.add_column(
        "hcat_webhooks",
        sa.Column(
            "delivered_event_id", sa.BigInteger(), nullable=False, server_default=sa.text("0")
        ),
    )
    # each webhook's highest position, the last entry of its part of the index (a seek)
    op.execute(
        "UPDATE hcat_webhooks SET delivered_event_id = coalesce("
        f"(SELECT max(p.last_event_id) FROM {_PROGRESS} p WHERE p.webhook_id = hcat_webhooks.id),"
        " start_after)"
    )
    op.execute(
        "UPDATE hcat_webhooks SET delivered_event_id = start_after "
        "WHERE delivered_event_id < start_after"
    )
    op.drop_index(_INDEX, table_name=_PROGRESS)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {_PROGRESS} SET (fillfactor = {_FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {_PROGRESS} RESET (fillfactor)")
    op.create_index(_INDEX, _PROGRESS, ["webhook_id", "last_event_id"])
    op.execute("ALTER TABLE hcat_webhooks DROP COLUMN delivered_event_id")  # SQLite >= 3.35
