"""The commit journal: all-or-nothing writes of many partitions.

A writer (``spark_output``'s committer) claims its partitions with :meth:`begin` before
it moves any file, and closes the entry with :meth:`complete` — in the one transaction
that registers the partitions, adds their ADD_PARTITION events and the MARK_SET_DONE, if
asked. A crash in between leaves a ``pending`` entry whose plan says which moves to
check, so that recovery can roll it forward or back.

Concurrency, decided under the table's lock:

* two writes may append to the same partition (file names never collide);
* a write that overwrites a partition conflicts with any other pending write of it,
  and with any commit of it since the overwriting job started: first to commit wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from hcat_notify.errors import (
    ConcurrentWriteError,
    ConflictError,
    InvalidInputError,
    InvalidSpecError,
    TableNotFoundError,
)
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.events import EventType
from hcat_notify.model.names import (
    TableName,
    staging_entry_id,
    validate_identifier,
    validate_job_id,
)
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.wire import PartitionDetails
from hcat_notify.store import completeness
from hcat_notify.store import tables as table_ops
from hcat_notify.store.announce import announce_insert, announce_table
from hcat_notify.store.models import CommitJournalRow, PartitionRow, TableRow
from hcat_notify.store.partitions import (
    check_partition_locations,
    insert_partitions,
    keyed_location,
    unique_paths,
)
from hcat_notify.store.records import (
    DEFAULT_RETENTION,
    CommitRecord,
    JournalEntry,
    JournalState,
    NewPartition,
    TableInfo,
    WriteMode,
    as_table_name,
    table_not_found,
)
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx
from hcat_notify.store.usage import location_holders
from hcat_notify.warehouse import Warehouse

__all__ = ["CommitJournal", "table_definition"]

logger = logging.getLogger(__name__)


def table_definition(
    *,
    location: str,
    partition_keys: Sequence[str],
    storage_format: str = "parquet",
    table_type: str = "MANAGED_TABLE",
    properties: Mapping[str, str] | None = None,
    retention: timedelta = DEFAULT_RETENTION,
) -> dict[str, Any]:
    """The JSON form of a table a journal entry registers on completion (``create_table``
    of :meth:`CommitJournal.begin`)."""
    return {
        "location": location,
        "partition_keys": list(partition_keys),
        "storage_format": storage_format,
        "table_type": table_type,
        "properties": dict(properties or {}),
        "retention_seconds": int(retention.total_seconds()),
    }


def _definition_arguments(definition: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "location": definition["location"],
        "partition_keys": list(definition["partition_keys"]),
        "storage_format": definition.get("storage_format", "parquet"),
        "table_type": definition.get("table_type", "MANAGED_TABLE"),
        "properties": dict(definition.get("properties") or {}),
        "retention": timedelta(
            seconds=int(definition.get("retention_seconds", DEFAULT_RETENTION.total_seconds()))
        ),
    }


def _table_row_or_none(tx: Tx, name: TableName) -> TableRow | None:
    try:
        return tx.table_row(name, lock=True)
    except TableNotFoundError:
        return None


def _check_new_table(tx: Tx, name: TableName, definition: Mapping[str, Any]) -> None:
    """Refuse, before anything moves, a definition that could not be registered later."""
    arguments = _definition_arguments(definition)
    where = table_ops.check_table_location(
        tx, name, arguments["location"], table_type=arguments["table_type"]
    )
    table_ops.check_overlap(tx, name, where, table_type=arguments["table_type"])
    for key in arguments["partition_keys"]:
        validate_identifier(key, what="partition key")
    if not arguments["partition_keys"]:
        raise InvalidInputError(f"table {name} needs at least one partition key")


def _check_overwritten(tx: Tx, info: TableInfo, specs: Sequence[str]) -> None:
    """Refuse an overwrite whose partition directory (``<table>/<spec>``, which the
    writer moves to its trash and deletes) is, or holds, another registered location:
    another table's, or another partition's (docs/operations.md, "Warehouse roots")."""
    finals = {f"{info.location.rstrip('/')}/{spec}": spec for spec in specs}
    holders = location_holders(tx, list(finals), Warehouse.of(tx.settings), containers=False)
    for final, uses in holders.items():
        spec = finals[final]
        for use in uses:
            if use.table == str(info.name) and use.partition == spec:
                continue  # the partition being overwritten
            raise InvalidInputError(
                f"overwriting partition {spec} of {info.name} would delete the directory "
                f"{final}, which holds {use}; the overwrite is refused, nothing was changed"
            )


def _check_appended(tx: Tx, info: TableInfo, spec: str, location: str) -> None:
    """Refuse an append into a managed table's existing partition whose stored location
    the boundary no longer allows: written inside a root, it now resolves outside them
    through a symlink planted since (the files would land there), or it is a root. A
    location registered outside the roots (the operator's ``--outside-warehouse``, or
    before roots were configured) is written to as before (docs/operations.md,
    "Warehouse roots")."""
    if info.table_type == table_ops.EXTERNAL_TABLE:
        return
    warehouse = Warehouse.of(tx.settings)
    if warehouse.contains(location) or not warehouse.written_inside(location):
        return
    warehouse.check(location, what=f"location of partition {spec} of {info.name} (appended to)")


def _update_existing(
    tx: Tx,
    info: TableInfo,
    prow: PartitionRow,
    spec: PartitionSpec,
    item: NewPartition,
    job_id: str,
    overwrite: bool,
) -> tuple[str, int]:
    """Apply a write to an existing partition and announce it (INSERT); (path, event id)."""
    if overwrite:
        where = check_partition_locations(tx, info, [(spec, item.location)], current=prow.location)[
            0
        ]
        values: dict[str, Any] = {
            **keyed_location(info, where),
            "file_count": item.file_count,
            "total_bytes": item.total_bytes,
            "archived": item.archived,
        }
    else:
        _check_appended(tx, info, prow.path_spec, prow.location)
        values = {
            "file_count": prow.file_count + item.file_count,
            "total_bytes": prow.total_bytes + item.total_bytes,
        }
    tx.session.execute(
        update(PartitionRow)
        .where(PartitionRow.id == prow.id)
        .values(**values, job_id=job_id, version=prow.version + 1, updated_at=tx.now)
        .execution_options(synchronize_session=False)
    )
    event_id = announce_insert(
        tx,
        info,
        spec,
        replace=overwrite,
        files=item.files,
        details=PartitionDetails(
            location=values.get("location", prow.location),
            file_count=values["file_count"],
            total_bytes=values["total_bytes"],
            job_id=job_id,
        ),
        files_added=item.file_count,
        bytes_added=item.total_bytes,
    )
    return spec.to_path(), event_id


def _reopens(job_id: str, previous: CommitJournalRow) -> bool:
    """Whether ``begin`` may begin the closed entry ``previous`` again: an aborted staging
    entry, whose staging is gone (the job's Spark phase failed, or recovery removed it)."""
    job = job_id.removesuffix(staging_entry_id(""))
    return (
        job != job_id
        and job_id == staging_entry_id(job)
        and previous.state == JournalState.ABORTED.value
    )


def _entry(row: CommitJournalRow) -> JournalEntry:
    return JournalEntry(
        job_id=row.job_id,
        table=TableName.parse(row.table_name),
        mode=WriteMode(row.mode),
        state=JournalState(row.state),
        partitions=tuple(row.partitions),
        plan=dict(row.plan),
        started_at=row.started_at,
        result=dict(row.result) if row.result is not None else None,
        version=row.version,
        creates_table=row.create_table is not None and row.table_id is None,
        table_definition=(
            dict(row.create_table)
            if row.create_table is not None and row.table_id is None
            else None
        ),
    )


def _close(
    tx: Tx,
    journal: CommitJournalRow,
    state: JournalState,
    result: dict[str, Any],
    *,
    table_id: int | None = None,
) -> None:
    # Compare-and-set: a completion and an abort (recovery) cannot both win.
    outcome = tx.session.execute(
        update(CommitJournalRow)
        .where(
            CommitJournalRow.job_id == journal.job_id,
            CommitJournalRow.version == journal.version,
        )
        .values(
            state=state.value,
            result=result,
            updated_at=tx.now,
            version=journal.version + 1,
            table_id=journal.table_id if table_id is None else table_id,
        )
        .execution_options(synchronize_session=False)
    )
    if outcome.rowcount < 1:  # type: ignore[attr-defined]
        raise ConflictError(f"job {journal.job_id} was completed or aborted concurrently")


class CommitJournal:
    """Journal operations of one catalog (``catalog.commits``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
    """

    def __init__(self, transaction: Callable[..., AbstractContextManager[Tx]]) -> None:
        self._transaction = transaction

    def get(self, job_id: str) -> JournalEntry | None:
        """The journal entry of ``job_id``, or None."""
        with self._transaction() as tx:
            row = tx.session.get(CommitJournalRow, job_id)
            return None if row is None else _entry(row)

    def pending(self, table: TableName | str | None = None) -> list[JournalEntry]:
        """Writes that began and neither completed nor aborted (oldest first)."""
        with self._transaction() as tx:
            query = select(CommitJournalRow).where(
                CommitJournalRow.state == JournalState.PENDING.value
            )
            if table is not None:
                # by name: an import's entry names a table it has not registered yet
                query = query.where(CommitJournalRow.table_name == str(as_table_name(table)))
            rows = tx.session.scalars(query.order_by(CommitJournalRow.created_at)).all()
            return [_entry(row) for row in rows]

    def check_new_table(self, table: TableName | str, definition: Mapping[str, Any]) -> None:
        """Refuse a table definition (:func:`table_definition`) that could not be
        registered now (recovery re-checks a pending entry's against today's registry).

        Raises:
            InvalidInputError: see :meth:`begin`.
        """
        with self._transaction() as tx:
            _check_new_table(tx, as_table_name(table), definition)

    def begin(
        self,
        job_id: str,
        table: TableName | str,
        *,
        mode: WriteMode | str,
        partitions: Sequence[str],
        plan: Mapping[str, Any],
        started_at: datetime,
        create_table: Mapping[str, Any] | None = None,
    ) -> JournalEntry:
        """Claim ``partitions`` (path specs) for a write and record its plan.

        Args:
            create_table: when the table is not registered, its definition
                (:func:`table_definition`): the table is registered, and announced, by the
                transaction that completes the entry (an import into a new table). Ignored
                when the table exists.

        Raises:
            TableNotFoundError: the table is not registered and no definition is given.
            InvalidInputError: an invalid job id (:func:`validate_job_id`; an entry's id
                may add ``.staging``), a partition that is not a path spec
                (:meth:`PartitionSpec.to_path`), unknown mode, the job id was used
                before (not: an aborted :func:`staging_entry_id`, begun again when its job
                is retried), or the new table's location is another table's.
            ConcurrentWriteError: another write overwrites one of the partitions, or
                this one overwrites a partition another write claims or committed since
                ``started_at``.
            LocationOutsideWarehouseError: an append into a managed table's partition
                whose location now resolves outside the roots through a symlink.
        """
        validate_job_id(job_id, entry=True)
        for spec in partitions:
            try:
                PartitionSpec.parse_written(spec)
            except InvalidSpecError as exc:
                raise InvalidSpecError(f"{exc}; nothing was journalled") from None
        try:
            mode = WriteMode(mode)
        except ValueError:
            raise InvalidInputError(
                f"unknown write mode {mode!r}; use append or overwrite"
            ) from None
        name = as_table_name(table)
        wanted = set(partitions)
        with self._transaction(write=True) as tx:
            row = _table_row_or_none(tx, name)
            if row is None and create_table is None:
                raise table_not_found(name)
            if row is None and create_table is not None:
                _check_new_table(tx, name, create_table)
            if row is not None:  # the write's partitions go under the table's location
                info = info_of(row)
                table_ops.check_table_location(tx, name, info.location, table_type=info.table_type)
            previous = tx.session.get(CommitJournalRow, job_id)
            if previous is not None and _reopens(job_id, previous):
                tx.session.delete(previous)  # its job is retried: a closed staging entry
                tx.session.flush()
            elif previous is not None:
                raise InvalidInputError(f"job id {job_id} was already used ({previous.state})")
            for other in tx.session.scalars(
                select(CommitJournalRow).where(
                    CommitJournalRow.table_name == str(name),
                    CommitJournalRow.state == JournalState.PENDING.value,
                )
            ):
                overlap = sorted(wanted & set(other.partitions))
                overwriting = WriteMode.OVERWRITE in (mode, other.mode)
                if overlap and overwriting:
                    raise ConcurrentWriteError(
                        f"partition {overlap[0]} of {name} is being written by job "
                        f"{other.job_id} ({other.mode}); this {mode} of job {job_id} is "
                        "abandoned, nothing was changed"
                    )
            if row is not None and mode is WriteMode.OVERWRITE and wanted:
                changed = tx.session.scalars(
                    select(PartitionRow.path_spec).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_(sorted(wanted)),
                        PartitionRow.updated_at > started_at,
                    )
                ).first()
                if changed is not None:
                    raise ConcurrentWriteError(
                        f"partition {changed} of {name} was committed by another job after "
                        f"job {job_id} started; this overwrite is abandoned, nothing was "
                        "changed"
                    )
            if row is not None and mode is WriteMode.OVERWRITE and wanted:
                _check_overwritten(tx, info_of(row), sorted(wanted))
            if row is not None and mode is WriteMode.APPEND and wanted:  # before any move
                for spec, location in tx.session.execute(
                    select(PartitionRow.path_spec, PartitionRow.location).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_(sorted(wanted)),
                    )
                ):
                    _check_appended(tx, info_of(row), spec, location)
            journal = CommitJournalRow(
                job_id=job_id,
                table_id=None if row is None else row.id,
                table_name=str(name),
                mode=mode.value,
                state=JournalState.PENDING.value,
                partitions=sorted(wanted),
                plan=dict(plan),
                started_at=started_at,
                created_at=tx.now,
                updated_at=tx.now,
                create_table=dict(create_table) if row is None and create_table else None,
            )
            tx.session.add(journal)
            try:
                tx.session.flush()
            except IntegrityError as exc:
                raise InvalidInputError(f"job id {job_id} was already used") from exc
            return _entry(journal)

    def complete(
        self,
        job_id: str,
        partitions: Sequence[NewPartition],
        *,
        mark_set_done: PartitionSpec | Mapping[str, str | None] | None = None,
        announce: AnnounceMode | None = None,
    ) -> CommitRecord:
        """Register the write's partitions and announce them, in one transaction.

        New partitions get a row and ADD_PARTITION events (one per partition, or one per
        write split under the byte cap: ``announce`` overrides the table's property);
        existing ones are updated (append adds files, overwrite replaces them) and each
        gets an INSERT event (``replace`` true for an overwrite). The MARK_SET_DONE event
        and retention row follow, if asked. An entry that creates its table registers it
        first (with its CREATE_TABLE). The journal entry is closed in the same
        transaction.

        Raises:
            ConflictError: the entry is not pending (completed, aborted or unknown).
            TableExistsError: the entry creates its table, and another process registered
                a table of that name meanwhile.
            PartitionExistsError: another process registered one of its new partitions
                meanwhile (nothing is written).
            InvalidInputError: a partition is given twice, or a spec does not fit the
                table (nothing is written).
        """
        with self._transaction(write=True) as tx:
            journal = tx.session.get(CommitJournalRow, job_id)
            if journal is None or journal.state != JournalState.PENDING.value:
                state = "unknown" if journal is None else journal.state
                raise ConflictError(
                    f"job {job_id} cannot be completed: its journal entry is {state}"
                )
            name = TableName.parse(journal.table_name)
            table_events: list[int] = []
            if journal.table_id is None:
                created = table_ops.create_table(
                    tx, name, **_definition_arguments(journal.create_table or {}), announce=False
                )
                table_events = announce_table(tx, created, EventType.CREATE_TABLE)
            row = tx.table_row(name, lock=True)
            info = info_of(row)
            specs = [info.spec(item.spec, partial=False) for item in partitions]
            existing = {
                prow.path_spec: prow
                for prow in tx.session.scalars(
                    select(PartitionRow).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_(unique_paths(specs)),
                    )
                )
            }
            fresh = [
                (spec, item)
                for item, spec in zip(partitions, specs, strict=True)
                if spec.to_path() not in existing
            ]
            inserted = insert_partitions(tx, row, info, fresh, job_id=job_id, mode=announce)
            event_ids = list(
                dict.fromkeys(
                    partition.event_id for partition in inserted if partition.event_id is not None
                )
            )
            created_specs = [partition.spec.to_path() for partition in inserted]
            overwrite = journal.mode == WriteMode.OVERWRITE.value
            changed = {
                "replaced" if overwrite else "appended": [
                    _update_existing(
                        tx, info, existing[spec.to_path()], spec, item, job_id, overwrite
                    )
                    for item, spec in zip(partitions, specs, strict=True)
                    if spec.to_path() in existing
                ]
            }
            done_event_id: int | None = None
            if mark_set_done is not None:
                done_event_id, _ = completeness.mark_set_done(tx, row, info, mark_set_done)
            set_dones = completeness.settle(tx)  # the sets the write completed, now
            if done_event_id is None and set_dones:
                done_event_id = set_dones[-1]
            record = CommitRecord(
                job_id=job_id,
                created=tuple(created_specs),
                replaced=tuple(path for path, _ in changed.get("replaced", [])),
                appended=tuple(path for path, _ in changed.get("appended", [])),
                event_ids=tuple(event_ids),
                done_event_id=done_event_id,
                insert_event_ids=tuple(
                    event_id for values in changed.values() for _, event_id in values
                ),
                table_event_ids=tuple(table_events),
                set_done_event_ids=tuple(set_dones),
            )
            _close(tx, journal, JournalState.COMMITTED, record.as_dict(), table_id=row.id)
        logger.info(
            "commit job=%s table=%s created=%d replaced=%d appended=%d done=%s",
            job_id,
            name,
            len(record.created),
            len(record.replaced),
            len(record.appended),
            done_event_id,
        )
        return record

    def abort(self, job_id: str, *, reason: str = "") -> bool:
        """Close a pending entry as aborted; return whether it was pending."""
        with self._transaction(write=True) as tx:
            journal = tx.session.get(CommitJournalRow, job_id)
            if journal is None or journal.state != JournalState.PENDING.value:
                return False
            _close(tx, journal, JournalState.ABORTED, {"reason": reason})
        logger.info("commit job=%s aborted: %s", job_id, reason)
        return True
