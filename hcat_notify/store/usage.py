"""Which registered tables and partitions use a place: what a purge must not delete, and
what a new location may not overlap (docs/operations.md, "Warehouse roots")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import QueryableAttribute

from hcat_notify.store.models import PartitionRow, TableRow
from hcat_notify.store.tx import Tx
from hcat_notify.warehouse import LocationKey, Warehouse, location_key, location_spellings

__all__ = [
    "LocationUse",
    "location_holders",
    "locations_mentioning",
    "overlapping_tables",
]

_CHUNK = 50
"""Fragments per statement (each is one ``LIKE``)."""
_IN_CHUNK = 500
"""Texts per ``IN (...)``."""


@dataclass(frozen=True)
class LocationUse:
    """A registered location: a table's (``partition`` None) or one partition's."""

    table: str
    partition: str | None
    location: str

    def __str__(self) -> str:
        if self.partition is None:
            return f"table {self.table} ({self.location})"
        return f"partition {self.partition} of {self.table} ({self.location})"


def _like(fragment: str) -> str:
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _matching(
    tx: Tx,
    table_where: ColumnElement[bool],
    part_where: ColumnElement[bool] | None,
    *,
    keyed: bool = False,
) -> list[LocationUse]:
    """The tables and (``part_where``) partitions matching. ``keyed``: the partitions'
    condition is on their location key, read from its index alone and their tables'
    names by id after (joined, SQLite's planner, with the statistics of a bulk-loaded
    catalog, walked a big table's partitions through the join instead)."""
    found: list[LocationUse] = []
    tables = select(TableRow.db_name, TableRow.table_name, TableRow.location).where(table_where)
    for db, name, location in tx.session.execute(tables):
        found.append(LocationUse(f"{db}.{name}", None, location))
    if part_where is None:
        return found
    if keyed:
        rows = tx.session.execute(
            select(PartitionRow.table_id, PartitionRow.path_spec, PartitionRow.location).where(
                part_where
            )
        ).all()
        names = {
            table_id: f"{db}.{name}"
            for table_id, db, name in tx.session.execute(
                select(TableRow.id, TableRow.db_name, TableRow.table_name).where(
                    TableRow.id.in_(sorted({row[0] for row in rows}))
                )
            )
        } if rows else {}  # fmt: skip
        return found + [LocationUse(names[table_id], path, where) for table_id, path, where in rows]
    partitions = (
        select(TableRow.db_name, TableRow.table_name, PartitionRow.path_spec, PartitionRow.location)
        .join(TableRow, TableRow.id == PartitionRow.table_id)
        .where(part_where)
    )
    for db, name, path, location in tx.session.execute(partitions):
        found.append(LocationUse(f"{db}.{name}", path, location))
    return found


def _equal(
    tx: Tx,
    texts: Sequence[str],
    table_column: QueryableAttribute[str],
    partition_column: QueryableAttribute[str] | QueryableAttribute[str | None] | None,
    *,
    keyed: bool = False,
) -> list[LocationUse]:
    """Every table (and partition, with ``partition_column``) whose column holds one of
    ``texts``: ``IN (...)`` lookups."""
    found: list[LocationUse] = []
    unique = sorted(set(texts))
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start : start + _IN_CHUNK]
        found += _matching(
            tx,
            table_column.in_(chunk),
            None if partition_column is None else partition_column.in_(chunk),
            keyed=keyed,
        )
    return list(dict.fromkeys(found))


def locations_at(tx: Tx, texts: Sequence[str], *, partitions: bool = True) -> list[LocationUse]:
    """Every table (and partition) whose location's text is one of ``texts``."""
    return _equal(tx, texts, TableRow.location, PartitionRow.location if partitions else None)


def _below(column: QueryableAttribute[str | None], text: str) -> ColumnElement[bool]:
    """``column`` holds a key lying strictly inside the key ``text``: a range of the index
    (``/`` is followed by ``0`` in byte order)."""
    prefix = text if text.endswith("/") else text + "/"
    return and_(column >= prefix, column < prefix[:-1] + "0")


def _keyed(
    tx: Tx,
    keys: Sequence[LocationKey],
    *,
    around: bool = True,
    partitions: bool = True,
) -> list[LocationUse]:
    """The tables (and with ``partitions``, the partitions lying outside their table)
    whose stored key is one of ``keys``, lies inside one, or (``around``) is one's
    ancestor: equality and range lookups of the location keys' indexes. A key naming a
    host is also looked up without it (``hdfs:///w`` may be ``hdfs://nn/w``)."""
    wanted = [
        spelling
        for key in keys
        for spelling in ([key, LocationKey(key.scheme, "", key.path)] if key.authority else [key])
    ]
    texts = [k.text for key in wanted for k in (key.ancestors() if around else [key])]
    ranges = sorted({key.text for key in wanted})
    outside = PartitionRow.outside_key if partitions else None
    found = _equal(tx, texts, TableRow.location_key, outside, keyed=True)
    for start in range(0, len(ranges), _CHUNK):
        chunk = ranges[start : start + _CHUNK]
        found += _matching(
            tx,
            or_(*(_below(TableRow.location_key, text) for text in chunk)),
            or_(*(_below(PartitionRow.outside_key, text) for text in chunk))
            if partitions
            else None,
            keyed=True,
        )
    return list(dict.fromkeys(found))


