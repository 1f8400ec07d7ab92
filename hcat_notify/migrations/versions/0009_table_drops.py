"""Table drops by name: an index on the outbox's (table name, event type, event id).

A table's DROP_TABLE events are how the catalog remembers it was dropped: a consumer
asking for a dropped table gets "table X was dropped (event N)" instead of "not
registered", a consumer that was offline gets the DROP_TABLE in its catch-up, and the
catch-up of a re-created table starts after the previous table's drop. Each of those
asks for the newest DROP_TABLE of one name: one seek in this index.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_hcat_outbox_table_type_event", "hcat_outbox", ["table_name", "event_type", "event_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_outbox_table_type_event", table_name="hcat_outbox")
