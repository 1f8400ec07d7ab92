"""Partitions: registration (with their ADD_PARTITION events), lookup, updates."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import ARRAY, Select, String, any_, bindparam, func, insert, select
from sqlalchemy.exc import IntegrityError

from hcat_notify.errors import InvalidInputError, PartitionExistsError
from hcat_notify.model.changes import AnnounceMode, PartitionChange, announce_mode
from hcat_notify.model.events import EventType
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import PartitionDetails
from hcat_notify.store import completeness
from hcat_notify.store.announce import announce_partitions
from hcat_notify.store.driver import compiled, pipelines
from hcat_notify.store.models import PartitionRow, TableRow
from hcat_notify.store.records import NewPartition, PartitionInfo, TableInfo
from hcat_notify.store.tables import EXTERNAL_TABLE, info_of, overlap_error
from hcat_notify.store.tx import Tx
from hcat_notify.store.usage import overlapping_tables
from hcat_notify.warehouse import (
    Warehouse,
    canonical_location,
    key_outside,
    key_text,
    location_key,
)

__all__ = [
    "add_partitions",
    "check_partition_locations",
    "insert_partitions",
    "keyed_location",
    "list_partitions",
    "partition_info",
    "partition_row",
    "partitions_at",
    "update_partition",
]

_LOOKUP_CHUNK = 500
"""Specs per ``IN (...)`` lookup: well under SQLite's and PostgreSQL's parameter limits."""


def partition_info(table: TableInfo, row: PartitionRow) -> PartitionInfo:
    """The record of an ORM partition row."""
    return PartitionInfo(
        table=table.name,
        spec=PartitionSpec.from_mapping(
            dict(zip(table.partition_keys, row.partition_values, strict=True))
        ),
        location=row.location,
        job_id=row.job_id,
        file_count=row.file_count,
        total_bytes=row.total_bytes,
        archived=row.archived,
        event_id=row.event_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
    )


def partition_row(tx: Tx, table_id: int, full: PartitionSpec) -> PartitionRow | None:
    """The row of the partition with exactly this full spec, or None."""
    return tx.session.execute(
        select(PartitionRow).where(
            PartitionRow.table_id == table_id, PartitionRow.path_spec == full.to_path()
        )
    ).scalar_one_or_none()


def unique_paths(specs: Sequence[PartitionSpec]) -> list[str]:
    """The specs' paths, in order.

    Raises:
        InvalidInputError: a partition is given twice (named).
    """
    paths = [spec.to_path() for spec in specs]
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise InvalidInputError(f"partition {path} is given twice")
        seen.add(path)
    return paths


def keyed_location(info: TableInfo, location: str) -> dict[str, str | None]:
    """A partition row's ``location`` (as stored) and ``outside_key``: the location's key
    when it lies outside the table's (:func:`hcat_notify.warehouse.key_outside`)."""
    return {
        "location": location,
        "outside_key": key_outside(key_text(location), key_text(info.location)),
    }


def check_partition_locations(
    tx: Tx,
    info: TableInfo,
    located: Iterable[tuple[PartitionSpec, str]],
    *,
    outside_warehouse: bool = False,
    current: str | None = None,
) -> list[str]:
    """The partition locations as stored (:func:`~hcat_notify.warehouse.canonical_location`),
    once the warehouse boundary allows them (:meth:`hcat_notify.warehouse.Warehouse.check`;
    any place for an external table). A managed table's may not be at, inside or around
    another table's location (its own location, and tables around it, excepted), nor
    another table's partition outside that table; ``current``, the existing partition's
    location, is not checked against them again (a write that keeps a partition where it
    is makes no new overlap: a purge keeps what another table registered there since).

    Raises:
        InvalidInputError: a relative path, a control character, a ``..`` segment, a
            filesystem's root, or another table's location.
        LocationOutsideWarehouseError: a managed table's partition outside the roots.
    """
    warehouse = Warehouse.of(tx.settings)
    external = info.table_type == EXTERNAL_TABLE
    stored: list[tuple[PartitionSpec, str]] = []
    for spec, location in located:
        what = f"location of partition {spec.to_path()} of {info.name}"
        where = canonical_location(location, what=what)
        warehouse.check(location, external=external, outside_warehouse=outside_warehouse, what=what)
        stored.append((spec, where))
    moved = [(spec, where) for spec, where in stored if where != current]
    if not external and moved:
        _check_partition_overlaps(tx, info, moved)
    return [where for _, where in stored]


