"""The catalog: the public facade over the store's aggregates.

Every method is one short transaction (:mod:`hcat_notify.store.tx`) over one or more of
the aggregate modules (tables, partitions, retention, outbox, leases, journal). Writes
that announce something put their outbox events in the same transaction as their rows,
so either both exist or neither does. Rows that processes may race on carry a
``version``; their updates are compare-and-set (``UPDATE … WHERE version = :expected``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from hcat_notify.config import Settings
from hcat_notify.errors import (
    HcatNotifyError,
    InvalidInputError,
    StoreUnavailableError,
    TableNotFoundError,
)
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import MAX_COVERING_KEYS, PartitionSpec
from hcat_notify.model.wire import DEFAULT_TABLE_TYPE
from hcat_notify.store import activity, group, outbox, partitions, retention
from hcat_notify.store import engine as engines
from hcat_notify.store import tables as table_ops
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.group import RelayGroup
from hcat_notify.store.journal import CommitJournal
from hcat_notify.store.lifecycle import Registration, TableLifecycle
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    NewPartition,
    OutboxEvent,
    PartitionInfo,
    RefusedEvent,
    RetainedDone,
    TableActivity,
    TableInfo,
    as_table_name,
)
from hcat_notify.store.subscriptions import Subscriptions
from hcat_notify.store.tx import Tx, transaction
from hcat_notify.warehouse import Warehouse

__all__ = ["Catalog"]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _lookup_spec(spec: SpecLike) -> PartitionSpec | None:
    """``spec`` for the single-statement paths, or None (the session path raises)."""
    try:
        given = spec if isinstance(spec, PartitionSpec) else PartitionSpec.from_mapping(spec)
    except HcatNotifyError:
        return None
    return given if len(given) <= MAX_COVERING_KEYS else None


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
        self._bucket_count: int | None = None  # fixed when the catalog was created
        self._fast = FastPath(engine, engines.redact(engine.url))

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool = True, create: bool = True) -> Catalog:
        """Connect to the configured database, applying pending migrations.

        Args:
            settings: the deployment's settings (``database_url``).
            upgrade: apply pending migrations (the default; safe from many processes).
            create: create the catalog (a SQLite file, the schema) if there is none; with
                False no catalog (a missing file, an empty database) is an error.

        Raises:
            ConfigError: the database URL is malformed.
            StoreUnavailableError: the database cannot be reached, or (``create=False``)
                there is no catalog.
            StoreError: the migrations failed.
        """
        engine = engines.open_engine(settings.database_url, create=create)
        try:
            if not create:
                # An empty database is no catalog: migrating would create every table.
                engines.require_catalog(engine)
            if upgrade:
                engines.upgrade(engine, settings)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, settings)

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return engines.redact(self._engine.url)

    @property
    def settings(self) -> Settings:
        return self._settings

    def schema_revision(self) -> str | None:
        """The migration the database is at (None: an empty database).

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        try:
            return engines.current_revision(self._engine)
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
            raise StoreUnavailableError(f"cannot read database {self.url}: {reason}") from exc

    def now(self) -> datetime:
        """The catalog's clock (aware UTC): the time its rows are stamped with."""
        return self._clock()

    def close(self) -> None:
        self._fast.close()
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

    @contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[Tx]:
        engine = self._write_engine if write else self._engine
        with transaction(engine, self._settings, self._clock, self.url, self._buckets) as tx:
            yield tx

    def _buckets(self, session: Session) -> int:
        if self._bucket_count is None:
            self._bucket_count = group.bucket_count(session)
        return self._bucket_count

    @property
    def commits(self) -> CommitJournal:
        """The commit journal (all-or-nothing writes of many partitions)."""
        return CommitJournal(self._transaction)

    @property
    def lifecycle(self) -> TableLifecycle:
        """Registering existing files, dropping partitions and tables (docs/lifecycle.md)."""
        return TableLifecycle(self._transaction)

    def register_partitions(
        self,
        table: TableName | str,
        locations: Mapping[str, str] | Sequence[tuple[SpecLike, str]],
        *,
        mark_set_done: SpecLike | None = None,
        announce: str | None = None,
        job_id: str | None = None,
        outside_warehouse: bool = False,
    ) -> Registration:
        """Register partitions whose files a writer other than Spark already put in place.

        Each location is checked against the warehouse roots, then its data files are
        counted and measured (through ``pyarrow.fs``, so HDFS and S3 work); then, in one
        transaction, the partitions are registered and announced (ADD_PARTITION, per
        partition or per write), with the MARK_SET_DONE if asked.

        Args:
            table: ``db.table``.
            locations: full spec (``k=v/...`` path form, or a spec/mapping) -> location.
            mark_set_done: a (partial) spec to announce as complete in the same transaction.
            announce: ``partition`` or ``write``; default the table's property.
            job_id: recorded on each partition and message.
            outside_warehouse: the operator's logged exception to the warehouse roots.

        Raises:
            TableNotFoundError: no such table.
            LocationOutsideWarehouseError: a managed table's location outside the roots.
            LocationNotFoundError: a location does not exist or holds no data files.
            InvalidInputError: a spec is not a full spec of the table (unknown key, ...).
            PartitionExistsError: a partition is registered already.
            (Nothing is registered when any of these is raised.)
        """
        from hcat_notify.files import measure_partitions

        pairs = list(locations.items()) if isinstance(locations, Mapping) else list(locations)
        info = self.get_table(table)
        if mark_set_done:
            info.done_spec(mark_set_done)  # refused before any location is measured
        new = measure_partitions(
            info, pairs, Warehouse.of(self._settings), outside_warehouse=outside_warehouse
        )
        return self.lifecycle.register_partitions(
            info.name,
            new,
            mark_set_done=mark_set_done,
            announce=announce,
            job_id=job_id,
            outside_warehouse=outside_warehouse,
        )

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
        outside_warehouse: bool = False,
    ) -> TableInfo:
        """Register a partitioned table.

        The table's topic is resolved now, from this process's topic prefix and
        strategy or the ``hcat.msgbus.topic.name`` property, and stored with it.

        Args:
            table: ``db.table``.
            location: the table's root directory or URI (a relative path is resolved).
            partition_keys: the ordered partition keys (1 to 16).
            storage_format: parquet, orc, csv or json.
            table_type: MANAGED_TABLE or EXTERNAL_TABLE.
            properties: table properties (``hcat.msgbus.topic.name`` overrides the topic).
            retention: how long MARK_SET_DONE messages are retained (1 s to 100 years).
            topic: shorthand for the ``hcat.msgbus.topic.name`` property.
            outside_warehouse: the operator's logged exception to the warehouse roots.

        Raises:
            InvalidInputError: a name, key, format, type, location or retention is
                invalid (a ``..`` segment, a filesystem's root), or another table has
                that location.
            LocationOutsideWarehouseError: a managed table's location outside the roots.
            TableExistsError: the table is already registered.
        """
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            return table_ops.create_table(
                tx,
                name,
                location=location,
                partition_keys=partition_keys,
                storage_format=storage_format,
                table_type=table_type,
                properties=properties,
                retention=retention,
                topic=topic,
                outside_warehouse=outside_warehouse,
            )

    def get_table(self, table: TableName | str) -> TableInfo:
        """Return a registered table.

        Raises:
            TableNotFoundError: no such table.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return table_ops.info_of(tx.table_row(name))

    def list_tables(self, db: str | None = None) -> list[TableInfo]:
        """All registered tables (of one database if given), sorted by name."""
        with self._transaction() as tx:
            return table_ops.list_tables(tx, db)

    def table_activity(self, *, db: str | None = None, limit: int = 200) -> list[TableActivity]:
        """The first ``limit`` tables by name (of ``db`` if given), each with its last
        partition in key order and its newest retained mark-set-done (the status page)."""
        with self._transaction() as tx:
            return activity.table_activity(tx, db=db, limit=limit)

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
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            return table_ops.update_table_properties(
                tx, name, properties, expected_version=expected_version
            )

    # -- partitions -------------------------------------------------------------------

    def add_partitions(
        self,
        table: TableName | str,
        new: Sequence[NewPartition],
        *,
        job_id: str | None = None,
        announce: bool = True,
    ) -> list[PartitionInfo]:
        """Register new partitions and, in the same transaction, their ADD_PARTITION events.

        Args:
            table: the table.
            new: full specs with their locations and sizes.
            job_id: the writing job, recorded on each partition and message.
            announce: add one ADD_PARTITION outbox event per partition.

        Returns:
            The registered partitions, with the event ids that announce them.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec does not name exactly the table's keys.
            PartitionExistsError: a partition is already registered (nothing is written).
        """
        name = as_table_name(table)
        if not new:
            return []
        with self._transaction(write=True) as tx:
            row = tx.table_row(name)
            return partitions.add_partitions(tx, row, new, job_id=job_id, announce=announce)

    def list_partitions(
        self,
        table: TableName | str,
        spec: SpecLike | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[PartitionInfo]:
        """Partitions of a table in path order, optionally only those matching a
        partial spec.

        Args:
            table: the table.
            spec: only partitions this (partial) spec covers.
            after: only partitions whose path (``k1=v1/k2=v2``) sorts after this one:
                the last path of the previous page.
            limit: at most this many.

        Raises:
            TableNotFoundError: no such table.
            UnknownPartitionKeyError: the spec names a key the table does not have.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return partitions.list_partitions(
                tx, tx.table_row(name), spec, after=after, limit=limit
            )

    def partitions_at(
        self, table: TableName | str, specs: Iterable[SpecLike]
    ) -> dict[str, PartitionInfo]:
        """The registered partitions among ``specs`` (full specs), by their path form.

        One indexed lookup per 500 specs, however many partitions the table has.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec is not a full spec of the table.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return partitions.partitions_at(tx, tx.table_row(name), specs)

    def get_partition(self, table: TableName | str, spec: SpecLike) -> PartitionInfo | None:
        """The partition with exactly this full spec, or None."""
        name = as_table_name(table)
        with self._transaction() as tx:
            row = tx.table_row(name)
            info = table_ops.info_of(row)
            prow = partitions.partition_row(tx, row.id, info.spec(spec, partial=False))
            return None if prow is None else partitions.partition_info(info, prow)

    def update_partition(
        self,
        table: TableName | str,
        spec: SpecLike,
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
        name = as_table_name(table)
        given: dict[str, Any] = {
            "location": location,
            "file_count": file_count,
            "total_bytes": total_bytes,
            "archived": archived,
        }
        changes = {key: value for key, value in given.items() if value is not None}
        with self._transaction(write=True) as tx:
            return partitions.update_partition(
                tx, tx.table_row(name), spec, expected_version=expected_version, changes=changes
            )

    # -- mark-set-done and retention --------------------------------------------------

    def mark_set_done(self, table: TableName | str, spec: SpecLike) -> int:
        """Record a MARK_SET_DONE: retention row and outbox event in one transaction.

        Args:
            table: the table.
            spec: a non-empty prefix of the table's partition keys, in any order.

        Returns:
            The event id.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: empty spec, an unknown key, or one skipping a leading key.
        """
        name = as_table_name(table)
        given = _lookup_spec(spec)
        if given is not None:
            if self._bucket_count is None:
                with self._transaction() as tx:
                    self._buckets(tx.session)
            assert self._bucket_count is not None
            try:
                event_id, canonical = self._fast.mark_set_done(
                    name, given, self._clock(), self._bucket_count
                )
            except TableNotFoundError:
                self._why_absent(name)
                raise
        else:  # the session path says what is wrong with the spec (after the table)
            with self._transaction(write=True) as tx:
                row = tx.table_row(name)
                info = table_ops.info_of(row)
                event_id, canonical = retention.add_mark_set_done(tx, row, info, spec)
        logger.info("mark-set-done %s %s as event %d", name, canonical, event_id)
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
        names = [as_table_name(table) for table in tables]
        with self._transaction() as tx:
            by_id = {tx.table_row(name).id: name for name in names}
            return retention.retained_dones(tx, by_id, after_event_id=after_event_id, limit=limit)

    def _why_absent(self, name: TableName) -> None:
        """Raise :class:`TableDroppedError` when ``name`` was dropped (the hot paths only
        see that no table of that name exists)."""
        with self._transaction() as tx:
            tx.table_row(name)

    def find_covering_done(self, table: TableName | str, spec: SpecLike) -> RetainedDone | None:
        """The oldest unexpired MARK_SET_DONE that covers ``spec``, or None.

        A done for ``datestamp=X`` covers ``datestamp=X/region=us``.
        """
        name = as_table_name(table)
        given = _lookup_spec(spec)
        if given is not None:
            try:
                return self._fast.covering_done(name, given, self._clock())
            except TableNotFoundError:
                self._why_absent(name)
                raise
        # A spec that cannot be looked up: the session path raises what is wrong, and
        # the table's absence first, as it always has.
        with self._transaction() as tx:
            row = tx.table_row(name)
            wanted = table_ops.info_of(row).spec(spec, partial=True)
            return retention.find_covering_done(tx, row, name, wanted)

    def sweep_expired(self, *, batch_size: int = 1000, max_batches: int | None = None) -> int:
        """Delete expired retention rows in batches of ``batch_size``; return how many."""
        if batch_size < 1:
            raise InvalidInputError("batch size must be at least 1")
        removed = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            with self._transaction(write=True) as tx:
                deleted = retention.delete_expired(tx, batch_size)
            removed += deleted
            batches += 1
            if deleted < batch_size:
                break
        return removed

    # -- outbox -----------------------------------------------------------------------

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
        with self._transaction() as tx:
            return outbox.pending_events(
                tx, after_event_id=after_event_id, limit=limit, exclude_topics=exclude_topics
            )

    def events(self, *, after_event_id: int = 0, limit: int = 500) -> list[OutboxEvent]:
        """All outbox events (published or not) after an event id, in order."""
        with self._transaction() as tx:
            return outbox.events(tx, after_event_id=after_event_id, limit=limit)

    def backlog_in_buckets(
        self, in_buckets: Sequence[int], *, after_event_id: int
    ) -> tuple[int, datetime | None]:
        """Events of some buckets after an id, not parked: how many, the oldest's time."""
        with self._transaction() as tx:
            return outbox.backlog_in_buckets(tx, in_buckets, after_event_id=after_event_id)

    def events_in_buckets(
        self, in_buckets: Sequence[int], *, after_event_id: int, limit: int
    ) -> list[OutboxEvent]:
        """Events of the given buckets after an id, not parked, in id order (a relay's
        page; it skips what its topics' progress says is published)."""
        with self._transaction() as tx:
            return outbox.events_in_buckets(
                tx, in_buckets, after_event_id=after_event_id, limit=limit
            )

    def last_event_id(self) -> int:
        """The highest event id at or below which every event is committed or rolled back
        (0 for a new catalog): on SQLite the last one handed out; on PostgreSQL it stays
        below the ids of transactions still open."""
        with self._transaction() as tx:
            return tx.last_event_id()

    def outbox_backlog(self) -> tuple[int, datetime | None]:
        """(number of unpublished events, creation time of the oldest)."""
        with self._transaction() as tx:
            return outbox.outbox_backlog(tx)

    def last_published_by_topic(self) -> dict[str, datetime]:
        """The time of the latest publish per topic."""
        with self._transaction() as tx:
            return outbox.last_published_by_topic(tx)

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> Sequence[OutboxEvent]:
        """What a subscriber that starts now may have missed, as the events that said it.

        Without a cursor (a consumer with no past): the unexpired MARK_SET_DONE messages
        of the tables. With one: every event of the tables after the watermark of its
        topic (see :class:`~hcat_notify.model.cursor.Cursor`), in event-id order, of
        every kind. Page through a large catch-up with ``page_after`` (the last event id
        of the previous page) and ``limit``.

        Only a table's present life counts: a table re-created under the name of a
        dropped one is caught up from after that one's DROP_TABLE, whatever the cursor.
        A dropped table (with a cursor) is caught up through its DROP_TABLE, so that a
        consumer that was away learns of the drop; without a cursor it has nothing.

        Raises:
            TableNotFoundError: a table was never registered.
            InvalidInputError: the cursor does not parse.
        """
        names = [as_table_name(table) for table in tables]
        parsed = cursor if isinstance(cursor, Cursor) else Cursor.parse(cursor)
        with self._transaction() as tx:
            return outbox.catch_up(
                tx,
                [outbox.catch_up_scope(tx, name) for name in names],
                cursor=parsed if parsed else None,
                page_after=page_after,
                limit=limit,
            )

    def record_refusal(self, event_id: int, reason: str, *, limit: int, actor: str) -> bool:
        """Count one refusal of an event by the broker; park it at the ``limit``-th.

        Args:
            event_id: the refused event.
            reason: what the broker said (kept, shown by ``hcat-notify status``).
            limit: refusals after which the event is parked as undeliverable.
            actor: who parks it (the relay's member id), for the action log.

        Returns:
            True if the event is parked (now or before).
        """
        with self._transaction(write=True) as tx:
            return outbox.record_refusal(tx, event_id, reason, limit=limit, actor=actor)

    def refused_events(self) -> list[RefusedEvent]:
        """Unpublished events the broker refused for themselves, oldest first: parked
        ones (``parked_at`` set) and ones the relay still tries."""
        with self._transaction() as tx:
            return outbox.refused_events(tx)

    def retry_parked(self, event_ids: Sequence[int], *, actor: str) -> dict[int, int]:
        """Announce parked events again, each as a new event, in one transaction.

        Returns:
            Old event id -> new event id.

        Raises:
            InvalidInputError: an event is unknown, not parked, or already handled
                (then nothing is retried).
        """
        with self._transaction(write=True) as tx:
            renumbered = {
                event_id: outbox.retry_parked(tx, event_id, actor=actor) for event_id in event_ids
            }
        for old, new in renumbered.items():
            logger.info("outbox event %d retried as event %d by %s", old, new, actor)
        return renumbered

    def drop_parked(
        self, event_ids: Sequence[int], *, actor: str, reason: str | None = None
    ) -> None:
        """Give parked events up for good (they stay in the outbox, marked dropped).

        Raises:
            InvalidInputError: an event is unknown, not parked, or already handled
                (then nothing is dropped).
        """
        with self._transaction(write=True) as tx:
            for event_id in event_ids:
                outbox.drop_parked(tx, event_id, actor=actor, reason=reason)
        logger.info("outbox events %s dropped by %s: %s", list(event_ids), actor, reason or "")

    # -- the relay group ------------------------------------------------------------

    @property
    def subscriptions(self) -> Subscriptions:
        """Durable subscribers: owners, heartbeats, watermarks per topic."""
        return Subscriptions(self._transaction)

    @property
    def group(self) -> RelayGroup:
        """The relay group: members, controller, buckets, topic progress."""
        return RelayGroup(self._transaction)
