"""``catalog.partitions``: registering, reading, changing and dropping partitions (a thin
view over :mod:`hcat_notify.store.partitions` and :mod:`hcat_notify.store.table_changes`)."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import partitions as partition_ops
from hcat_notify.store import table_changes
from hcat_notify.store.paging import pages
from hcat_notify.store.records import NewPartition, PartitionInfo, as_table_name
from hcat_notify.store.table_changes import DroppedPartitions, Registration
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx

__all__ = ["Partitions"]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]


class Partitions:
    """The partitions of one catalog's tables (``catalog.partitions``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def add(
        self,
        table: TableName | str,
        new: Sequence[NewPartition],
        *,
        job_id: str | None = None,
        announce: AnnounceMode | None = None,
    ) -> list[PartitionInfo]:
        """Register new partitions and their ADD_PARTITION events in one transaction
        (:meth:`hcat_notify.store.Catalog.add_partitions`)."""
        name = as_table_name(table)
        if not new:
            return []
        with self._transaction(write=True) as tx:
            row = tx.table_row(name, share=True)
            return partition_ops.add_partitions(
                tx, row, new, job_id=job_id, mode=announce, count_ahead=True
            )

    def register(
        self,
        table: TableName | str,
        new: Sequence[NewPartition],
        *,
        mark_set_done: SpecLike | None = None,
        announce: AnnounceMode | None = None,
        job_id: str | None = None,
        outside_warehouse: bool = False,
    ) -> Registration:
        """Register partitions whose files exist already (measured by the caller:
        :func:`hcat_notify.register_partitions`), announce them and the done if asked, in
        one transaction (:func:`table_changes.register_partitions`)."""
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            registration = table_changes.register_partitions(
                tx,
                name,
                new,
                mark_set_done=mark_set_done,
                announce=announce,
                job_id=job_id,
                outside_warehouse=outside_warehouse,
            )
        logger.info("registered %d partition(s) of %s", len(registration.partitions), name)
        return registration

    def list(
        self,
        table: TableName | str,
        spec: SpecLike | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[PartitionInfo]:
        """Partitions of a table in path order (:meth:`Catalog.list_partitions`)."""
        name = as_table_name(table)
        with self._transaction() as tx:
            return partition_ops.list_partitions(
                tx, tx.table_row(name), spec, after=after, limit=limit
            )

    def pages(
        self, table: TableName | str, spec: SpecLike | None = None, *, size: int | None = None
    ) -> Iterator[builtins.list[PartitionInfo]]:
        """Every partition of a table (those ``spec`` covers) in path order, ``size`` at
        a time, each page read in a transaction of its own."""
        return pages(
            lambda after, limit: self.list(table, spec, after=after, limit=limit),
            lambda info: info.spec.to_path(),
            size,
        )

    def at(self, table: TableName | str, specs: Iterable[SpecLike]) -> dict[str, PartitionInfo]:
        """The registered partitions among ``specs`` (full specs), by their path form.

        One indexed lookup per 500 specs, however many partitions the table has.

        Raises:
            TableNotFoundError: no such table.
            InvalidInputError: a spec is not a full spec of the table.
        """
        name = as_table_name(table)
        with self._transaction() as tx:
            return partition_ops.partitions_at(tx, tx.table_row(name), specs)

    def get(self, table: TableName | str, spec: SpecLike) -> PartitionInfo | None:
        """The partition with exactly this full spec, or None."""
        name = as_table_name(table)
        with self._transaction() as tx:
            row = tx.table_row(name)
            info = info_of(row)
            prow = partition_ops.partition_row(tx, row.id, info.spec(spec, partial=False))
            return None if prow is None else partition_ops.partition_info(info, prow)

    def update(
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
            return partition_ops.update_partition(
                tx, tx.table_row(name), spec, expected_version=expected_version, changes=changes
            )

    def drop(
        self, table: TableName | str, spec: SpecLike, *, announce: AnnounceMode | None = None
    ) -> DroppedPartitions:
        """Unregister every partition matching ``spec`` and announce each drop, in one
        transaction (:func:`table_changes.drop_partitions`). Files are not touched."""
        name = as_table_name(table)
        with self._transaction(write=True) as tx:
            dropped = table_changes.drop_partitions(tx, name, spec, announce=announce)
        logger.info(
            "dropped %d partition(s) of %s matching %s", len(dropped.partitions), name, spec
        )
        return dropped
