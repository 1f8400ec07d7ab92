"""Completeness rules: each table's versioned rule, each set's state, dones' generations.

``hcat_set_rules`` keeps every version of a table's rule (a null rule: removed; the
current rule is the highest version, also kept on the table row, ``rule_version`` and
``set_rule``, so that writes of tables without a rule pay nothing and those with one read
it with the table). ``hcat_set_states`` holds one row per
set of a table with a rule: its generation, state, and the times the timed pass needs
(seconds since the epoch by the database's clock); ``due_at`` is when the owner of the
set's bucket must look at it next (a quiet period ending, a deadline). Retained dones
gain their set generation and why they were sent.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hcat_tables") as batch:
        batch.add_column(sa.Column("rule_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("set_rule", sa.JSON(), nullable=True))
    with op.batch_alter_table("hcat_mark_set_done") as batch:
        batch.add_column(
            sa.Column("generation", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )
        batch.add_column(sa.Column("reason", sa.String(16), nullable=True))
    op.create_table(
        "hcat_set_rules",
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("rule", sa.JSON(), nullable=True),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["hcat_tables.id"],
            name="fk_hcat_set_rules_table_id_hcat_tables",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", "version", name="pk_hcat_set_rules"),
    )
    op.create_table(
        "hcat_set_states",
        sa.Column("table_id", sa.Integer(), nullable=False),
        sa.Column("set_spec", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("rule_version", sa.Integer(), nullable=False),
        sa.Column("first_part_at", sa.Float(), nullable=True),
        sa.Column("last_change_at", sa.Float(), nullable=True),
        sa.Column("done_at", sa.Float(), nullable=True),
        sa.Column("done_reason", sa.String(16), nullable=True),
        sa.Column("done_event_id", sa.BigInteger(), nullable=True),
        sa.Column("late_emitted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("deadline_at", sa.Float(), nullable=True),
        sa.Column("due_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["table_id"],
            ["hcat_tables.id"],
            name="fk_hcat_set_states_table_id_hcat_tables",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("table_id", "set_spec", name="pk_hcat_set_states"),
    )
    op.create_index("ix_hcat_set_states_bucket_due", "hcat_set_states", ["bucket", "due_at"])


def downgrade() -> None:
    op.drop_index("ix_hcat_set_states_bucket_due", table_name="hcat_set_states")
    op.drop_table("hcat_set_states")
    op.drop_table("hcat_set_rules")
    with op.batch_alter_table("hcat_mark_set_done") as batch:
        batch.drop_column("reason")
        batch.drop_column("generation")
    with op.batch_alter_table("hcat_tables") as batch:
        batch.drop_column("set_rule")
        batch.drop_column("rule_version")
