"""Each set's counts on its row, kept by the writes, so that judging a set reads no
partitions.

``part_count`` is how many partitions are under the set; ``expected_present`` how many
of the parts its rule (of the row's ``rule_version``) expects are there, null when the
rule names no parts or the set was not counted yet. Existing sets get their
``part_count`` here; ``expected_present`` stays null (not counted), because what a rule
expects is the live code's to say: the next write to the set counts it once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_tables = sa.table(
    "hcat_tables", sa.column("id", sa.Integer()), sa.column("partition_keys", sa.JSON())
)
_partitions = sa.table(
    "hcat_partitions", sa.column("table_id", sa.Integer()), sa.column("path_spec", sa.Text())
)
_states = sa.table(
    "hcat_set_states",
    sa.column("table_id", sa.Integer()),
    sa.column("set_spec", sa.Text()),
    sa.column("part_count", sa.Integer()),
)


def _path_prefix(set_spec: str, keys: list[str]) -> tuple[str, int]:
    """A set's path prefix (keys in the table's order) from its sorted form, and its
    depth (escaped keys and values hold no ``/`` and keys no ``=``)."""
    values = dict(item.split("=", 1) for item in set_spec.split("/"))
    ordered = [f"{key}={values[key]}" for key in keys if key in values]
    return "/".join(ordered), len(ordered)


def _fill_part_counts() -> None:
    bind = op.get_bind()
    keys_of = {row.id: list(row.partition_keys) for row in bind.execute(sa.select(_tables))}
    sets: dict[int, list[str]] = {}
    for row in bind.execute(sa.select(_states.c.table_id, _states.c.set_spec)):
        sets.setdefault(row.table_id, []).append(row.set_spec)
    for table_id, specs in sets.items():
        prefixes = {spec: _path_prefix(spec, keys_of.get(table_id, [])) for spec in specs}
        depths = {depth for _, depth in prefixes.values()}
        counts: Counter[str] = Counter()
        paths = bind.execute(
            sa.select(_partitions.c.path_spec).where(_partitions.c.table_id == table_id)
        ).scalars()
        for path in paths:
            parts = path.split("/")
            for depth in depths:
                if len(parts) > depth:
                    counts["/".join(parts[:depth])] += 1
        for spec, (prefix, _) in prefixes.items():
            bind.execute(
                sa.update(_states)
                .where(_states.c.table_id == table_id, _states.c.set_spec == spec)
                .values(part_count=counts[prefix])
            )


def upgrade() -> None:
    with op.batch_alter_table("hcat_set_states") as batch:
        batch.add_column(
            sa.Column("part_count", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(sa.Column("expected_present", sa.Integer(), nullable=True))
    _fill_part_counts()


def downgrade() -> None:
    with op.batch_alter_table("hcat_set_states") as batch:
        batch.drop_column("expected_present")
        batch.drop_column("part_count")
