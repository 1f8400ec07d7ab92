"""A table's topic, resolved once and stored with it.

Until now every process computed a table's topic from its own topic prefix and strategy,
so two processes configured differently disagreed. Existing tables get the topic that the
migrating process's settings (or the defaults) give, as the relay that published them
most likely had.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import context, op

from hcat_notify.migrations.frozen import DEFAULT_TOPIC_PREFIX, resolve_topic_0005

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    settings = context.config.attributes.get("settings")
    prefix = settings.topic_prefix if settings is not None else DEFAULT_TOPIC_PREFIX
    strategy = str(settings.topic_strategy) if settings is not None else "table"
    with op.batch_alter_table("hcat_tables") as batch:
        batch.add_column(sa.Column("topic", sa.String(255), nullable=True))
    tables = sa.table(
        "hcat_tables",
        sa.column("id", sa.Integer),
        sa.column("db_name", sa.String),
        sa.column("table_name", sa.String),
        sa.column("properties", sa.JSON),
        sa.column("topic", sa.String),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(tables.c.id, tables.c.db_name, tables.c.table_name, tables.c.properties)
    ).all()
    for row in rows:
        properties = row.properties
        if isinstance(properties, str):
            properties = json.loads(properties)
        topic = resolve_topic_0005(
            row.db_name,
            row.table_name,
            prefix=prefix,
            strategy=strategy,
            properties=properties or {},
        )
        connection.execute(tables.update().where(tables.c.id == row.id).values(topic=topic))
    with op.batch_alter_table("hcat_tables") as batch:
        batch.alter_column("topic", existing_type=sa.String(255), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("hcat_tables") as batch:
        batch.drop_column("topic")
