"""The topics a durable subscriber follows, stored at each claim.

The outbox's sweep held, for a durable subscriber, every topic from its floor: the
catalog knew its watermarks, not the tables it reads, so one long-lived subscriber kept
almost everything above its start (docs/operations.md, "The outbox's retention").
``hcat_subscriber_topics`` keeps the topics of its subscriptions, replaced at each claim,
and ``hcat_subscriber_tables`` the tables (a table re-created under another topic is
still held); ``hcat_subscribers.followed`` how many topics (NULL: claimed by a version
before this one; such a subscriber holds every topic until it next starts), and
``followed_version`` the row's ``version`` the storing claim set (another ``version``: a
claim by an older library, which bumps it and leaves the stored topics stale; such a
subscriber holds every topic too). The sweep looks the followers up by topic and by
table: an index of (topic, subscriber) and (table_name, subscriber) beside the primary
keys, which the claim's replacement and the subscriber's removal use. ``hcat_outbox_pruned.claims``
counts the claims that followed topics anew (on the row of ``*``, which a sweep's batch
locks and reads anyway): a batch judged before such a claim judges again.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_TABLE = "hcat_subscriber_topics"
_INDEX = "ix_hcat_subscriber_topics_topic"
_TABLES = "hcat_subscriber_tables"
_TABLES_INDEX = "ix_hcat_subscriber_tables_table_name"


def upgrade() -> None:
    # in place, on SQLite too: a batch would copy hcat_subscribers and drop it, and the
    # drop deletes every watermark by their foreign key's ON DELETE CASCADE
    op.add_column("hcat_subscribers", sa.Column("followed", sa.Integer(), nullable=True))
    op.add_column("hcat_subscribers", sa.Column("followed_version", sa.Integer(), nullable=True))
    op.create_table(
        _TABLE,
        sa.Column("subscriber", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscriber"],
            ["hcat_subscribers.name"],
            name="fk_hcat_subscriber_topics_subscriber_hcat_subscribers",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subscriber", "topic", name="pk_hcat_subscriber_topics"),
    )
    op.create_index(_INDEX, _TABLE, ["topic", "subscriber"])
    op.create_table(
        _TABLES,
        sa.Column("subscriber", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(257), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscriber"],
            ["hcat_subscribers.name"],
            name="fk_hcat_subscriber_tables_subscriber_hcat_subscribers",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subscriber", "table_name", name="pk_hcat_subscriber_tables"),
    )
    op.create_index(_TABLES_INDEX, _TABLES, ["table_name", "subscriber"])
    op.add_column(
        "hcat_outbox_pruned",
        sa.Column("claims", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE hcat_outbox_pruned DROP COLUMN claims")  # SQLite >= 3.35
    op.drop_index(_INDEX, table_name=_TABLE)
    op.drop_table(_TABLE)
    op.drop_index(_TABLES_INDEX, table_name=_TABLES)
    op.drop_table(_TABLES)
    op.execute("ALTER TABLE hcat_subscribers DROP COLUMN followed_version")  # SQLite >= 3.35
    op.execute("ALTER TABLE hcat_subscribers DROP COLUMN followed")  # SQLite >= 3.35
