"""The catalog: tables, partitions, retained mark-set-done messages and the outbox.

Every method is one short transaction. Writes that announce something (new partitions, a
mark-set-done) put their outbox events in the same transaction as their rows, so either
both exist or neither does. Rows that processes may race on carry a ``version``; their
updates are compare-and-set (``UPDATE … WHERE version = :expected``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType, TracebackType
from typing import Any

from sqlalchemy import Engine, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from hcat_notify.errors import (
    ConflictError,
    InvalidInputError,
    PartitionExistsError,
    StoreError,
    StoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
)
from hcat_notify.messages import (
    DEFAULT_TABLE_TYPE,
    EventType,
    Message,
    PartitionDetails,
    build_add_partition,
    build_mark_set_done,
)
from hcat_notify.names import TableName, validate_identifier
from hcat_notify.settings import Settings
from hcat_notify.specs import PartitionSpec
from hcat_notify.store import engine as engines
from hcat_notify.store.commits import CommitJournal, CommitPartition
from hcat_notify.store.models import (
    EventCounterRow,
    OutboxRow,
    PartitionRow,
    RelayLeaseRow,
    RetentionRow,
    TableRow,
)
from hcat_notify.topics import TOPIC_NAME_PROPERTY, resolve_topic, validate_topic_name

__all__ = [
    "DEFAULT_RETENTION",
    "OUTBOX_CHANNEL",
    "STORAGE_FORMATS",
    "Catalog",
    "Lease",
    "NewPartition",
    "OutboxEvent",
    "PartitionInfo",
    "RetainedDone",
    "TableInfo",
]

logger = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=7)
# PostgreSQL NOTIFY channel raised (at commit) by every transaction that adds events.
OUTBOX_CHANNEL = "hcat_outbox"
STORAGE_FORMATS = ("parquet", "orc", "csv", "json")
TABLE_TYPES = ("MANAGED_TABLE", "EXTERNAL_TABLE")
MAX_PARTITION_KEYS = 16


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class TableInfo:
    """A registered table, as read from the catalog."""

    name: TableName
    location: str
    storage_format: str
    partition_keys: tuple[str, ...]
    table_type: str
    properties: Mapping[str, str]
    retention: timedelta
    topic: str
    created_at: datetime
    updated_at: datetime
    version: int

    def spec(
        self, values: Mapping[str, str | None] | PartitionSpec, *, partial: bool
    ) -> PartitionSpec:
        """Validate ``values`` against this table's keys; return it in table key order."""
        spec = values if isinstance(values, PartitionSpec) else PartitionSpec.from_mapping(values)
        return spec.for_table(self.partition_keys, table=str(self.name), partial=partial)


@dataclass(frozen=True)
class PartitionInfo:
    """A registered partition."""

    table: TableName
    spec: PartitionSpec
    location: str
    job_id: str | None
    file_count: int
    total_bytes: int
    archived: bool
    event_id: int | None
    created_at: datetime
    updated_at: datetime
    version: int


@dataclass(frozen=True)
class NewPartition:
    """A partition to register: its full spec and what was written there."""

    spec: PartitionSpec | Mapping[str, str | None]
    location: str
    file_count: int = 0
    total_bytes: int = 0
    archived: bool = False


@dataclass(frozen=True)
class RetainedDone:
    """A retained MARK_SET_DONE message."""

    event_id: int
    table: TableName
    spec: PartitionSpec
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class OutboxEvent:
    """An event waiting in (or published from) the outbox."""

    event_id: int
    topic: str
    event_type: EventType
    table: str
    headers: Mapping[str, str]
    body: str
    created_at: datetime
    published_at: datetime | None = field(default=None)


@dataclass(frozen=True)
class Lease:
    """Ownership of a named resource (the outbox) until ``expires_at``."""

    name: str
    owner: str
    acquired_at: datetime
    expires_at: datetime
    version: int


