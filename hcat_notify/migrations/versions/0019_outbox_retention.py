"""The outbox's retention: how far the sweep deleted each topic's events.

``hcat-notify sweep`` deletes outbox events older than ``outbox_retention`` that nobody
still needs (docs/operations.md, "The outbox's retention"). ``hcat_outbox_pruned`` keeps,
per topic, the highest event id it deleted, so that a reader whose position is below it
gets an error instead of a silent gap; the row of topic ``*`` keeps the highest of all
and the last sweep's figures.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_TABLE = "hcat_outbox_pruned"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("pruned_through", sa.BigInteger(), nullable=False),
        sa.Column("swept_at", sa.Float(), nullable=True),
        sa.Column("held", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("topic", name="pk_hcat_outbox_pruned"),
    )
    op.execute(sa.text(f"INSERT INTO {_TABLE} (topic, pruned_through) VALUES ('*', 0)"))


def downgrade() -> None:
    op.drop_table(_TABLE)
