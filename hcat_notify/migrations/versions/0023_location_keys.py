"""Locations stored canonical, and keyed for indexed overlap lookups.

Versions before the trust boundary's fixes stored a location as the caller spelled it:
``local:/x``, ``LOCAL:///x``, ``file:/x``, ``file://localhost/x``, a path through a
symlink. The overlap checks and a purge's search for holders look a directory up by the
spellings the current code stores, so such a row was not seen as holding a directory,
and a purge could delete another table's data there (docs/operations.md, "Warehouse
roots"). This migration rewrites every table and partition location to the spelling the
current code stores (:func:`hcat_notify.warehouse.canonical_location`, reimplemented
here as it stands at this revision; a migration imports no live code):

* an absolute path: its real path (``os.path.realpath`` on the migrating machine);
* a ``file:`` or ``local:`` URI (any case) with no host or ``localhost`` and an absolute
  path: ``file://`` and the real path;
* any other URI: as stored, without a trailing ``/``;
* kept exactly as stored, because the current code refuses it and no spelling is right:
  a relative path, and a ``file:``/``local:`` URI naming another host (``file://h/x``)
  or a relative path. Such a row is never dropped: another host's ``file://h/x`` holds
  the local ``/x`` (it may be that directory: every purge keeps it, and its own purge
  never deletes it); one that names no directory (a relative path, ``file://h/``) holds
  nothing and is never deleted.

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
warehouse is mounted as the writers see it. Every row is read once (about 10 s per
million partitions here, most of it ``realpath``).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from __future__ import annotations

import logging
import os
import posixpath

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

logger = logging.getLogger(__name__)

_LOCAL = ("file", "local")
_BUCKETS = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
_CHUNK = 5000
_TABLE_INDEX = "ix_hcat_tables_location_key"
_PARTITION_INDEX = "ix_hcat_partitions_outside_key"

_tables = sa.table(
    "hcat_tables",
    sa.column("id", sa.Integer()),
    sa.column("location", sa.Text()),
    sa.column("location_key", sa.Text()),
)
_partitions = sa.table(
    "hcat_partitions",
    sa.column("id", sa.Integer()),
    sa.column("table_id", sa.Integer()),
    sa.column("location", sa.Text()),
    sa.column("outside_key", sa.Text()),
)


def _split(location: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` as Hadoop's ``Path`` splits a location."""
    colon, slash = location.find(":"), location.find("/")
    if colon <= 1 or (slash != -1 and slash < colon):
        return "", "", location
    scheme, rest = location[:colon], location[colon + 1 :]
    if rest.startswith("//"):
        end = rest.find("/", 2)
        return (scheme, rest[2:], "/") if end == -1 else (scheme, rest[2:end], rest[end:])
    return scheme, "", rest


def _another_host(scheme: str, authority: str) -> bool:
    return scheme.lower() in _LOCAL and authority.lower() not in ("", "localhost")


def _canonical(location: str) -> str:
    """The spelling the current code stores, or ``location`` where it has none."""
    scheme, authority, path = _split(location)
    if not scheme:
        return os.path.realpath(location) if location.startswith("/") else location
    if scheme.lower() in _LOCAL:
        if _another_host(scheme, authority) or not path.startswith("/"):
            return location
        return "file://" + os.path.realpath(posixpath.normpath(path))
    return location.rstrip("/") or location


def _archive(location: str) -> str:
    """A Hadoop Archive's directory on its filesystem (``har://file-/w/x.har/in``)."""
    scheme, authority, path = _split(location)
    if scheme != "har":
        return location
    under, _, host = authority.partition("-")
    segments = path.split("/")
    archive = next((i for i, s in enumerate(segments) if s.endswith(".har")), len(segments) - 1)
    path = "/".join(segments[: archive + 1])
    return f"file://{path}" if under == "file" else f"{under}://{host}{path}"


def _key(location: str) -> str:
    """The key of a stored location (symlinks not resolved again)."""
    scheme, authority, path = _split(_archive(location))
    lowered = scheme.lower()
    if lowered in ("", *_LOCAL):
        if not path.startswith("/") or (_another_host(scheme, authority) and not path.strip("/")):
            return ""
        return "file://" + posixpath.normpath(path)
    if lowered in _BUCKETS:
        return f"{_BUCKETS[lowered]}://" + posixpath.normpath(f"/{authority}/{path.lstrip('/')}")
    host = authority.rpartition("@")[2].partition(":")[0].lower()
    return f"{lowered}://{host}" + posixpath.normpath("/" + path.lstrip("/"))


def _outside(key: str, table_key: str) -> str | None:
    """``key`` when it lies outside the table's (``table_key``), else None."""
    if not key:
        return None
    if table_key and (key == table_key or key.startswith(table_key.rstrip("/") + "/")):
        return None
    return key


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
    for table in bind.execute(sa.select(_tables.c.id, _tables.c.location)).all():
        canonical = _canonical(table.location)
        table_keys[table.id] = _key(canonical)
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
            sa.select(_partitions.c.id, _partitions.c.table_id, _partitions.c.location)
            .where(_partitions.c.id > last)
            .order_by(_partitions.c.id)
            .limit(_CHUNK)
        ).all()
        if not rows:
            break
        last, seen = rows[-1].id, seen + len(rows)
        updates = []
        for row in rows:
            canonical = _canonical(row.location)
            outside = _outside(_key(canonical), table_keys.get(row.table_id, ""))
            if canonical != row.location or outside is not None:
                updates.append({"b_id": row.id, "b_location": canonical, "b_key": outside})
        if updates:
            bind.execute(update, updates)
            rewritten += len(updates)
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


def downgrade() -> None:
    # the locations stay as rewritten: every version reads the canonical spellings
    op.drop_index(_PARTITION_INDEX, table_name="hcat_partitions")
    op.drop_index(_TABLE_INDEX, table_name="hcat_tables")
    op.execute("ALTER TABLE hcat_partitions DROP COLUMN outside_key")  # SQLite >= 3.35
    op.execute("ALTER TABLE hcat_tables DROP COLUMN location_key")