def _table_info(row: TableRow, topic: str) -> TableInfo:
    return TableInfo(
        name=TableName(row.db_name, row.table_name),
        location=row.location,
        storage_format=row.storage_format,
        partition_keys=tuple(row.partition_keys),
        table_type=row.table_type,
        properties=MappingProxyType(dict(row.properties)),
        retention=timedelta(seconds=row.retention_seconds),
        topic=topic,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
    )


def _partition_info(table: TableInfo, row: PartitionRow) -> PartitionInfo:
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


# Plain column selects for the hot paths (relay, catch-up): no ORM identity map.
_OUTBOX_COLUMNS = (
    OutboxRow.event_id,
    OutboxRow.topic,
    OutboxRow.event_type,
    OutboxRow.table_name,
    OutboxRow.headers,
    OutboxRow.body,
    OutboxRow.created_at,
    OutboxRow.published_at,
)


_EVENT_TYPES = {event_type.value: event_type for event_type in EventType}
"""``EventType(value)`` as a dict lookup (the Enum call costs microseconds per row)."""


def _outbox_event(row: Any) -> OutboxEvent:
    return OutboxEvent(
        event_id=row.event_id,
        topic=row.topic,
        event_type=_EVENT_TYPES[row.event_type],
        table=row.table_name,
        headers=MappingProxyType(dict(row.headers)),
        body=row.body,
        created_at=row.created_at,
        published_at=row.published_at,
    )


_LOOKUP_CHUNK = 500
"""Specs per ``IN (...)`` lookup: well under SQLite's and PostgreSQL's parameter limits."""


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


def _as_table_name(table: TableName | str) -> TableName:
    return table if isinstance(table, TableName) else TableName.parse(table)