def _check_partition_overlaps(
    tx: Tx, info: TableInfo, stored: Sequence[tuple[PartitionSpec, str]]
) -> None:
    """Refuse a partition at, inside or around another table's location, or another
    table's partition lying outside that table (indexed lookups: :func:`overlapping_tables`;
    a partition inside its own table is checked against those at or inside the table).
    Tables and partitions around the partition's own table are let be (a catalog
    registered before this check may hold such; a purge keeps what they hold)."""
    own = location_key(info.location)
    # stored locations are resolved already (canonical_location)
    keyed = [(spec, where, location_key(where, resolve=False)) for spec, where in stored]
    outside = [key for _, _, key in keyed if not key.within(own)]
    tables = [
        (use, other)
        for _, use, other in overlapping_tables(tx, [own, *outside], partitions=True)
        if use.table != str(info.name)
    ]
    for spec, where, key in keyed:
        for use, other in tables:
            if key.within(own) and own.within(other):
                continue  # a table around this table: not a new overlap
            if key.overlaps(other):
                what = f"location of partition {spec.to_path()} of {info.name}"
                raise overlap_error(what, where, key, use, other)


def insert_partitions(
    tx: Tx,
    row: TableRow,
    info: TableInfo,
    items: Sequence[tuple[PartitionSpec, NewPartition]],
    *,
    job_id: str | None,
    mode: AnnounceMode | None = None,
    outside_warehouse: bool = False,
) -> list[PartitionInfo]:
    """Partition rows and their ADD_PARTITION events, in one go.

    ``mode`` overrides the table's announce mode (one message per partition, or per
    write). Every location is checked first (:func:`check_partition_locations`).
    """
    locations = check_partition_locations(
        tx,
        info,
        ((spec, item.location) for spec, item in items),
        outside_warehouse=outside_warehouse,
    )
    items = [
        (spec, dataclasses.replace(item, location=where) if where != item.location else item)
        for (spec, item), where in zip(items, locations, strict=True)
    ]
    event_ids: list[int | None] = [None] * len(items)
    if items:
        changes = [
            PartitionChange(
                spec,
                PartitionDetails(
                    location=item.location,
                    file_count=item.file_count,
                    total_bytes=item.total_bytes,
                    job_id=job_id,
                ),
            )
            for spec, item in items
        ]
        event_ids = list(
            announce_partitions(
                tx,
                info,
                EventType.ADD_PARTITION,
                changes,
                mode=announce_mode(info.properties, mode),
                job_id=job_id,
                row=row,
            )
        )
    values: list[dict[str, Any]] = []
    inserted: list[PartitionInfo] = []
    table_key = key_text(info.location)
    for (spec, item), event_id in zip(items, event_ids, strict=True):
        fields: dict[str, Any] = {
            "location": item.location,
            "job_id": job_id,
            "file_count": item.file_count,
            "total_bytes": item.total_bytes,
            "archived": item.archived,
            "event_id": event_id,
            "created_at": tx.now,
            "updated_at": tx.now,
            "version": 1,
        }
        values.append(
            {
                "table_id": row.id,
                "partition_values": list(spec.values),
                "path_spec": spec.to_path(),
                "outside_key": key_outside(key_text(item.location), table_key),
                **fields,
            }
        )
        inserted.append(PartitionInfo(table=info.name, spec=spec, **fields))
    if values:
        # One statement for the lot (no ORM object per partition); a row that another
        # writer registered meanwhile fails it on the (table, path) unique constraint.
        try:
            tx.session.execute(insert(PartitionRow), values)
        except IntegrityError as exc:
            raise PartitionExistsError(
                f"a partition of {info.name} was registered concurrently: "
                f"{values[0]['path_spec']}..."
            ) from exc
    return inserted


def _registered_check(dialect: str) -> Select[str]:
    """The first of some paths (``b_paths``, an array) that a table (``b_table``) has
    registered: PostgreSQL, for the driver."""
    del dialect  # one form
    return select(func.min(PartitionRow.path_spec)).where(
        PartitionRow.table_id == bindparam("b_table"),
        PartitionRow.path_spec == any_(bindparam("b_paths", type_=ARRAY(String))),
    )


def _registered_counting(
    tx: Tx, row: TableRow, info: TableInfo, specs: Sequence[PartitionSpec], paths: list[str]
) -> str | None:
    """The first of ``paths`` that the table has registered already, checked in one
    round trip with the counting writes of the new partitions ``specs`` on their sets'
    rows (:func:`completeness.count_ahead`; PostgreSQL)."""
    dialect = tx.session.connection().dialect
    check = compiled(dialect, _registered_check).bind({"b_table": row.id, "b_paths": paths})
    found = completeness.count_ahead(tx, row, info.name, specs, check)
    return None if found is None else cast(tuple[str | None], found)[0]


