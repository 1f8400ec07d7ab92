"""Changes of a table beyond writes: registering partitions whose files exist, dropping
partitions, dropping the table.

Each is a step in the caller's transaction that changes the registry and adds the events
that announce the change (ADD_PARTITION, DROP_PARTITION, DROP_TABLE, and the
MARK_SET_DONE if asked), so the two never disagree. ``catalog.partitions`` and
``catalog.tables`` run them; files are not touched here (measuring and purging them is
:mod:`hcat_notify.lifecycle`'s).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select

from hcat_notify.errors import ConcurrentWriteError, InvalidInputError, PartitionNotFoundError
from hcat_notify.model.changes import AnnounceMode, PartitionChange, announce_mode
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import PartitionDetails
from hcat_notify.store import completeness
from hcat_notify.store import partitions as partition_ops
from hcat_notify.store.announce import announce_partitions, announce_table
from hcat_notify.store.models import (
    CommitJournalRow,
    PartitionRow,
    RetentionRow,
    SetRuleRow,
    SetStateRow,
    TableRow,
)
from hcat_notify.store.records import (
    JournalState,
    NewPartition,
    PartitionInfo,
    TableInfo,
)
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx

__all__ = [
    "DroppedPartitions",
    "DroppedTable",
    "Registration",
    "drop_partitions",
    "drop_table",
    "drop_table_rows",
    "register_partitions",
]

logger = logging.getLogger(__name__)

SpecLike = PartitionSpec | Mapping[str, str | None]


@dataclass(frozen=True)
class Registration:
    """What :func:`register_partitions` registered and announced."""

    partitions: tuple[PartitionInfo, ...]
    done_event_id: int | None = None

    @property
    def event_ids(self) -> tuple[int, ...]:
        """The ADD_PARTITION events, each once (a batch announces many partitions)."""
        seen = dict.fromkeys(p.event_id for p in self.partitions if p.event_id is not None)
        return tuple(seen)


@dataclass(frozen=True)
class DroppedPartitions:
    """Dropped partitions (with their locations, for a purge) and the DROP_PARTITION events."""

    partitions: tuple[PartitionInfo, ...]
    event_ids: tuple[int, ...]


@dataclass(frozen=True)
class DroppedTable:
    """A dropped table: its definition, the partitions that went with it, its events."""

    table: TableInfo
    partitions: tuple[PartitionInfo, ...]
    event_ids: tuple[int, ...]


def _pending_claims(tx: Tx, table_id: int) -> list[CommitJournalRow]:
    return list(
        tx.session.scalars(
            select(CommitJournalRow).where(
                CommitJournalRow.table_id == table_id,
                CommitJournalRow.state == JournalState.PENDING.value,
            )
        )
    )


def drop_table_rows(tx: Tx, row: TableRow) -> None:
    """Delete a table's row and everything that hangs off it (partitions, retained
    dones, journal entries, completeness rules and set states): explicitly, whatever the
    backend does with foreign keys."""
    for model in (PartitionRow, RetentionRow, CommitJournalRow, SetRuleRow, SetStateRow):
        tx.session.execute(delete(model).where(model.table_id == row.id))
    tx.session.delete(row)


def register_partitions(
    tx: Tx,
    name: TableName,
    new: Sequence[NewPartition],
    *,
    mark_set_done: SpecLike | None = None,
    announce: AnnounceMode | None = None,
    job_id: str | None = None,
    outside_warehouse: bool = False,
) -> Registration:
    """Register partitions whose files exist already, announce them (and the done).

    In ``tx``: the rows, their ADD_PARTITION events (per partition or per
    write: ``announce`` overrides the table's property) and the MARK_SET_DONE.
    Locations are checked against the warehouse roots (``outside_warehouse``: the
    operator's logged exception, :meth:`hcat_notify.warehouse.Warehouse.check`).

    Raises:
        TableNotFoundError: no such table.
        InvalidInputError: no partitions, a spec that is not a full spec of the table,
            a bad done spec or announce mode, a location a table may not use.
        LocationOutsideWarehouseError: a managed table's location outside the roots.
        PartitionExistsError: a partition is registered already (nothing is written).
    """
    if not new:
        raise InvalidInputError(f"no partitions to register in {name}")
    row = tx.table_row(name, lock=True)
    info = info_of(row)
    if mark_set_done:
        info.done_spec(mark_set_done)  # refused before any partition is added
    registered = partition_ops.add_partitions(
        tx,
        row,
        new,
        job_id=job_id,
        mode=announce_mode(info.properties, announce),
        outside_warehouse=outside_warehouse,
    )
    done_id = completeness.mark_set_done(tx, row, info, mark_set_done)[0] if mark_set_done else None
    return Registration(tuple(registered), done_id)


def drop_partitions(
    tx: Tx,
    name: TableName,
    spec: SpecLike,
    *,
    announce: AnnounceMode | None = None,
) -> DroppedPartitions:
    """Unregister every partition matching ``spec`` (a partial spec drops many) and
    announce each drop (DROP_PARTITION, per partition or per drop as the table's
    announce mode says), in ``tx``. Files are not touched.

    Returns:
        The dropped partitions and the events that announce the drop.

    Raises:
        TableNotFoundError: no such table.
        InvalidInputError: a key the table does not have.
        PartitionNotFoundError: no partition matches (an InvalidInputError too).
        ConcurrentWriteError: a pending write claims one of the partitions.
    """
    row = tx.table_row(name, lock=True)
    info = info_of(row)
    wanted = info.spec(spec, partial=True)
    matching = partition_ops.list_partitions(tx, row, wanted)
    if not matching:
        raise PartitionNotFoundError(f"no partition of {name} matches {wanted}")
    paths = {partition.spec.to_path() for partition in matching}
    for entry in _pending_claims(tx, row.id):
        claimed = sorted(paths & set(entry.partitions))
        if claimed:
            raise ConcurrentWriteError(
                f"partition {claimed[0]} of {name} is being written by job "
                f"{entry.job_id}; nothing was dropped (run 'hcat-notify recover' "
                "if that job is gone)"
            )
    changes = [
        PartitionChange(
            partition.spec,
            PartitionDetails(
                location=partition.location,
                file_count=partition.file_count,
                total_bytes=partition.total_bytes,
            ),
        )
        for partition in matching
    ]
    event_ids = announce_partitions(
        tx,
        info,
        EventType.DROP_PARTITION,
        changes,
        mode=announce_mode(info.properties, announce),
        row=row,
    )
    for start in range(0, len(matching), 500):
        chunk = sorted(paths)[start : start + 500]
        tx.session.execute(
            delete(PartitionRow).where(
                PartitionRow.table_id == row.id, PartitionRow.path_spec.in_(chunk)
            )
        )
    return DroppedPartitions(tuple(matching), tuple(dict.fromkeys(event_ids)))


def drop_table(tx: Tx, name: TableName, *, purged: bool = False) -> DroppedTable:
    """Unregister a table with its partitions, retained dones and journal entries,
    and announce DROP_TABLE (on the prefix topic and the table's own), in ``tx``.
    Files are not touched; ``purged`` only tells the message whether
    the caller deletes them.

    Raises:
        TableNotFoundError: no such table.
        ConcurrentWriteError: a write of the table is pending.
    """
    row = tx.table_row(name, lock=True)
    info = info_of(row)
    pending = _pending_claims(tx, row.id)
    if pending:
        raise ConcurrentWriteError(
            f"job {pending[0].job_id} is writing {name}; nothing was dropped (run "
            "'hcat-notify recover' if that job is gone)"
        )
    dropped = partition_ops.list_partitions(tx, row)
    event_ids = announce_table(
        tx, info, EventType.DROP_TABLE, partitions=len(dropped), purged=purged
    )
    drop_table_rows(tx, row)
    return DroppedTable(info, tuple(dropped), tuple(event_ids))
