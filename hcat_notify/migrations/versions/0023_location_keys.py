"""Locations stored canonical, and keyed for indexed overlap lookups.

Versions before the trust boundary's fixes stored a location as the caller spelled it:
``local:/x``, ``LOCAL:///x``, ``file:/x``, ``file://localhost/x``, a path through a
symlink. The overlap checks and a purge's search for holders look a directory up by the
spellings the current code stores, so such a row was not seen as holding a directory,
and a purge could delete another table's data there (docs/operations.md, "Warehouse
roots"). This migration rewrites every table and partition location to the spelling the
current code stores (:func:`hcat_notify.warehouse.canonical_location`, copied as it
stands at this revision into ``hcat_notify.migrations.frozen``: a migration imports no
live code):

* an absolute path: its real path (``os.path.realpath`` on the migrating machine);
* a ``file:`` or ``local:`` URI (any case) with no host or ``localhost`` and an absolute
  path: ``file://`` and the real path;
* any other URI: as stored, without a trailing ``/``;
* a path starting with ``~`` (accepted then as the writer's home directory): the real
  path of its expansion in the home directory of the user running the upgrade;
* kept exactly as stored, because the current code refuses it and no spelling is right:
  a relative path, and a ``file:``/``local:`` URI naming another host (``file://h/x``)
  or a relative path. Such a row is never dropped: another host's ``file://h/x`` holds
  the local ``/x`` (it may be that directory: every purge keeps it, and its own purge
  never deletes it); one that names no directory (a relative path, ``file://h/``) holds
  nothing and is never deleted. Each row keyed ``""`` is logged (a warning naming the
  table or partition and its location), for the operator to register it again.

``hcat_tables.location_key`` is the location's key (``hcat_notify.warehouse.key_text``:
``file:///w/t``, ``s3:///bucket/k``, ``hdfs://nn/w``; ``""`` for one naming no
directory) and ``hcat_partitions.outside_key`` the key of a partition lying outside its
table's location (NULL for one inside, the usual case: such a row costs its index
nothing). Both are indexed, in byte order (``COLLATE "C"`` on PostgreSQL), so that "at
K" is an equality, "inside K" a range (``>= K/`` and ``< K0``) and "around K" an
equality on K's finitely many ancestors. ``location_key`` has no default afterwards on
PostgreSQL: a writer of an older version, which does not fill it, fails instead of
registering a table no check would see.

The real paths are taken on the machine that runs the upgrade: run it where the
warehouse is mounted as the writers see it. Every row is read once (200,000 partitions
took 10 s here, at load 10).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hcat_notify.migrations.frozen import (
    canonical_location_0023,
    location_key_0023,
    outside_key_0023,
)

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

logger = logging.getLogger(__name__)

_CHUNK = 5000
_TABLE_INDEX = "ix_hcat_tables_location_key"
_PARTITION_INDEX = "ix_hcat_partitions_outside_key"

_tables = sa.table(
    "hcat_tables",
    sa.column("id", sa.Integer()),
    sa.column("db_name", sa.Text()),
    sa.column("table_name", sa.Text()),
    sa.column("location", sa.Text()),
    sa.column("location_key", sa.Text()),
)
_partitions = sa.table(
    "hcat_partitions",
    sa.column("id", sa.Integer()),
    sa.column("table_id", sa.Integer()),
    sa.column("path_spec", sa.Text()),
    sa.column("location", sa.Text()),
    sa.column("outside_key", sa.Text()),
)


def _key_type(bind: sa.Connection) -> sa.types.TypeEngine[str]:
    return sa.Text(collation="C") if bind.dialect.name == "postgresql" else sa.Text()


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column(
        "hcat_tables",
        sa.Column("location_key", _key_type(bind), nullable=False, server_default=""),
    )
    op.add_column("hcat_partitions", sa.Column("outside_key", _key_type(bind), nullable=True))
    table_keys: dict[int, str] = {}
    names: dict[int, str] = {}
    query = sa.select(_tables.c.id, _tables.c.db_name, _tables.c.table_name, _tables.c.location)
    for table in bind.execute(query).all():
        names[table.id] = f"{table.db_name}.{table.table_name}"
        canonical = canonical_location_0023(table.location)
        table_keys[table.id] = location_key_0023(canonical)
        if not table_keys[table.id]:
            _unkeyed(f"table {names[table.id]}", canonical)
        bind.execute(
            _tables.update()
            .where(_tables.c.id == table.id)
            .values(location=canonical, location_key=table_keys[table.id])
        )
    update = (
        _partitions.update()
        .where(_partitions.c.id == sa.bindparam("b_id"))
        .values(location=sa.bindparam("b_location"), outside_key=sa.bindparam("b_key"))
    )
    last, seen, rewritten = 0, 0, 0
    while True:
        rows = bind.execute(
            sa.select(
                _partitions.c.id,
                _partitions.c.table_id,
                _partitions.c.path_spec,
                _partitions.c.location,
            )
            .where(_partitions.c.id > last)
            .order_by(_partitions.c.id)
            .limit(_CHUNK)
        ).all()
        if not rows:
            break
        last, seen = rows[-1].id, seen + len(rows)
        updates = []
        for row in rows:
            canonical = canonical_location_0023(row.location)
            key = location_key_0023(canonical)
            if not key:
                name = names.get(row.table_id, f"#{row.table_id}")
                _unkeyed(f"partition {row.path_spec} of table {name}", canonical)
            outside = outside_key_0023(key, table_keys.get(row.table_id, ""))
            if canonical != row.location or outside is not None:
                updates.append({"b_id": row.id, "b_location": canonical, "b_key": outside})
        if updates:
            bind.execute(update, updates)
            rewritten += len(updates)
        if seen % (20 * _CHUNK) == 0:
            logger.info("0023: %d partitions read, %d rewritten or keyed", seen, rewritten)
    logger.info("0023: %d partitions read, %d rewritten or keyed", seen, rewritten)
    if bind.dialect.name == "postgresql":  # an older writer fails rather than store ""
        op.alter_column("hcat_tables", "location_key", server_default=None)
    op.create_index(_TABLE_INDEX, "hcat_tables", ["location_key"])
    op.create_index(
        _PARTITION_INDEX,
        "hcat_partitions",
        ["outside_key"],
        sqlite_where=sa.text("outside_key IS NOT NULL"),
        postgresql_where=sa.text("outside_key IS NOT NULL"),
    )


def _unkeyed(what: str, location: str) -> None:
    logger.warning(
        "0023: %s is at %r, which names no directory this version can key (a relative "
        "path, or another host's file:// root): the overlap checks do not see what it "
        "holds and no purge deletes it; register it again at its absolute location",
        what,
        location,
    )


def downgrade() -> None:
    # the locations stay as rewritten: every version reads the canonical spellings
    op.drop_index(_PARTITION_INDEX, table_name="hcat_partitions")
    op.drop_index(_TABLE_INDEX, table_name="hcat_tables")
    op.execute("ALTER TABLE hcat_partitions DROP COLUMN outside_key")  # SQLite >= 3.35
    op.execute("ALTER TABLE hcat_tables DROP COLUMN location_key")