def add_partitions(
    tx: Tx,
    row: TableRow,
    partitions: Sequence[NewPartition],
    *,
    job_id: str | None = None,
    mode: AnnounceMode | None = None,
    outside_warehouse: bool = False,
    count_ahead: bool = False,
) -> list[PartitionInfo]:
    """Register new partitions and their ADD_PARTITION events (see the Catalog method).
    ``count_ahead``: the transaction does nothing else, so its sets may be counted
    with the check that none is registered (:func:`completeness.count_ahead`), where the
    driver sends them together."""
    info = info_of(row)
    specs = [info.spec(item.spec, partial=False) for item in partitions]
    paths = unique_paths(specs)
    if count_ahead and info.rule_version is not None and pipelines(tx.session.get_bind().dialect):
        # the sets' counting writes go with the check: no round trip of their own
        existing = _registered_counting(tx, row, info, specs, paths)
    else:
        existing = tx.session.scalars(
            select(PartitionRow.path_spec).where(
                PartitionRow.table_id == row.id, PartitionRow.path_spec.in_(paths)
            )
        ).first()
    if existing is not None:
        raise PartitionExistsError(f"partition {existing} of {info.name} is already registered")
    return insert_partitions(
        tx,
        row,
        info,
        list(zip(specs, partitions, strict=True)),
        job_id=job_id,
        mode=mode,
        outside_warehouse=outside_warehouse,
    )


def _path_prefix(info: TableInfo, wanted: PartitionSpec) -> str | None:
    """The path prefix every partition matching ``wanted`` starts with, when ``wanted``
    fixes the table's first key(s): ``k1=v1/`` (``k1=v1/k2=v2`` for a full spec)."""
    values = wanted.as_dict()
    fixed: list[str] = []
    for key in info.partition_keys:
        if key not in values:
            break
        fixed.append(PartitionSpec(((key, values[key]),)).to_path())
    if not fixed:
        return None
    prefix = "/".join(fixed)
    return prefix if len(fixed) == len(info.partition_keys) else prefix + "/"


def list_partitions(
    tx: Tx,
    row: TableRow,
    spec: PartitionSpec | Mapping[str, str | None] | None = None,
    *,
    after: str | None = None,
    limit: int | None = None,
) -> list[PartitionInfo]:
    """Partitions of a table in path order, optionally only those matching a partial
    spec, only those after the path ``after``, at most ``limit`` of them."""
    info = info_of(row)
    wanted = info.spec(spec, partial=True) if spec is not None else None
    query = select(PartitionRow).where(PartitionRow.table_id == row.id)
    prefix = _path_prefix(info, wanted) if wanted is not None else None
    if prefix is not None:
        # the spec fixes the leading keys: only rows under that path prefix are read and
        # decoded (LIKE may ignore case; covers() below stays exact)
        query = query.where(PartitionRow.path_spec.startswith(prefix, autoescape=True))
    query = query.order_by(PartitionRow.path_spec)
    found: list[PartitionInfo] = []
    # Read in chunks: a filter on later keys drops rows after the SQL limit applies.
    chunk = None if limit is None else max(limit, _LOOKUP_CHUNK)
    while True:
        page = query if after is None else query.where(PartitionRow.path_spec > after)
        rows = list(tx.session.scalars(page if chunk is None else page.limit(chunk)))
        for prow in rows:
            partition = partition_info(info, prow)
            if wanted is None or wanted.covers(partition.spec):
                found.append(partition)
                if limit is not None and len(found) >= limit:
                    return found
        if chunk is None or len(rows) < chunk:
            return found
        after = rows[-1].path_spec


def partitions_at(
    tx: Tx, row: TableRow, specs: Iterable[PartitionSpec | Mapping[str, str | None]]
) -> dict[str, PartitionInfo]:
    """The registered partitions among ``specs`` (full specs), by their path form."""
    info = info_of(row)
    found: dict[str, PartitionInfo] = {}
    paths = sorted({info.spec(spec, partial=False).to_path() for spec in specs})
    for start in range(0, len(paths), _LOOKUP_CHUNK):
        rows = tx.session.scalars(
            select(PartitionRow).where(
                PartitionRow.table_id == row.id,
                PartitionRow.path_spec.in_(paths[start : start + _LOOKUP_CHUNK]),
            )
        )
        for prow in rows:
            partition = partition_info(info, prow)
            found[partition.spec.to_path()] = partition
    return found


def update_partition(
    tx: Tx,
    row: TableRow,
    spec: PartitionSpec | Mapping[str, str | None],
    *,
    expected_version: int,
    changes: Mapping[str, Any],
) -> PartitionInfo:
    """Change a partition's location or sizes, compare-and-set on its version."""
    info = info_of(row)
    full = info.spec(spec, partial=False)
    prow = partition_row(tx, row.id, full)
    if prow is None:
        raise InvalidInputError(f"partition {full} of {info.name} is not registered")
    if "location" in changes:
        where = check_partition_locations(tx, info, [(full, changes["location"])])[0]
        changes = {**changes, **keyed_location(info, where)}
    tx.compare_and_set(prow, expected_version, f"partition {full} of {info.name}", **changes)
    return partition_info(info, prow)
