"""Initial catalog: tables, partitions, mark-set-done retention, outbox, event counter.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hcat_tables",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("db_name", sa.String(128), nullable=False),
        sa.Column("table_name", sa.String(128), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("storage_format", sa.String(16), nullable=False),
        sa.Column("partition_keys", sa.JSON(), nullable=False),
        sa.Column("table_type", sa.String(32), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("retention_seconds", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_tables"),
        sa.UniqueConstraint("db_name", "table_name", name="uq_hcat_tables_db_name"),
    )
    op.create_table(
        "hcat_partitions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("partition_values", sa.JSON(), nullable=False),
        sa.Column("path_spec", sa.Text(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_partitions"),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["hcat_tables.id"],
            name="fk_hcat_partitions_table_id_hcat_tables",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("table_id", "path_spec", name="uq_hcat_partitions_table_id"),
    )
    op.create_index("ix_hcat_partitions_event_id", "hcat_partitions", ["event_id"])
    op.create_table(
        "hcat_mark_set_done",
        sa.Column("event_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("spec_json", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_hcat_mark_set_done"),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["hcat_tables.id"],
            name="fk_hcat_mark_set_done_table_id_hcat_tables",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_hcat_mark_set_done_table_expiry",
        "hcat_mark_set_done",
        ["table_id", "expires_at", "event_id"],
    )
    op.create_index("ix_hcat_mark_set_done_table_spec", "hcat_mark_set_done", ["table_id", "spec"])
    op.create_index("ix_hcat_mark_set_done_expires_at", "hcat_mark_set_done", ["expires_at"])
    op.create_table(
        "hcat_outbox",
        sa.Column("event_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("table_name", sa.String(257), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("published_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("event_id", name="pk_hcat_outbox"),
    )
    op.create_index("ix_hcat_outbox_topic_published", "hcat_outbox", ["topic", "published_at"])
    op.create_index("ix_hcat_outbox_published_at", "hcat_outbox", ["published_at"])
    op.create_table(
        "hcat_event_counter",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_event_counter"),
    )
    op.bulk_insert(
        sa.table(
            "hcat_event_counter",
            sa.column("id", sa.Integer()),
            sa.column("last_event_id", sa.BigInteger()),
        ),
        [{"id": 1, "last_event_id": 0}],
    )


def downgrade() -> None:
    op.drop_table("hcat_event_counter")
    op.drop_index("ix_hcat_outbox_published_at", table_name="hcat_outbox")
    op.drop_index("ix_hcat_outbox_topic_published", table_name="hcat_outbox")
    op.drop_table("hcat_outbox")
    op.drop_index("ix_hcat_mark_set_done_expires_at", table_name="hcat_mark_set_done")
    op.drop_index("ix_hcat_mark_set_done_table_spec", table_name="hcat_mark_set_done")
    op.drop_index("ix_hcat_mark_set_done_table_expiry", table_name="hcat_mark_set_done")
    op.drop_table("hcat_mark_set_done")
    op.drop_index("ix_hcat_partitions_event_id", table_name="hcat_partitions")
    op.drop_table("hcat_partitions")
    op.drop_table("hcat_tables")