class Catalog:
    """The catalog database of one deployment.

    Open it with :meth:`Catalog.open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._engine = engine
        self._write_engine = engine.execution_options(hcat_write=True)
        self._settings = settings
        self._clock = clock

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool = True) -> Catalog:
        """Connect to the configured database, applying pending migrations.

        Raises:
            ConfigError: the database URL is malformed.
            StoreUnavailableError: the database cannot be reached.
        """
        engine = engines.open_engine(settings.database_url)
        if upgrade:
            try:
                engines.upgrade(engine)
            except SQLAlchemyError as exc:
                engine.dispose()
                raise StoreError(
                    f"cannot migrate database {engines.redact(engine.url)}: {exc}"
                ) from exc
        return cls(engine, settings)

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return engines.redact(self._engine.url)

    @property
    def settings(self) -> Settings:
        return self._settings

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- transactions -----------------------------------------------------------------

    @contextmanager
    def _session(self, *, write: bool = False) -> Iterator[Session]:
        engine = self._write_engine if write else self._engine
        try:
            with Session(engine, expire_on_commit=False) as session, session.begin():
                yield session
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise StoreUnavailableError(f"database {self.url} failed: {reason}") from exc

    def _allocate_event_ids(self, session: Session, count: int) -> list[int]:
        # The row lock taken here is held until commit: see EventCounterRow.
        last = session.execute(
            update(EventCounterRow)
            .where(EventCounterRow.id == 1)
            .values(last_event_id=EventCounterRow.last_event_id + count)
            .returning(EventCounterRow.last_event_id)
        ).scalar_one()
        if session.get_bind().dialect.name == "postgresql":
            # Delivered at commit, so a listening relay wakes up within milliseconds.
            session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": OUTBOX_CHANNEL})
        return list(range(last - count + 1, last + 1))

    def _table_row(self, session: Session, name: TableName) -> TableRow:
        row = session.execute(
            select(TableRow).where(TableRow.db_name == name.db, TableRow.table_name == name.table)
        ).scalar_one_or_none()
        if row is None:
            raise TableNotFoundError(
                f"table {name} is not registered (create it with 'hcat-notify table create')"
            )
        return row

    def _topic(self, row: TableRow) -> str:
        return resolve_topic(
            TableName(row.db_name, row.table_name),
            prefix=self._settings.topic_prefix,
            strategy=self._settings.topic_strategy,
            properties=row.properties,
        )

    def _info(self, row: TableRow) -> TableInfo:
        return _table_info(row, self._topic(row))

    @property
    def commits(self) -> CommitJournal:
        """The commit journal (all-or-nothing writes of many partitions)."""
        return CommitJournal(self)

    def _server(self) -> str:
        return self._settings.server_name or socket.getfqdn()

    def _compare_and_set(
        self,
        session: Session,
        row: TableRow | PartitionRow,
        expected_version: int,
        what: str,
        **values: Any,
    ) -> None:
        """``UPDATE … WHERE id = :id AND version = :expected``; no row → ConflictError.

        On success ``row`` is refreshed with the new values and version.
        """
        model = type(row)
        result = session.execute(
            update(model)
            .where(model.id == row.id, model.version == expected_version)
            .values(**values, version=expected_version + 1, updated_at=self._clock())
            .execution_options(synchronize_session=False)
        )
        if result.rowcount < 1:  # type: ignore[attr-defined]
            raise ConflictError(
                f"{what} was changed by another process (expected version "
                f"{expected_version}, found {row.version}); re-read it and retry"
            )
        session.expire(row)
        session.refresh(row)

    # -- tables -----------------------------------------------------------------------

    def create_table(
        self,
        table: TableName | str,
        *,
        location: str,
        partition_keys: Sequence[str],
        storage_format: str = "parquet",
        table_type: str = DEFAULT_TABLE_TYPE,
        properties: Mapping[str, str] | None = None,
        retention: timedelta = DEFAULT_RETENTION,
        topic: str | None = None,
    ) -> TableInfo:
        """Register a partitioned table.

        Args:
            table: ``db.table``.
            location: the table's root directory or URI.
            partition_keys: the ordered partition keys (at least one).
            storage_format: parquet, orc, csv or json.
            table_type: MANAGED_TABLE or EXTERNAL_TABLE.
            properties: table properties (``hcat.msgbus.topic.name`` overrides the topic).
            retention: how long MARK_SET_DONE messages are retained.
            topic: shorthand for the ``hcat.msgbus.topic.name`` property.

        Raises:
            InvalidInputError: a name, key, format, type or retention is invalid.
            TableExistsError: the table is already registered.
        """
        name = _as_table_name(table)
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
        fmt = storage_format.lower()
        if fmt not in STORAGE_FORMATS:
            choices = ", ".join(STORAGE_FORMATS)
            raise InvalidInputError(
                f"unknown storage format {storage_format!r}; use one of {choices}"
            )
        if table_type not in TABLE_TYPES:
            raise InvalidInputError(
                f"unknown table type {table_type!r}; use one of {', '.join(TABLE_TYPES)}"
            )
        if not location or not location.strip():
            raise InvalidInputError(f"table {name} needs a location")
        if retention <= timedelta(0):
            raise InvalidInputError(f"retention must be positive, got {retention}")
        props = {str(key): str(value) for key, value in (properties or {}).items()}
        if topic is not None:
            props[TOPIC_NAME_PROPERTY] = topic
        if TOPIC_NAME_PROPERTY in props:
            props[TOPIC_NAME_PROPERTY] = validate_topic_name(props[TOPIC_NAME_PROPERTY])
        now = self._clock()
        row = TableRow(
            db_name=name.db,
            table_name=name.table,
            location=location.strip(),
            storage_format=fmt,
            partition_keys=keys,
            table_type=table_type,
            properties=props,
            retention_seconds=int(retention.total_seconds()),
            created_at=now,
            updated_at=now,
        )
        try:
            with self._session(write=True) as session:
                exists = session.execute(
                    select(TableRow.id).where(
                        TableRow.db_name == name.db, TableRow.table_name == name.table
                    )
                ).first()
                if exists is not None:
                    raise TableExistsError(f"table {name} is already registered")
                session.add(row)
                session.flush()
                info = self._info(row)
        except IntegrityError as exc:  # lost a race with another creator
            raise TableExistsError(f"table {name} is already registered") from exc
        logger.info("registered table %s at %s, keys %s", name, row.location, keys)
        return info

    def get_table(self, table: TableName | str) -> TableInfo:
        """Return a registered table.

        Raises:
            TableNotFoundError: no such table.
        """
        name = _as_table_name(table)
        with self._session() as session:
            row = self._table_row(session, name)
            return self._info(row)

    def list_tables(self, db: str | None = None) -> list[TableInfo]:
        """All registered tables (of one database if given), sorted by name."""
        query = select(TableRow).order_by(TableRow.db_name, TableRow.table_name)
        if db is not None:
            query = query.where(TableRow.db_name == validate_identifier(db, what="database name"))
        with self._session() as session:
            return [self._info(row) for row in session.scalars(query)]

    def update_table_properties(
        self,
        table: TableName | str,
        properties: Mapping[str, str | None],
        *,
        expected_version: int,
    ) -> TableInfo:
        """Set (or, with ``None``, remove) table properties, compare-and-set on the version.

        Raises:
            TableNotFoundError: no such table.
            ConflictError: the table changed since ``expected_version`` was read.
        """
        name = _as_table_name(table)
        with self._session(write=True) as session:
            row = self._table_row(session, name)
            merged = dict(row.properties)
            for key, value in properties.items():
                if value is None:
                    merged.pop(key, None)
                elif key == TOPIC_NAME_PROPERTY:
                    merged[key] = validate_topic_name(value)
                else:
                    merged[key] = str(value)
            self._compare_and_set(
                session, row, expected_version, f"table {name}", properties=merged
            )
            return self._info(row)

    # -- partitions -------------------------------------------------------------------

    def add_partitions(
        self,
        table: TableName | str,
        partitions: Sequence[NewPartition],
        *,
        job_id: str | None = None,
        announce: bool = True,
    ) -> list[PartitionInfo]:
        """Register new partitions and, in the same transaction, their ADD_PARTITION events.

        Args:
            table: the table.
            partitions: full specs with their locations and sizes.
            job_id: the writing job, recorded on each partition and message.
            announce: add one ADD_PARTITION outbox event per partition.

        Returns:
            The registered partitions, with the event ids that announce them.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec does not name exactly the table's keys.
            PartitionExistsError: a partition is already registered (nothing is written).
        """
        name = _as_table_name(table)
        if not partitions:
            return []
        with self._session(write=True) as session:
            row = self._table_row(session, name)
            info = self._info(row)
            specs = [info.spec(item.spec, partial=False) for item in partitions]
            paths = [spec.to_path() for spec in specs]
            if len(set(paths)) != len(paths):
                duplicate = next(path for path in paths if paths.count(path) > 1)
                raise InvalidInputError(f"partition {duplicate} is given twice")
            existing = session.scalars(
                select(PartitionRow.path_spec).where(
                    PartitionRow.table_id == row.id, PartitionRow.path_spec.in_(paths)
                )
            ).first()
            if existing is not None:
                raise PartitionExistsError(f"partition {existing} of {name} is already registered")
            rows = self._insert_partitions(
                session,
                row,
                info,
                [(spec, item) for spec, item in zip(specs, partitions, strict=True)],
                job_id=job_id,
                now=self._clock(),
                announce=announce,
            )
            try:
                session.flush()
            except IntegrityError as exc:  # lost a race with another writer
                raise PartitionExistsError(
                    f"a partition of {name} was registered concurrently: {paths[0]}..."
                ) from exc
            return [_partition_info(info, prow) for prow in rows]

    def _insert_partitions(
        self,
        session: Session,
        row: TableRow,
        info: TableInfo,
        items: Sequence[tuple[PartitionSpec, NewPartition | CommitPartition]],
        *,
        job_id: str | None,
        now: datetime,
        announce: bool = True,
    ) -> list[PartitionRow]:
        """Partition rows and, if ``announce``, their ADD_PARTITION events, in one go."""
        event_ids: list[int | None] = (
            list(self._allocate_event_ids(session, len(items))) if announce else [None] * len(items)
        )
        rows = []
        for (spec, item), event_id in zip(items, event_ids, strict=True):
            prow = PartitionRow(
                table_id=row.id,
                partition_values=list(spec.values),
                path_spec=spec.to_path(),
                location=item.location,
                job_id=job_id,
                file_count=item.file_count,
                total_bytes=item.total_bytes,
                archived=item.archived,
                event_id=event_id,
                created_at=now,
                updated_at=now,
            )
            rows.append(prow)
            session.add(prow)
            if event_id is None:
                continue
            message = build_add_partition(
                event_id=event_id,
                table=info.name,
                topic=info.topic,
                partition=spec,
                timestamp=int(now.timestamp()),
                server=self._server(),
                service_principal=self._settings.broker_user,
                table_type=info.table_type,
                details=PartitionDetails(
                    location=item.location,
                    file_count=item.file_count,
                    total_bytes=item.total_bytes,
                    job_id=job_id,
                ),
            )
            session.add(self._outbox_row(message, info.name, now))
        return rows

    def list_partitions(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None] | None = None,
    ) -> list[PartitionInfo]:
        """Partitions of a table, optionally only those matching a partial spec.

        Raises:
            TableNotFoundError: no such table.
            UnknownPartitionKeyError: the spec names a key the table does not have.
        """
        name = _as_table_name(table)
        with self._session() as session:
            row = self._table_row(session, name)
            info = self._info(row)
            wanted = info.spec(spec, partial=True) if spec is not None else None
            query = select(PartitionRow).where(PartitionRow.table_id == row.id)
            prefix = _path_prefix(info, wanted) if wanted is not None else None
            if prefix is not None:
                # the spec fixes the leading keys: only rows under that path prefix are
                # read and decoded (LIKE may ignore case; covers() below stays exact)
                query = query.where(PartitionRow.path_spec.startswith(prefix, autoescape=True))
            rows = session.scalars(query.order_by(PartitionRow.path_spec))
            found = [_partition_info(info, prow) for prow in rows]
        if wanted is None:
            return found
        return [partition for partition in found if wanted.covers(partition.spec)]

    def partitions_at(
        self, table: TableName | str, specs: Iterable[PartitionSpec | Mapping[str, str | None]]
    ) -> dict[str, PartitionInfo]:
        """The registered partitions among ``specs`` (full specs), by their path form.

        One indexed lookup per 500 specs, however many partitions the table has.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec is not a full spec of the table.
        """
        name = _as_table_name(table)
        found: dict[str, PartitionInfo] = {}
        with self._session() as session:
            row = self._table_row(session, name)
            info = self._info(row)
            paths = sorted({info.spec(spec, partial=False).to_path() for spec in specs})
            for start in range(0, len(paths), _LOOKUP_CHUNK):
                rows = session.scalars(
                    select(PartitionRow).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_(paths[start : start + _LOOKUP_CHUNK]),
                    )
                )
                for prow in rows:
                    partition = _partition_info(info, prow)
                    found[partition.spec.to_path()] = partition
        return found

    def get_partition(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> PartitionInfo | None:
        """The partition with exactly this full spec, or None."""
        name = _as_table_name(table)
        with self._session() as session:
            row = self._table_row(session, name)
            info = self._info(row)
            full = info.spec(spec, partial=False)
            prow = self._partition_row(session, row.id, full)
            return None if prow is None else _partition_info(info, prow)

    @staticmethod
    def _partition_row(session: Session, table_id: int, full: PartitionSpec) -> PartitionRow | None:
        return session.execute(
            select(PartitionRow).where(
                PartitionRow.table_id == table_id, PartitionRow.path_spec == full.to_path()
            )
        ).scalar_one_or_none()

    def update_partition(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None],
        *,
        expected_version: int,
        location: str | None = None,
        file_count: int | None = None,
        total_bytes: int | None = None,
        archived: bool | None = None,
    ) -> PartitionInfo:
        """Change a partition's location or sizes, compare-and-set on its version.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: no such partition.
            ConflictError: the partition changed since ``expected_version`` was read.
        """
        name = _as_table_name(table)
        changes: dict[str, Any] = {
            key: value
            for key, value in {
                "location": location,
                "file_count": file_count,
                "total_bytes": total_bytes,
                "archived": archived,
            }.items()
            if value is not None
        }
        with self._session(write=True) as session:
            row = self._table_row(session, name)
            info = self._info(row)
            full = info.spec(spec, partial=False)
            prow = self._partition_row(session, row.id, full)
            if prow is None:
                raise InvalidInputError(f"partition {full} of {name} is not registered")
            self._compare_and_set(
                session, prow, expected_version, f"partition {full} of {name}", **changes
            )
            return _partition_info(info, prow)

    # -- mark-set-done and retention --------------------------------------------------

    def mark_set_done(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> int:
        """Record a MARK_SET_DONE: retention row and outbox event in one transaction.

        Args:
            table: the table.
            spec: any non-empty subset of the table's partition keys, any order.

        Returns:
            The event id.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: empty spec, or a key that is not a partition key.
        """
        name = _as_table_name(table)
        with self._session(write=True) as session:
            row = self._table_row(session, name)
            info = self._info(row)
            canonical = info.spec(spec, partial=True).sorted()
            event_id = self._add_mark_set_done(session, row, info, canonical, self._clock())
        logger.info("mark-set-done %s %s as event %d", name, canonical, event_id)
        return event_id

    def _add_mark_set_done(
        self,
        session: Session,
        row: TableRow,
        info: TableInfo,
        canonical: PartitionSpec,
        now: datetime,
    ) -> int:
        """Retention row and outbox event of a MARK_SET_DONE, in the caller's transaction."""
        (event_id,) = self._allocate_event_ids(session, 1)
        message = build_mark_set_done(
            event_id=event_id,
            table=info.name,
            topic=info.topic,
            spec=canonical,
            timestamp=int(now.timestamp()),
        )
        session.add(
            RetentionRow(
                event_id=event_id,
                table_id=row.id,
                spec=canonical.to_path(),
                spec_json=canonical.as_dict(),
                created_at=now,
                expires_at=now + info.retention,
            )
        )
        session.add(self._outbox_row(message, info.name, now))
        return event_id

    def retained_dones(
        self,
        tables: Sequence[TableName | str],
        *,
        after_event_id: int = 0,
        limit: int | None = None,
    ) -> list[RetainedDone]:
        """Unexpired MARK_SET_DONE messages of the tables, in event-id order.

        Raises:
            TableNotFoundError: a table is not registered.
        """
        names = [_as_table_name(table) for table in tables]
        now = self._clock()
        with self._session() as session:
            by_id = {self._table_row(session, name).id: name for name in names}
            query = (
                select(RetentionRow)
                .where(
                    RetentionRow.table_id.in_(by_id),
                    RetentionRow.expires_at > now,
                    RetentionRow.event_id > after_event_id,
                )
                .order_by(RetentionRow.event_id)
            )
            if limit is not None:
                query = query.limit(limit)
            return [
                RetainedDone(
                    event_id=rrow.event_id,
                    table=by_id[rrow.table_id],
                    spec=PartitionSpec.from_mapping(rrow.spec_json),
                    created_at=rrow.created_at,
                    expires_at=rrow.expires_at,
                )
                for rrow in session.scalars(query)
            ]

    def find_covering_done(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> RetainedDone | None:
        """The oldest unexpired MARK_SET_DONE that covers ``spec``, or None.

        A done for ``datestamp=X`` covers ``datestamp=X/region=us``.
        """
        name = _as_table_name(table)
        now = self._clock()
        with self._session() as session:
            row = self._table_row(session, name)
            info = self._info(row)
            wanted = info.spec(spec, partial=True)
            # An equality lookup on (table, spec): at most 2^keys - 1 specs, a few rows
            # each. Expiry is checked here rather than in SQL: with a range condition on
            # expires_at, SQLite's planner walks the expiry index over every retained
            # row of the table instead (150 ms at a million rows instead of 0.1 ms).
            candidates = session.scalars(
                select(RetentionRow).where(
                    RetentionRow.table_id == row.id,
                    RetentionRow.spec.in_(wanted.covering_canonicals()),
                )
            ).all()
            rows = [item for item in candidates if item.expires_at > now]
            if not rows:
                return None
            rrow = min(rows, key=lambda item: item.event_id)
            return RetainedDone(
                event_id=rrow.event_id,
                table=name,
                spec=PartitionSpec.from_mapping(rrow.spec_json),
                created_at=rrow.created_at,
                expires_at=rrow.expires_at,
            )

    def sweep_expired(self, *, batch_size: int = 1000, max_batches: int | None = None) -> int:
        """Delete expired retention rows in batches of ``batch_size``; return how many."""
        if batch_size < 1:
            raise InvalidInputError("batch size must be at least 1")
        now = self._clock()
        removed = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            with self._session(write=True) as session:
                ids = list(
                    session.scalars(
                        select(RetentionRow.event_id)
                        .where(RetentionRow.expires_at <= now)
                        .order_by(RetentionRow.event_id)
                        .limit(batch_size)
                    )
                )
                if ids:
                    session.execute(delete(RetentionRow).where(RetentionRow.event_id.in_(ids)))
            removed += len(ids)
            batches += 1
            if len(ids) < batch_size:
                break
        return removed

    # -- outbox -----------------------------------------------------------------------

    def _outbox_row(self, message: Message, table: TableName, now: datetime) -> OutboxRow:
        return OutboxRow(
            event_id=message.event_id,
            topic=message.topic,
            event_type=message.event_type.value,
            table_name=str(table),
            headers=dict(message.headers),
            body=message.body,
            created_at=now,
        )

    def pending_events(
        self,
        *,
        after_event_id: int = 0,
        limit: int = 500,
        exclude_topics: Sequence[str] = (),
    ) -> list[OutboxEvent]:
        """Unpublished events in event-id order, at most ``limit`` of them.

        Args:
            after_event_id: only events after this id.
            limit: the most to return (bounds the relay's memory).
            exclude_topics: skip these topics (ones the broker currently refuses).
        """
        query = (
            select(*_OUTBOX_COLUMNS)
            .where(OutboxRow.published_at.is_(None), OutboxRow.event_id > after_event_id)
            .order_by(OutboxRow.event_id)
            .limit(limit)
        )
        if exclude_topics:
            query = query.where(OutboxRow.topic.not_in(list(exclude_topics)))
        with self._session() as session:
            return [_outbox_event(row) for row in session.execute(query)]

    def events(self, *, after_event_id: int = 0, limit: int = 500) -> list[OutboxEvent]:
        """All outbox events (published or not) after an event id, in order."""
        with self._session() as session:
            rows = session.execute(
                select(*_OUTBOX_COLUMNS)
                .where(OutboxRow.event_id > after_event_id)
                .order_by(OutboxRow.event_id)
                .limit(limit)
            )
            return [_outbox_event(row) for row in rows]

    def mark_published(self, event_ids: Sequence[int]) -> int:
        """Mark events published (after the broker's receipt); return how many changed."""
        if not event_ids:
            return 0
        with self._session(write=True) as session:
            result = session.execute(
                update(OutboxRow)
                .where(OutboxRow.event_id.in_(list(event_ids)), OutboxRow.published_at.is_(None))
                .values(published_at=self._clock())
                .execution_options(synchronize_session=False)
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    def outbox_backlog(self) -> tuple[int, datetime | None]:
        """(number of unpublished events, creation time of the oldest)."""
        with self._session() as session:
            count, oldest = session.execute(
                select(func.count(OutboxRow.event_id), func.min(OutboxRow.created_at)).where(
                    OutboxRow.published_at.is_(None)
                )
            ).one()
            if oldest is not None and oldest.tzinfo is None:
                oldest = oldest.replace(tzinfo=UTC)
            return int(count), oldest

    def last_published_by_topic(self) -> dict[str, datetime]:
        """The time of the latest publish per topic."""
        with self._session() as session:
            rows = session.execute(
                select(OutboxRow.topic, func.max(OutboxRow.published_at))
                .where(OutboxRow.published_at.is_not(None))
                .group_by(OutboxRow.topic)
                .order_by(OutboxRow.topic)
            ).all()
        result: dict[str, datetime] = {}
        for topic, when in rows:
            if isinstance(when, datetime):
                result[topic] = when if when.tzinfo else when.replace(tzinfo=UTC)
        return result

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        after_event_id: int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> list[OutboxEvent]:
        """What a subscriber that starts now may have missed, as the events that said it.

        Unexpired MARK_SET_DONE messages of the tables (after ``after_event_id`` if
        given) and, when a cursor is given, the ADD_PARTITION messages of partitions
        registered after it, in event-id order. Page through a large catch-up with
        ``page_after`` (the last event id of the previous page) and ``limit``.

        Raises:
            TableNotFoundError: a table is not registered.
        """
        names = [_as_table_name(table) for table in tables]
        now = self._clock()
        cursor = max(after_event_id or 0, page_after)
        with self._session() as session:
            table_ids = [self._table_row(session, name).id for name in names]
            # Two ordered index scans (retained dones; registered partitions) merged by
            # event id: each page costs the same however much precedes it.
            dones = (
                select(*_OUTBOX_COLUMNS)
                .join(RetentionRow, RetentionRow.event_id == OutboxRow.event_id)
                .where(
                    RetentionRow.table_id.in_(table_ids),
                    RetentionRow.expires_at > now,
                    RetentionRow.event_id > cursor,
                )
                .order_by(RetentionRow.event_id)
            )
            queries = [dones]
            if after_event_id is not None:
                queries.append(
                    select(*_OUTBOX_COLUMNS)
                    .join(PartitionRow, PartitionRow.event_id == OutboxRow.event_id)
                    .where(PartitionRow.table_id.in_(table_ids), PartitionRow.event_id > cursor)
                    .order_by(PartitionRow.event_id)
                )
            if limit is not None:
                queries = [query.limit(limit) for query in queries]
            streams = [[_outbox_event(row) for row in session.execute(q)] for q in queries]
        merged = heapq.merge(*streams, key=lambda event: event.event_id)
        return list(itertools.islice(merged, limit)) if limit is not None else list(merged)

    # -- leases -----------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl: timedelta) -> Lease | None:
        """Take or renew the lease ``name`` for ``owner``; None if another owner holds it.

        Compare-and-set on the lease row's version: of two processes racing for an
        expired lease, exactly one wins.
        """
        now = self._clock()
        with self._session(write=True) as session:
            row = session.get(RelayLeaseRow, name)
            if row is None:
                row = RelayLeaseRow(
                    name=name, owner=owner, acquired_at=now, renewed_at=now, expires_at=now + ttl
                )
                session.add(row)
                try:
                    session.flush()
                except IntegrityError:
                    return None
                return Lease(name, owner, now, row.expires_at, row.version)
            if row.owner != owner and row.expires_at > now:
                return None
            acquired = row.acquired_at if row.owner == owner else now
            result = session.execute(
                update(RelayLeaseRow)
                .where(RelayLeaseRow.name == name, RelayLeaseRow.version == row.version)
                .values(
                    owner=owner,
                    acquired_at=acquired,
                    renewed_at=now,
                    expires_at=now + ttl,
                    version=row.version + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if result.rowcount < 1:  # type: ignore[attr-defined]
                return None
            return Lease(name, owner, acquired, now + ttl, row.version + 1)

    def release_lease(self, name: str, owner: str) -> bool:
        """Give the lease up if ``owner`` holds it; return whether it did."""
        with self._session(write=True) as session:
            result = session.execute(
                delete(RelayLeaseRow).where(
                    RelayLeaseRow.name == name, RelayLeaseRow.owner == owner
                )
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    def get_lease(self, name: str) -> Lease | None:
        """The current holder of the lease ``name`` (possibly expired), or None."""
        with self._session() as session:
            row = session.get(RelayLeaseRow, name)
            if row is None:
                return None
            return Lease(row.name, row.owner, row.acquired_at, row.expires_at, row.version)