def _keys(directory: str, warehouse: Warehouse) -> list[LocationKey]:
    """Every key a directory may be registered under: as written and resolved, and
    through the roots' symlinks (:meth:`Warehouse.spellings`)."""
    keys = [location_key(directory), location_key(directory, resolve=False)]
    return list(dict.fromkeys(spelling for key in keys for spelling in warehouse.spellings(key)))


def location_holders(
    tx: Tx,
    directories: Sequence[str],
    warehouse: Warehouse,
    *,
    containers: bool = True,
    table: str | None = None,
) -> dict[str, list[LocationUse]]:
    """For each directory, the registered tables and partitions that use it: their
    location is it or lies inside it, or (``containers``) contains it, in any spelling,
    symlinks resolved (also those of rows stored unresolved by older versions). The
    location of ``table`` (``db.table``: the table the directories belong to) does not
    count as containing them. One read of the catalog's locations per 50 directories.
    """
    wanted = {directory: _keys(directory, warehouse) for directory in directories}
    uses = locations_mentioning(tx, sorted({key.path for keys in wanted.values() for key in keys}))
    if containers:
        around = {
            text
            for keys in wanted.values()
            for key in keys
            for ancestor in key.ancestors()[1:]
            for text in location_spellings(ancestor)
        }
        uses += locations_at(tx, sorted(around))
    # by key: a table, or a partition outside its table, that an older version stored
    # in a spelling the lookups above miss (another host's file://h/x, which may be /x)
    uses += _keyed(tx, [key for keys in wanted.values() for key in keys], around=containers)
    keyed = [(use, location_key(use.location), location_key(use.location, resolve=False))
             for use in dict.fromkeys(uses)]  # fmt: skip
    holders: dict[str, list[LocationUse]] = {}
    for directory, keys in wanted.items():
        holders[directory] = [
            use
            for use, real, text in keyed
            if any(real.within(key) or text.within(key) for key in keys)
            or (
                containers
                and not (use.partition is None and use.table == table)
                and any(key.within(real) or key.within(text) for key in keys)
            )
        ]
    return holders


def overlapping_tables(
    tx: Tx, keys: Sequence[LocationKey], *, partitions: bool = False
) -> list[tuple[LocationKey, LocationUse, LocationKey]]:
    """The registered tables (and with ``partitions``, the partitions lying outside their
    table) whose location is, contains or lies inside one of ``keys`` (resolved):
    ``(key, the use, its key)`` for each pair. Indexed lookups of the location keys
    (:func:`_keyed`), whatever the catalog's size."""
    found = []
    for use in _keyed(tx, keys, partitions=partitions):
        other = location_key(use.location)
        found += [(key, use, other) for key in keys if key.overlaps(other)]
    return found


def locations_mentioning(tx: Tx, fragments: Sequence[str]) -> list[LocationUse]:
    """Every table and partition whose location's text contains one of ``fragments``.

    A text match over every spelling (``/w/t``, ``file:///w/t``, ``har://file-/w/t/…``):
    the caller decides with :func:`hcat_notify.warehouse.location_key` which really are
    the same directory. Reads every location of the catalog once per 50 fragments.
    """
    found: list[LocationUse] = []
    unique = sorted(set(fragments))
    for start in range(0, len(unique), _CHUNK):
        likes = [_like(fragment) for fragment in unique[start : start + _CHUNK]]
        tables = select(TableRow.db_name, TableRow.table_name, TableRow.location).where(
            or_(*(TableRow.location.like(like, escape="\\") for like in likes))
        )
        for db, name, location in tx.session.execute(tables):
            found.append(LocationUse(f"{db}.{name}", None, location))
        partitions = (
            select(
                TableRow.db_name, TableRow.table_name, PartitionRow.path_spec, PartitionRow.location
            )
            .join(TableRow, TableRow.id == PartitionRow.table_id)
            .where(or_(*(PartitionRow.location.like(like, escape="\\") for like in likes)))
        )
        for db, name, path, location in tx.session.execute(partitions):
            found.append(LocationUse(f"{db}.{name}", path, location))
    return list(dict.fromkeys(found))
