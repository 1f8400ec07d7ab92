"""``catalog.tables``: registering, reading, changing and dropping tables (a thin view
over :mod:`hcat_notify.store.tables` and :mod:`hcat_notify.store.table_changes`)."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta

from hcat_notify.model.names import TableName
from hcat_notify.model.wire import DEFAULT_TABLE_TYPE
from hcat_notify.store import activity, table_changes
from hcat_notify.store import tables as table_ops
from hcat_notify.store.paging import pages
from hcat_notify.store.records import DEFAULT_RETENTION, TableActivity, TableInfo, as_table_name
from hcat_notify.store.table_changes import DroppedTable
from hcat_notify.store.tx import Tx
from hcat_notify.store.usage import LocationUse, location_holders, locations_mentioning
from hcat_notify.warehouse import Warehouse

__all__ = ["Tables"]

logger = logging.getLogger(__name__)


class Tables:
    """The tables of one catalog (``catalog.tables``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def create(
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
        """Register a partitioned table (:meth:`hcat_notify.store.Catalog.create_table`)."""
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

    def get(self, table: TableName | str) -> TableInfo:
        """Return a registered table.

        Raises:
            TableNotFoundError: no such table.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return table_ops.info_of(tx.table_row(name))

    def list(
        self,
        db: str | None = None,
        *,
        after: TableName | str | None = None,
        limit: int | None = None,
    ) -> list[TableInfo]:
        """Registered tables (of one database if given), sorted by name; with ``after``
        (a ``db.table``) and ``limit``, one page of them."""
        start = None if after is None else as_table_name(after)
        with self._transaction() as tx:
            return table_ops.list_tables(tx, db, after=start, limit=limit)

    def pages(
        self, db: str | None = None, *, size: int | None = None
    ) -> Iterator[builtins.list[TableInfo]]:
        """Every table (of ``db`` if given) by name, ``size`` at a time, each page read
        in a transaction of its own."""
        return pages(
            lambda after, limit: self.list(db, after=after, limit=limit),
            lambda info: str(info.name),
            size,
        )

    def activity(self, *, db: str | None = None, limit: int = 200) -> builtins.list[TableActivity]:
        """The first ``limit`` tables by name (of ``db`` if given), each with its last
        partition in key order and its newest retained mark-set-done (the status page)."""
        with self._transaction() as tx:
            return activity.table_activity(tx, db=db, limit=limit)

    def update_properties(
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

    def drop(self, table: TableName | str, *, purged: bool = False) -> DroppedTable:
        """Unregister a table with its partitions, retained dones and journal entries and
        announce DROP_TABLE, in one transaction (:func:`table_changes.drop_table`)."""
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            dropped = table_changes.drop_table(tx, name, purged=purged)
        logger.info("dropped table %s with %d partition(s)", name, len(dropped.partitions))
        return dropped

    def locations_mentioning(self, fragments: Sequence[str]) -> builtins.list[LocationUse]:
        """Every registered table and partition whose location's text contains one of
        ``fragments`` (:func:`hcat_notify.lifecycle.location_holders` decides which of
        them use a directory a purge would delete)."""
        with self._transaction() as tx:
            return locations_mentioning(tx, fragments)

    def location_holders(
        self, directories: Sequence[str], *, table: str | None = None
    ) -> dict[str, builtins.list[LocationUse]]:
        """The registered tables and partitions that use each directory (is it, lies
        inside or contains it): :func:`hcat_notify.store.usage.location_holders`."""
        with self._transaction() as tx:
            return location_holders(tx, directories, Warehouse.of(tx.settings), table=table)
