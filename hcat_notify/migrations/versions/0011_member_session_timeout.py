"""Each relay member's session timeout, recorded with its row.

A member is dead when its heartbeat is older than its own session timeout (the relay's
``--session-timeout``), not the reader's default: the controller, ``hcat-notify
status``, the status page and ``/metrics`` judge every member by the timeout it joined
with. Rows written before this migration get the relays' default (3 s).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hcat_relay_members") as batch:
        batch.add_column(
            sa.Column("session_timeout", sa.Float(), nullable=False, server_default=sa.text("3"))
        )


def downgrade() -> None:
    with op.batch_alter_table("hcat_relay_members") as batch:
        batch.drop_column("session_timeout")
