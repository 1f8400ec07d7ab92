"""Webhook formats: one CloudEvent per request, or a batch.

The format ``cloudevents`` now means one event per request in CloudEvents structured
mode (``application/cloudevents+json``); the batch (``application/cloudevents-batch+json``,
what ``cloudevents`` sent before) is ``cloudevents-batch``. The webhooks stored before
get ``cloudevents-batch``, so their endpoints keep getting what they got. The column
widens to hold the longer name.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_WEBHOOKS = sa.table("hcat_webhooks", sa.column("format", sa.String(32)))


def upgrade() -> None:
    with op.batch_alter_table("hcat_webhooks") as batch:
        batch.alter_column(
            "format", existing_type=sa.String(16), type_=sa.String(32), existing_nullable=False
        )
    op.execute(
        _WEBHOOKS.update()
        .where(_WEBHOOKS.c.format == "cloudevents")
        .values(format="cloudevents-batch")
    )


def downgrade() -> None:
    # before 0017 there was one CloudEvents format, the batch: structured webhooks get it
    op.execute(
        _WEBHOOKS.update()
        .where(_WEBHOOKS.c.format == "cloudevents-batch")
        .values(format="cloudevents")
    )
    with op.batch_alter_table("hcat_webhooks") as batch:
        batch.alter_column(
            "format", existing_type=sa.String(32), type_=sa.String(16), existing_nullable=False
        )
