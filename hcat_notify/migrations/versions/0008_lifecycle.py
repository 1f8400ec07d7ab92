"""Table lifecycle: the topic table events go to, and journal entries that create a table.

* ``hcat_tables.prefix_topic``: where the table's CREATE_TABLE and DROP_TABLE go (the
  deployment's prefix topic, as Hive's listener sends them), fixed at creation like the
  table's own topic. Existing tables get the migrating process's prefix (or ``hcat``).
* ``hcat_commit_journal.table_name`` (the table of an entry by name), ``create_table``
  (the definition of a table the entry registers) and ``table_id`` nullable, so that an
  import can journal a write whose table it registers only in the transaction that
  completes it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_DEFAULT_PREFIX = "hcat"


def upgrade() -> None:
    settings = context.config.attributes.get("settings")
    prefix = settings.topic_prefix if settings is not None else _DEFAULT_PREFIX
    # A plain ADD COLUMN: on SQLite a batch (copy and rename) of the parent table would
    # cascade-delete its partitions.
    op.add_column("hcat_tables", sa.Column("prefix_topic", sa.String(255), nullable=True))
    tables = sa.table("hcat_tables", sa.column("prefix_topic", sa.String))
    op.get_bind().execute(tables.update().values(prefix_topic=prefix))

    op.add_column("hcat_commit_journal", sa.Column("table_name", sa.String(257), nullable=True))
    op.add_column("hcat_commit_journal", sa.Column("create_table", sa.JSON(), nullable=True))
    journal = sa.table(
        "hcat_commit_journal",
        sa.column("table_id", sa.Integer),
        sa.column("table_name", sa.String),
    )
    names = sa.table(
        "hcat_tables",
        sa.column("id", sa.Integer),
        sa.column("db_name", sa.String),
        sa.column("table_name", sa.String),
    )
    qualified = (
        sa.select(names.c.db_name + sa.literal(".") + names.c.table_name)
        .where(names.c.id == journal.c.table_id)
        .scalar_subquery()
    )
    op.get_bind().execute(journal.update().values(table_name=qualified))
    with op.batch_alter_table("hcat_commit_journal") as batch:
        batch.alter_column("table_id", existing_type=sa.Integer(), nullable=True)
        batch.alter_column("table_name", existing_type=sa.String(257), nullable=False)
    op.create_index(
        "ix_hcat_commit_journal_name_state", "hcat_commit_journal", ["table_name", "state"]
    )


def downgrade() -> None:
    op.drop_index("ix_hcat_commit_journal_name_state", table_name="hcat_commit_journal")
    op.execute(sa.text("DELETE FROM hcat_commit_journal WHERE table_id IS NULL"))
    with op.batch_alter_table("hcat_commit_journal") as batch:
        batch.alter_column("table_id", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("table_name")
        batch.drop_column("create_table")
    op.drop_column("hcat_tables", "prefix_topic")
