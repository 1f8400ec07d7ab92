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
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from hcat_notify.errors import ConcurrentWriteError, ConflictError, InvalidInputError
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.models import CommitJournalRow, PartitionRow, TableRow
from hcat_notify.store.partitions import insert_partitions
from hcat_notify.store.records import (
    CommitRecord,
    JournalEntry,
    JournalState,
    NewPartition,
    WriteMode,
    as_table_name,
)
from hcat_notify.store.retention import add_mark_set_done
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx

__all__ = ["CommitJournal"]

logger = logging.getLogger(__name__)


def _entry(row: CommitJournalRow, name: TableName) -> JournalEntry:
    return JournalEntry(
        job_id=row.job_id,
        table=name,
        mode=WriteMode(row.mode),
        state=JournalState(row.state),
        partitions=tuple(row.partitions),
        plan=dict(row.plan),
        started_at=row.started_at,
        result=dict(row.result) if row.result is not None else None,
        version=row.version,
    )


def _name(tx: Tx, table_id: int) -> TableName:
    row = tx.session.get(TableRow, table_id)
    if row is None:  # pragma: no cover - the foreign key cascades
        raise ConflictError(f"table {table_id} of a journal entry was dropped")
    return TableName(row.db_name, row.table_name)


def _close(tx: Tx, journal: CommitJournalRow, state: JournalState, result: dict[str, Any]) -> None:
    # Compare-and-set: a completion and an abort (recovery) cannot both win.
    outcome = tx.session.execute(
        update(CommitJournalRow)
        .where(
            CommitJournalRow.job_id == journal.job_id,
            CommitJournalRow.version == journal.version,
        )
        .values(state=state.value, result=result, updated_at=tx.now, version=journal.version + 1)
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
            return None if row is None else _entry(row, _name(tx, row.table_id))

    def pending(self, table: TableName | str | None = None) -> list[JournalEntry]:
        """Writes that began and neither completed nor aborted (oldest first)."""
        with self._transaction() as tx:
            query = select(CommitJournalRow).where(
                CommitJournalRow.state == JournalState.PENDING.value
            )
            if table is not None:
                table_id = tx.table_row(as_table_name(table)).id
                query = query.where(CommitJournalRow.table_id == table_id)
            rows = tx.session.scalars(query.order_by(CommitJournalRow.created_at)).all()
            return [_entry(row, _name(tx, row.table_id)) for row in rows]

    def begin(
        self,
        job_id: str,
        table: TableName | str,
        *,
        mode: WriteMode | str,
        partitions: Sequence[str],
        plan: Mapping[str, Any],
        started_at: datetime,
    ) -> JournalEntry:
        """Claim ``partitions`` (path specs) for a write and record its plan.

        Raises:
            InvalidInputError: unknown mode, or the job id was used before.
            ConcurrentWriteError: another write overwrites one of the partitions, or
                this one overwrites a partition another write claims or committed since
                ``started_at``.
        """
        try:
            mode = WriteMode(mode)
        except ValueError:
            raise InvalidInputError(
                f"unknown write mode {mode!r}; use append or overwrite"
            ) from None
        name = as_table_name(table)
        wanted = set(partitions)
        with self._transaction(write=True) as tx:
            row = tx.table_row(name, lock=True)
            previous = tx.session.get(CommitJournalRow, job_id)
            if previous is not None:
                raise InvalidInputError(f"job id {job_id} was already used ({previous.state})")
            for other in tx.session.scalars(
                select(CommitJournalRow).where(
                    CommitJournalRow.table_id == row.id,
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
            if mode is WriteMode.OVERWRITE and wanted:
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
            journal = CommitJournalRow(
                job_id=job_id,
                table_id=row.id,
                mode=mode.value,
                state=JournalState.PENDING.value,
                partitions=sorted(wanted),
                plan=dict(plan),
                started_at=started_at,
                created_at=tx.now,
                updated_at=tx.now,
            )
            tx.session.add(journal)
            try:
                tx.session.flush()
            except IntegrityError as exc:
                raise InvalidInputError(f"job id {job_id} was already used") from exc
            return _entry(journal, name)

    def complete(
        self,
        job_id: str,
        partitions: Sequence[NewPartition],
        *,
        mark_set_done: PartitionSpec | Mapping[str, str | None] | None = None,
    ) -> CommitRecord:
        """Register the write's partitions and announce them, in one transaction.

        New partitions get a row and an ADD_PARTITION event each; existing ones are
        updated (append adds files, overwrite replaces them) without an event. The
        MARK_SET_DONE event and retention row follow, if asked. The journal entry is
        closed in the same transaction.

        Raises:
            ConflictError: the entry is not pending (completed, aborted or unknown).
        """
        with self._transaction(write=True) as tx:
            journal = tx.session.get(CommitJournalRow, job_id)
            if journal is None or journal.state != JournalState.PENDING.value:
                state = "unknown" if journal is None else journal.state
                raise ConflictError(
                    f"job {job_id} cannot be completed: its journal entry is {state}"
                )
            name = _name(tx, journal.table_id)
            row = tx.table_row(name, lock=True)
            info = info_of(row)
            specs = [info.spec(item.spec, partial=False) for item in partitions]
            existing = {
                prow.path_spec: prow
                for prow in tx.session.scalars(
                    select(PartitionRow).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_([spec.to_path() for spec in specs]),
                    )
                )
            }
            fresh = [
                (spec, item)
                for item, spec in zip(partitions, specs, strict=True)
                if spec.to_path() not in existing
            ]
            inserted = insert_partitions(tx, row, info, fresh, job_id=job_id)
            event_ids = [prow.event_id for prow in inserted if prow.event_id is not None]
            created = [prow.path_spec for prow in inserted]
            replaced: list[str] = []
            appended: list[str] = []
            for item, spec in zip(partitions, specs, strict=True):
                prow = existing.get(spec.to_path())
                if prow is None:
                    continue
                if journal.mode == WriteMode.OVERWRITE.value:
                    values: dict[str, Any] = {
                        "location": item.location,
                        "file_count": item.file_count,
                        "total_bytes": item.total_bytes,
                        "archived": item.archived,
                    }
                    replaced.append(spec.to_path())
                else:
                    values = {
                        "file_count": prow.file_count + item.file_count,
                        "total_bytes": prow.total_bytes + item.total_bytes,
                    }
                    appended.append(spec.to_path())
                tx.session.execute(
                    update(PartitionRow)
                    .where(PartitionRow.id == prow.id)
                    .values(**values, job_id=job_id, version=prow.version + 1, updated_at=tx.now)
                    .execution_options(synchronize_session=False)
                )
            done_event_id: int | None = None
            if mark_set_done is not None:
                canonical = info.spec(mark_set_done, partial=True).sorted()
                done_event_id = add_mark_set_done(tx, row, info, canonical)
            record = CommitRecord(
                job_id=job_id,
                created=tuple(created),
                replaced=tuple(replaced),
                appended=tuple(appended),
                event_ids=tuple(event_ids),
                done_event_id=done_event_id,
            )
            _close(tx, journal, JournalState.COMMITTED, record.as_dict())
        logger.info(
            "commit job=%s table=%s created=%d replaced=%d appended=%d done=%s",
            job_id,
            name,
            len(created),
            len(replaced),
            len(appended),
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
