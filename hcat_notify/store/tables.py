"""Tables: registration, lookup and properties."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta

from sqlalchemy import select, tuple_
from sqlalchemy.exc import IntegrityError

from hcat_notify.errors import InvalidInputError, TableExistsError
from hcat_notify.model.changes import ANNOUNCE_PROPERTY, announce_mode
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName, validate_identifier
from hcat_notify.model.topics import TOPIC_NAME_PROPERTY, resolve_topic, validate_topic_name
from hcat_notify.model.wire import DEFAULT_TABLE_TYPE
from hcat_notify.store.announce import announce_table
from hcat_notify.store.models import TableRow
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    MAX_RETENTION,
    TableInfo,
    info_of,
)
from hcat_notify.store.tx import Tx
from hcat_notify.store.usage import LocationUse, overlapping_tables
from hcat_notify.warehouse import (
    LocationKey,
    Warehouse,
    canonical_location,
    key_text,
    location_key,
)

__all__ = [
    "EXTERNAL_TABLE",
    "MAX_PARTITION_KEYS",
    "STORAGE_FORMATS",
    "TABLE_TYPES",
    "check_overlap",
    "check_table_location",
    "create_table",
    "info_of",
    "list_tables",
    "normalise_location",
    "overlap_error",
    "update_table_properties",
]

logger = logging.getLogger(__name__)

STORAGE_FORMATS = ("parquet", "orc", "csv", "json")
EXTERNAL_TABLE = "EXTERNAL_TABLE"
TABLE_TYPES = ("MANAGED_TABLE", EXTERNAL_TABLE)
MAX_PARTITION_KEYS = 16
MIN_RETENTION = timedelta(seconds=1)


def _duration_text(value: object) -> str:
    """``3000000d``, ``90s``: a retention as a person writes it (not ``timedelta``'s
    ``3000000 days, 0:00:00``)."""
    if not isinstance(value, timedelta):
        return repr(value)
    seconds = value.total_seconds()
    return f"{int(seconds // 86400)}d" if seconds % 86400 == 0 else f"{seconds:g}s"


def normalise_location(location: str) -> str:
    """A table location as the catalog stores it (:func:`canonical_location`): a local
    path resolved (symlinks too), a URI as given.

    ``relative/dir`` and ``~/x`` are resolved against the working directory and the
    home directory of the process that registers the table, so every reader of the
    catalog sees the same place.

    Raises:
        InvalidInputError: empty, a control character, a URI without a path, a ``..``
            segment, or a filesystem's root.
    """
    if not (location.strip() if isinstance(location, str) else ""):
        raise InvalidInputError("a table needs a location (a directory path or URI)")
    return canonical_location(location, what="table location", relative=True, strip=True)


def check_table_location(
    tx: Tx,
    name: TableName,
    location: str,
    *,
    table_type: str,
    outside_warehouse: bool = False,
) -> str:
    """The table location as stored (:func:`normalise_location`), checked against the
    warehouse roots (:class:`~hcat_notify.warehouse.Warehouse`) unless the table is
    external.

    Raises:
        InvalidInputError: see :func:`normalise_location`.
        LocationOutsideWarehouseError: a managed table's location outside the roots.
    """
    where = normalise_location(location)
    Warehouse.of(tx.settings).check(
        location.strip(),
        external=table_type == EXTERNAL_TABLE,
        outside_warehouse=outside_warehouse,
        what=f"location of table {name}",
    )
    return where


def check_overlap(
    tx: Tx, name: TableName, where: str, *, table_type: str, what: str | None = None
) -> None:
    """Refuse a location (``where``, as stored) at another table's location, and for a
    managed table's data (``table_type``) one at, inside or around another table's
    location or another table's partition lying outside that table (indexed lookups):
    a purge of one would delete the other's files (docs/operations.md, "Warehouse
    roots"). ``what`` names the location in the message (the table's).

    Raises:
        InvalidInputError: naming the other table.
    """
    key = location_key(where)
    managed = table_type != EXTERNAL_TABLE
    for _, use, other in overlapping_tables(tx, [key], partitions=managed):
        if use.table == str(name):
            continue
        if key == other:
            raise InvalidInputError(f"location {where} is already the location of {_whose(use)}")
        if not managed and use.partition is None and other.within(key) and _managed(tx, use):
            raise InvalidInputError(
                f"{what or f'location of table {name}'} {where!r} contains the location of "
                f"managed table {use.table} ({use.location}): an external table may not hold "
                "a managed one (its purges would keep everything); nothing was registered"
            )
        if managed:
            raise overlap_error(what or f"location of table {name}", where, key, use, other)


def overlap_error(
    what: str, where: str, key: LocationKey, use: LocationUse, other: LocationKey
) -> InvalidInputError:
    """The error of a managed location ``where`` that overlaps the table ``use``."""
    if key == other:
        how = f"is the same location as {_whose(use)}"
    else:
        how = f"{'lies inside' if key.within(other) else 'contains'} the location of {_whose(use)}"
    return InvalidInputError(
        f"{what} {where!r} {how} ({use.location}): a managed table's files may not mix "
        "with another table's; nothing was registered"
    )


def _managed(tx: Tx, use: LocationUse) -> bool:
    return tx.table_row(TableName.parse(use.table)).table_type != EXTERNAL_TABLE


def _whose(use: LocationUse) -> str:
    if use.partition is None:
        return f"table {use.table}"
    return f"partition {use.partition} of {use.table}"


def create_table(
    tx: Tx,
    name: TableName,
    *,
    location: str,
    partition_keys: Sequence[str],
    storage_format: str = "parquet",
    table_type: str = DEFAULT_TABLE_TYPE,
    properties: Mapping[str, str] | None = None,
    retention: timedelta = DEFAULT_RETENTION,
    topic: str | None = None,
    announce: bool = True,
    outside_warehouse: bool = False,
) -> TableInfo:
    """Register a partitioned table and announce it with a CREATE_TABLE on the prefix
    topic (see :meth:`Catalog.create_table`)."""
    if isinstance(partition_keys, str):
        raise InvalidInputError(
            f"partition keys must be a sequence of names, not one string {partition_keys!r}"
        )
    keys = [validate_identifier(key, what="partition key") for key in partition_keys]
    if not keys:
        raise InvalidInputError(f"table {name} needs at least one partition key")
    if len(keys) > MAX_PARTITION_KEYS:
        raise InvalidInputError(
            f"table {name} has {len(keys)} partition keys; the limit is {MAX_PARTITION_KEYS}"
        )
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise InvalidInputError(f"partition key {duplicates[0]!r} is given twice")
    fmt = storage_format.lower() if isinstance(storage_format, str) else ""
    if fmt not in STORAGE_FORMATS:
        choices = ", ".join(STORAGE_FORMATS)
        raise InvalidInputError(f"unknown storage format {storage_format!r}; use one of {choices}")
    if table_type not in TABLE_TYPES:
        raise InvalidInputError(
            f"unknown table type {table_type!r}; use one of {', '.join(TABLE_TYPES)}"
        )
    if not isinstance(retention, timedelta) or not (MIN_RETENTION <= retention <= MAX_RETENTION):
        raise InvalidInputError(
            f"retention must be between 1 second and {MAX_RETENTION.days} days, "
            f"got {_duration_text(retention)}"
        )
    where = check_table_location(
        tx, name, location, table_type=table_type, outside_warehouse=outside_warehouse
    )
    props = {str(key): str(value) for key, value in (properties or {}).items()}
    if topic is not None:
        props[TOPIC_NAME_PROPERTY] = topic
    if TOPIC_NAME_PROPERTY in props:
        props[TOPIC_NAME_PROPERTY] = validate_topic_name(props[TOPIC_NAME_PROPERTY])
    if ANNOUNCE_PROPERTY in props:  # an unknown mode is refused before anything is written
        props[ANNOUNCE_PROPERTY] = announce_mode(props).value
    resolved_topic = resolve_topic(
        name,
        prefix=tx.settings.topic_prefix,
        strategy=tx.settings.topic_strategy,
        properties=props,
    )
    session = tx.session
    if session.execute(
        select(TableRow.id).where(TableRow.db_name == name.db, TableRow.table_name == name.table)
    ).first():
        raise TableExistsError(f"table {name} is already registered")
    check_overlap(tx, name, where, table_type=table_type)
    row = TableRow(
        db_name=name.db,
        table_name=name.table,
        location=where,
        location_key=key_text(where),
        storage_format=fmt,
        partition_keys=keys,
        table_type=table_type,
        properties=props,
        retention_seconds=int(retention.total_seconds()),
        topic=resolved_topic,
        created_at=tx.now,
        updated_at=tx.now,
        prefix_topic=tx.settings.topic_prefix,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # lost a race with another creator
        raise TableExistsError(f"table {name} is already registered") from exc
    info = info_of(row)
    if announce:
        announce_table(tx, info, EventType.CREATE_TABLE)
    logger.info("registered table %s at %s, keys %s, topic %s", name, where, keys, resolved_topic)
    return info


def list_tables(
    tx: Tx, db: str | None = None, *, after: TableName | None = None, limit: int | None = None
) -> list[TableInfo]:
    """Registered tables (of one database if given), sorted by name: those after the
    name ``after``, at most ``limit`` of them (a keyset page on the unique
    ``(db_name, table_name)`` index, as cheap at the millionth table as at the first)."""
    query = select(TableRow).order_by(TableRow.db_name, TableRow.table_name)
    if db is not None:
        query = query.where(TableRow.db_name == validate_identifier(db, what="database name"))
    if after is not None:
        query = query.where(tuple_(TableRow.db_name, TableRow.table_name) > (after.db, after.table))
    if limit is not None:
        query = query.limit(limit)
    return [info_of(row) for row in tx.session.scalars(query)]


def update_table_properties(
    tx: Tx, name: TableName, properties: Mapping[str, str | None], *, expected_version: int
) -> TableInfo:
    """Set (or, with ``None``, remove) properties, compare-and-set on the version.

    The topic is fixed at creation; changing ``hcat.msgbus.topic.name`` later changes
    the property only, as renaming a topic under running subscribers would lose messages.
    """
    row = tx.table_row(name)
    merged = dict(row.properties)
    for key, value in properties.items():
        if value is None:
            merged.pop(key, None)
            continue
        if key == ANNOUNCE_PROPERTY:
            value = announce_mode({}, value).value
        if key == TOPIC_NAME_PROPERTY:
            merged[key] = validate_topic_name(value)
        else:
            merged[key] = str(value)
    tx.compare_and_set(row, expected_version, f"table {name}", properties=merged)
    return info_of(row)
