"""The catalog: the public facade over the store, a facade of sub-facades.

``catalog.tables``, ``.partitions``, ``.dones``, ``.sets``, ``.outbox``, ``.commits``,
``.group``, ``.subscriptions`` and ``.webhooks`` are thin views over the store's functions,
each method one short
transaction (:mod:`hcat_notify.store.tx`); the calls most users make
(``create_table``, ``mark_set_done``, ``find_covering_done``, ``catch_up``, ...) stay on
the catalog itself and delegate. Writes that announce something put their outbox events
in the same transaction as their rows, so either both exist or neither does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from hcat_notify.config import Settings
from hcat_notify.errors import HcatNotifyError, StoreUnavailableError
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.completeness import OnDeadline, parse_rule
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import DEFAULT_TABLE_TYPE
from hcat_notify.store import engine as engines
from hcat_notify.store import group
from hcat_notify.store.dones_view import Dones
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.group import RelayGroup
from hcat_notify.store.journal import CommitJournal
from hcat_notify.store.outbox_view import Outbox
from hcat_notify.store.partitions_view import Partitions
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    NewPartition,
    OutboxEvent,
    PartitionInfo,
    RetainedDone,
    TableInfo,
)
from hcat_notify.store.sets_view import Sets
from hcat_notify.store.subscriptions import Subscriptions
from hcat_notify.store.tables_view import Tables
from hcat_notify.store.tx import Tx, transaction
from hcat_notify.store.webhooks_view import Webhooks

__all__ = ["Catalog"]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]


def _utcnow() -> datetime:
    return datetime.now(UTC)


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
        # The sub-facades hold nothing but these: made once, not per call (the delegating
        # calls below are the schedulers' and writers' hot paths).
        self._tables = Tables(self._transaction)
        self._partitions = Partitions(self._transaction)
        checkpoint = (
            functools.partial(engines.checkpoint_passive, engine)
            if engine.dialect.name == "sqlite"
            else None
        )
        self._dones = Dones(
            self._transaction, self._fast, self._clock, self._bucket_count_now, checkpoint
        )
        self._outbox = Outbox(self._transaction, self._fast, self._clock, checkpoint)
        self._sets = Sets(self._transaction)

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        upgrade: bool | None = None,
        create: bool = True,
        idle_in_transaction: float | None = None,
    ) -> Catalog:
        """Connect to the configured database.

        Readers pass ``upgrade=False`` and never migrate. A writer (the default) creates
        the schema of an empty database and migrates a SQLite file, a development
        catalog; any other catalog behind this version is an error that names
        ``hcat-notify db upgrade`` (docs/operations.md), unless the ``db_auto_upgrade``
        setting lets writers migrate it.

        Args:
            settings: the deployment's settings (``database_url``, ``db_auto_upgrade``).
            upgrade: True: apply pending migrations (safe from many processes); False:
                never (a catalog behind this version is an error); None: as above.
            create: create the catalog (a SQLite file, the schema) if there is none; with
                False no catalog (a missing file, an empty database) is an error.
            idle_in_transaction: on PostgreSQL, the server ends this catalog's sessions
                that wait inside a transaction for longer than this (seconds), releasing
                their locks; relays set it to their session timeout.

        Raises:
            ConfigError: the database URL is malformed.
            StoreUnavailableError: the database cannot be reached, or (``create=False``)
                there is no catalog.
            StoreError: the migrations failed, or the catalog is behind this version and
                may not be migrated here.
        """
        engine = engines.open_engine(
            settings.database_url, create=create, idle_in_transaction=idle_in_transaction
        )
        try:
            engines.prepare_schema(engine, settings, migrate=upgrade, create=create)
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

    def _bucket_count_now(self) -> int:
        if self._bucket_count is None:
            with self._transaction() as tx:
                self._buckets(tx.session)
        assert self._bucket_count is not None
        return self._bucket_count

    # -- the sub-facades ---------------------------------------------------------------

    @property
    def tables(self) -> Tables:
        """Tables: create, read, change properties, drop."""
        return self._tables

    @property
    def partitions(self) -> Partitions:
        """Partitions: add, register, read, change, drop."""
        return self._partitions

    @property
    def dones(self) -> Dones:
        """MARK_SET_DONE messages: record, find the covering one, retained, sweep."""
        return self._dones

    @property
    def sets(self) -> Sets:
        """Completeness rules and the sets they judge: expect, remove, rule, state, list,
        the timed pass."""
        return self._sets

    @property
    def outbox(self) -> Outbox:
        """The outbox: events to publish, catch-up, refused and parked events."""
        return self._outbox

    @property
    def commits(self) -> CommitJournal:
        """The commit journal (all-or-nothing writes of many partitions)."""
        return CommitJournal(self._transaction)

    @property
    def subscriptions(self) -> Subscriptions:
        """Durable subscribers: owners, heartbeats, watermarks per topic."""
        return Subscriptions(self._transaction)

    @property
    def webhooks(self) -> Webhooks:
        """Webhook subscriptions: add, list, pause, rotate, replay; their delivery."""
        return Webhooks(self._transaction, self._fast)

    @property
    def group(self) -> RelayGroup:
        """The relay group: members, controller, buckets, topic progress."""
        return RelayGroup(self._transaction)

    # -- the calls users make, delegating ---------------------------------------------

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
        return self.tables.create(
            table,
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
        return self.tables.get(table)

    def list_tables(
        self,
        db: str | None = None,
        *,
        after: TableName | str | None = None,
        limit: int | None = None,
    ) -> list[TableInfo]:
        """Registered tables (of one database if given), sorted by name.

        Args:
            db: only this database's tables.
            after: only tables whose ``db.table`` sorts after this one: the last name of
                the previous page.
            limit: at most this many.
        """
        return self.tables.list(db, after=after, limit=limit)

    def add_partitions(
        self,
        table: TableName | str,
        new: Sequence[NewPartition],
        *,
        job_id: str | None = None,
        announce: AnnounceMode | None = None,
    ) -> list[PartitionInfo]:
        """Register new partitions and, in the same transaction, their ADD_PARTITION events.

        Args:
            table: the table.
            new: full specs with their locations and sizes.
            job_id: the writing job, recorded on each partition and message.
            announce: one ADD_PARTITION per partition (``partition``) or one per write
                (``write``); default: the table's ``hcat.notify.announce`` property.

        Returns:
            The registered partitions, with the event ids that announce them.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec does not name exactly the table's keys.
            PartitionExistsError: a partition is already registered (nothing is written).
        """
        return self.partitions.add(table, new, job_id=job_id, announce=announce)

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
        return self.partitions.list(table, spec, after=after, limit=limit)

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
        return self.dones.mark(table, spec)

    def find_covering_done(
        self, table: TableName | str, spec: SpecLike, *, min_generation: int | None = None
    ) -> RetainedDone | None:
        """The oldest unexpired MARK_SET_DONE that covers ``spec``, or None.

        A done for ``datestamp=X`` covers ``datestamp=X/region=us``. With
        ``min_generation``, only dones of that set generation or a later one count
        (docs/completeness.md).
        """
        return self.dones.find_covering(table, spec, min_generation=min_generation)

    def find_covering_dones(
        self, table: TableName | str, wanted: Sequence[tuple[PartitionSpec, int | None]]
    ) -> list[RetainedDone | HcatNotifyError | None]:
        """:meth:`find_covering_done` of each (spec, ``min_generation``) of one table in
        one read (as long polls of many specs of a table ask when it changes): per item
        the done, None, or the error its own lookup would raise.

        Raises:
            TableNotFoundError: no such table.
        """
        return self.dones.find_covering_each(table, wanted)

    def expect(
        self,
        table: TableName | str,
        *,
        set_keys: Sequence[str] | str,
        parts: Mapping[str, str] | Sequence[str] | None = None,
        like_previous: bool = False,
        min_partitions: int | str | None = None,
        quiet: int | str | None = None,
        deadline: str | None = None,
        deadline_after: int | str | None = None,
        on_deadline: OnDeadline | str | None = None,
        principal: str | None = None,
    ) -> int:
        """Give the table a completeness rule (``hcat-notify table expect``): the done of
        each set is then written by the transaction that brings its last expected part
        (docs/completeness.md).

        Args:
            table: the table.
            set_keys: the table's leading keys that make a set (``"datestamp"``).
            parts: the expected values of every key below the set
                (``["region=us,eu,apac", "hour=00..23"]`` or ``{"hour": "00..23"}``).
            like_previous: expect the partitions of the previous set instead.
            min_partitions: or at least this many partitions.
            quiet: done only after no change for this long (``10m``, seconds).
            deadline: ``KEY+Nd HH:MM`` (UTC) relative to the set's date value.
            deadline_after: or this long after the set's first part (``4h``).
            on_deadline: ``late`` (a SET_LATE, the default), ``done`` (a partial done) or
                ``nothing``.
            principal: who sets it (recorded).

        Returns:
            The rule's version.

        Raises:
            TableNotFoundError: no such table.
            InvalidRuleError: the rule is malformed or does not fit the table (one line
                naming the problem; nothing is written).
        """
        keys = self.get_table(table).partition_keys
        rule = parse_rule(
            keys,
            set_keys=set_keys,
            parts=parts,
            like_previous=like_previous,
            min_partitions=min_partitions,
            quiet=quiet,
            deadline=deadline,
            deadline_after=deadline_after,
            on_deadline=on_deadline,
        )
        return self.sets.expect(table, rule, principal=principal)

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
        return self.dones.retained(tables, after_event_id=after_event_id, limit=limit)

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> Sequence[OutboxEvent]:
        """What a subscriber that starts now may have missed, as the events that said it
        (:meth:`Outbox.catch_up`).

        Raises:
            TableNotFoundError: a table was never registered.
            HistoryGoneError: the outbox's retention deleted events after the cursor.
        """
        return self.outbox.catch_up(tables, cursor=cursor, page_after=page_after, limit=limit)

    def last_event_id(self) -> int:
        """The highest event id at or below which every event is committed or rolled back
        (:meth:`Outbox.last_event_id`)."""
        return self.outbox.last_event_id()
