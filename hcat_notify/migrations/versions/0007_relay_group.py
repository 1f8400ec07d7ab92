"""The relay group: buckets, members, a controller, per-topic progress, subscribers.

Replaces the single outbox lease and the per-event ``published_at`` mark: an event is
published when its topic's progress has reached it. Existing published marks become
progress (up to the first event of the topic still waiting), and every outbox row gets
the bucket of its topic. The bucket count is fixed here, from the migrating process's
``relay_buckets`` setting (default 256).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import time
from collections import defaultdict

import sqlalchemy as sa
from alembic import context, op

from hcat_notify.migrations.frozen import DEFAULT_BUCKETS, UTCDateTime, topic_bucket_0007

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    settings = context.config.attributes.get("settings")
    count = (settings.relay_buckets if settings is not None else None) or DEFAULT_BUCKETS
    now = time.time()
    group = op.create_table(
        "hcat_relay_group",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("bucket_count", sa.Integer(), nullable=False),
        sa.Column("controller_id", sa.String(255), nullable=True),
        sa.Column("controller_epoch", sa.BigInteger(), nullable=False),
        sa.Column("controller_expires", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_hcat_relay_group"),
    )
    op.bulk_insert(
        group,
        [
            {
                "id": 1,
                "bucket_count": count,
                "controller_id": None,
                "controller_epoch": 0,
                "controller_expires": 0.0,
                "version": 1,
            }
        ],
    )
    op.create_table(
        "hcat_relay_members",
        sa.Column("member_id", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("events_per_second", sa.Float(), nullable=False),
        sa.Column("backlog", sa.BigInteger(), nullable=False),
        sa.Column("topics", sa.Integer(), nullable=False),
        sa.Column("bucket_loads", sa.JSON(), nullable=False),
        sa.Column("oldest_unpublished", sa.Float(), nullable=True),
        sa.Column("leaving", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("member_id", name="pk_hcat_relay_members"),
    )
    op.create_table(
        "hcat_topic_progress",
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("topic", name="pk_hcat_topic_progress"),
    )
    op.create_index("ix_hcat_topic_progress_bucket", "hcat_topic_progress", ["bucket"])
    op.create_table(
        "hcat_subscribers",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_hcat_subscribers"),
    )
    op.create_table(
        "hcat_subscriber_watermarks",
        sa.Column("subscriber", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscriber"],
            ["hcat_subscribers.name"],
            name="fk_hcat_subscriber_watermarks_subscriber_hcat_subscribers",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subscriber", "topic", name="pk_hcat_subscriber_watermarks"),
    )

    # Every outbox row in the bucket of its topic; progress from the published marks.
    connection = op.get_bind()
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.add_column(sa.Column("bucket", sa.Integer(), nullable=True))
    outbox = sa.table(
        "hcat_outbox",
        sa.column("event_id", sa.BigInteger),
        sa.column("topic", sa.String),
        sa.column("bucket", sa.Integer),
        sa.column("published_at", UTCDateTime()),
        sa.column("parked_at", UTCDateTime()),
    )
    topics = [row[0] for row in connection.execute(sa.select(outbox.c.topic).distinct())]
    for topic in topics:
        connection.execute(
            outbox.update()
            .where(outbox.c.topic == topic)
            .values(bucket=topic_bucket_0007(topic, count))
        )
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.alter_column("bucket", existing_type=sa.Integer(), nullable=False)
    waiting = dict(
        connection.execute(
            sa.select(outbox.c.topic, sa.func.min(outbox.c.event_id))
            .where(outbox.c.published_at.is_(None), outbox.c.parked_at.is_(None))
            .group_by(outbox.c.topic)
        ).all()
    )
    highest = dict(
        connection.execute(
            sa.select(outbox.c.topic, sa.func.max(outbox.c.event_id)).group_by(outbox.c.topic)
        ).all()
    )
    progress_rows = []
    through: dict[int, int] = defaultdict(lambda: 2**62)
    for topic, top in highest.items():
        done = waiting[topic] - 1 if topic in waiting else top
        bucket = topic_bucket_0007(topic, count)
        through[bucket] = min(through[bucket], done)
        if done > 0:
            progress_rows.append(
                {
                    "topic": topic,
                    "bucket": bucket,
                    "last_event_id": done,
                    "epoch": 0,
                    "updated_at": now,
                }
            )
    progress = sa.table(
        "hcat_topic_progress",
        sa.column("topic", sa.String),
        sa.column("bucket", sa.Integer),
        sa.column("last_event_id", sa.BigInteger),
        sa.column("epoch", sa.BigInteger),
        sa.column("updated_at", sa.Float),
    )
    if progress_rows:
        op.bulk_insert(progress, progress_rows)
    buckets = op.create_table(
        "hcat_relay_buckets",
        sa.Column("bucket", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("moved_at", sa.Float(), nullable=False),
        sa.Column("rebalanced_at", sa.Float(), nullable=False),
        sa.Column("published_through", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", name="pk_hcat_relay_buckets"),
    )
    op.create_index("ix_hcat_relay_buckets_owner", "hcat_relay_buckets", ["owner"])
    op.bulk_insert(
        buckets,
        [
            {
                "bucket": bucket,
                "owner": None,
                "epoch": 0,
                "moved_at": 0.0,
                "rebalanced_at": 0.0,
                "published_through": max(0, through[bucket]) if bucket in through else 0,
            }
            for bucket in range(count)
        ],
    )

    op.drop_index("ix_hcat_outbox_pending", table_name="hcat_outbox")
    op.drop_index("ix_hcat_outbox_published_at", table_name="hcat_outbox")
    op.drop_index("ix_hcat_outbox_topic_published", table_name="hcat_outbox")
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.drop_column("published_at")
    op.create_index("ix_hcat_outbox_bucket_event", "hcat_outbox", ["bucket", "event_id"])
    op.create_index("ix_hcat_outbox_topic_event", "hcat_outbox", ["topic", "event_id"])
    op.drop_table("hcat_relay_lease")


def downgrade() -> None:
    op.create_table(
        "hcat_relay_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("acquired_at", UTCDateTime(), nullable=False),
        sa.Column("renewed_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_hcat_relay_lease"),
    )
    op.drop_index("ix_hcat_outbox_topic_event", table_name="hcat_outbox")
    op.drop_index("ix_hcat_outbox_bucket_event", table_name="hcat_outbox")
    with op.batch_alter_table("hcat_outbox") as batch:
        batch.add_column(sa.Column("published_at", UTCDateTime(), nullable=True))
        batch.drop_column("bucket")
    op.execute(
        "UPDATE hcat_outbox SET published_at = created_at WHERE parked_at IS NULL AND "
        "event_id <= (SELECT p.last_event_id FROM hcat_topic_progress p "
        "WHERE p.topic = hcat_outbox.topic)"
    )
    op.create_index("ix_hcat_outbox_topic_published", "hcat_outbox", ["topic", "published_at"])
    op.create_index("ix_hcat_outbox_published_at", "hcat_outbox", ["published_at"])
    op.create_index(
        "ix_hcat_outbox_pending",
        "hcat_outbox",
        ["event_id"],
        sqlite_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
        postgresql_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
    )
    op.drop_table("hcat_relay_buckets")
    op.drop_table("hcat_subscriber_watermarks")
    op.drop_table("hcat_subscribers")
    op.drop_index("ix_hcat_topic_progress_bucket", table_name="hcat_topic_progress")
    op.drop_table("hcat_topic_progress")
    op.drop_table("hcat_relay_members")
    op.drop_table("hcat_relay_group")
