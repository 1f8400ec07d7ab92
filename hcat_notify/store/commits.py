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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from hcat_notify.errors import ConcurrentWriteError, ConflictError, InvalidInputError
from hcat_notify.names import TableName
from hcat_notify.specs import PartitionSpec
from hcat_notify.store.models import CommitJournalRow, PartitionRow, TableRow

if TYPE_CHECKING:
    from hcat_notify.store.catalog import Catalog, TableInfo

__all__ = ["WRITE_MODES", "CommitJournal", "CommitPartition", "CommitRecord", "JournalEntry"]

logger = logging.getLogger(__name__)

WRITE_MODES = ("append", "overwrite")
PENDING, COMMITTED, ABORTED = "pending", "committed", "aborted"


@dataclass(frozen=True)
class CommitPartition:
    """A partition as a write leaves it: where it is and what the write put there."""

    spec: PartitionSpec
    location: str
    file_count: int
    total_bytes: int
    archived: bool = False


@dataclass(frozen=True)
class JournalEntry:
    """A write recorded in the journal."""

    job_id: str
    table: TableName
    mode: str
    state: str
    partitions: tuple[str, ...]
    plan: Mapping[str, Any]
    started_at: datetime
    result: Mapping[str, Any] | None
    version: int


@dataclass(frozen=True)
class CommitRecord:
    """What a completed write registered and announced."""

    job_id: str
    created: tuple[str, ...]
    replaced: tuple[str, ...]
    appended: tuple[str, ...]
    event_ids: tuple[int, ...]
    done_event_id: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "created": list(self.created),
            "replaced": list(self.replaced),
            "appended": list(self.appended),
            "event_ids": list(self.event_ids),
            "done_event_id": self.done_event_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitRecord:
        return cls(
            job_id=str(data["job_id"]),
            created=tuple(data.get("created", ())),
            replaced=tuple(data.get("replaced", ())),
            appended=tuple(data.get("appended", ())),
            event_ids=tuple(int(item) for item in data.get("event_ids", ())),
            done_event_id=data.get("done_event_id"),
        )


def _entry(row: CommitJournalRow, name: TableName) -> JournalEntry:
    return JournalEntry(
        job_id=row.job_id,
        table=name,
        mode=row.mode,
        state=row.state,
        partitions=tuple(row.partitions),
        plan=dict(row.plan),
        started_at=row.started_at,
        result=dict(row.result) if row.result is not None else None,
        version=row.version,
    )


class CommitJournal:
    """Journal operations of one :class:`Catalog` (``catalog.commits``)."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    # -- helpers ------------------------------------------------------------------------

    def _locked_table(self, session: Session, name: TableName) -> TableRow:
        row = self._catalog._table_row(session, name)
        if session.get_bind().dialect.name == "postgresql":
            # Serialise claims and completions per table (SQLite writers are serial).
            session.execute(select(TableRow.id).where(TableRow.id == row.id).with_for_update())
        return row

    def _row(self, session: Session, job_id: str) -> CommitJournalRow | None:
        return session.get(CommitJournalRow, job_id)

    def _name(self, session: Session, table_id: int) -> TableName:
        row = session.get(TableRow, table_id)
        assert row is not None
        return TableName(row.db_name, row.table_name)

    def _close(
        self, session: Session, journal: CommitJournalRow, state: str, result: dict[str, Any]
    ) -> None:
        # Compare-and-set: a completion and an abort (recovery) cannot both win.
        outcome = session.execute(
            update(CommitJournalRow)
            .where(
                CommitJournalRow.job_id == journal.job_id,
                CommitJournalRow.version == journal.version,
            )
            .values(
                state=state,
                result=result,
                updated_at=self._catalog._clock(),
                version=journal.version + 1,
            )
            .execution_options(synchronize_session=False)
        )
        if outcome.rowcount < 1:  # type: ignore[attr-defined]
            raise ConflictError(f"job {journal.job_id} was completed or aborted concurrently")

    # -- API ------------------------------------------------------------------------------

    def get(self, job_id: str) -> JournalEntry | None:
        """The journal entry of ``job_id``, or None."""
        with self._catalog._session() as session:
            row = self._row(session, job_id)
            return None if row is None else _entry(row, self._name(session, row.table_id))

    def pending(self, table: TableName | str | None = None) -> list[JournalEntry]:
        """Writes that began and neither completed nor aborted (oldest first)."""
        with self._catalog._session() as session:
            query = select(CommitJournalRow).where(CommitJournalRow.state == PENDING)
            if table is not None:
                name = table if isinstance(table, TableName) else TableName.parse(table)
                query = query.where(
                    CommitJournalRow.table_id == self._catalog._table_row(session, name).id
                )
            rows = session.scalars(query.order_by(CommitJournalRow.created_at)).all()
            return [_entry(row, self._name(session, row.table_id)) for row in rows]

    def begin(
        self,
        job_id: str,
        table: TableName | str,
        *,
        mode: str,
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
        if mode not in WRITE_MODES:
            raise InvalidInputError(f"unknown write mode {mode!r}; use append or overwrite")
        name = table if isinstance(table, TableName) else TableName.parse(table)
        wanted = set(partitions)
        now = self._catalog._clock()
        with self._catalog._session(write=True) as session:
            row = self._locked_table(session, name)
            previous = self._row(session, job_id)
            if previous is not None:
                raise InvalidInputError(f"job id {job_id} was already used ({previous.state})")
            for other in session.scalars(
                select(CommitJournalRow).where(
                    CommitJournalRow.table_id == row.id, CommitJournalRow.state == PENDING
                )
            ):
                overlap = sorted(wanted & set(other.partitions))
                if overlap and (mode == "overwrite" or other.mode == "overwrite"):
                    raise ConcurrentWriteError(
                        f"partition {overlap[0]} of {name} is being written by job "
                        f"{other.job_id} ({other.mode}); this {mode} of job {job_id} is "
                        "abandoned, nothing was changed"
                    )
            if mode == "overwrite" and wanted:
                changed = session.scalars(
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
                mode=mode,
                state=PENDING,
                partitions=sorted(wanted),
                plan=dict(plan),
                started_at=started_at,
                created_at=now,
                updated_at=now,
            )
            session.add(journal)
            try:
                session.flush()
            except IntegrityError as exc:
                raise InvalidInputError(f"job id {job_id} was already used") from exc
            return _entry(journal, name)

    def complete(
        self,
        job_id: str,
        partitions: Sequence[CommitPartition],
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
        catalog = self._catalog
        with catalog._session(write=True) as session:
            journal = self._row(session, job_id)
            if journal is None or journal.state != PENDING:
                state = "unknown" if journal is None else journal.state
                raise ConflictError(
                    f"job {job_id} cannot be completed: its journal entry is {state}"
                )
            name = self._name(session, journal.table_id)
            row = self._locked_table(session, name)
            info: TableInfo = catalog._info(row)
            now = catalog._clock()
            specs = [info.spec(item.spec, partial=False) for item in partitions]
            existing = {
                prow.path_spec: prow
                for prow in session.scalars(
                    select(PartitionRow).where(
                        PartitionRow.table_id == row.id,
                        PartitionRow.path_spec.in_([spec.to_path() for spec in specs]),
                    )
                )
            }
            fresh = [
                (item, spec)
                for item, spec in zip(partitions, specs, strict=True)
                if spec.to_path() not in existing
            ]
            inserted = catalog._insert_partitions(
                session,
                row,
                info,
                [(spec, item) for item, spec in fresh],
                job_id=job_id,
                now=now,
            )
            event_ids = [prow.event_id for prow in inserted if prow.event_id is not None]
            created = [prow.path_spec for prow in inserted]
            replaced: list[str] = []
            appended: list[str] = []
            for item, spec in zip(partitions, specs, strict=True):
                prow = existing.get(spec.to_path())
                if prow is None:
                    continue
                if journal.mode == "overwrite":
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
                session.execute(
                    update(PartitionRow)
                    .where(PartitionRow.id == prow.id)
                    .values(**values, job_id=job_id, version=prow.version + 1, updated_at=now)
                    .execution_options(synchronize_session=False)
                )
            done_event_id: int | None = None
            if mark_set_done is not None:
                canonical = info.spec(mark_set_done, partial=True).sorted()
                done_event_id = catalog._add_mark_set_done(session, row, info, canonical, now)
            record = CommitRecord(
                job_id=job_id,
                created=tuple(created),
                replaced=tuple(replaced),
                appended=tuple(appended),
                event_ids=tuple(event_ids),
                done_event_id=done_event_id,
            )
            self._close(session, journal, COMMITTED, record.as_dict())
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
        with self._catalog._session(write=True) as session:
            journal = self._row(session, job_id)
            if journal is None or journal.state != PENDING:
                return False
            self._close(session, journal, ABORTED, {"reason": reason})
        logger.info("commit job=%s aborted: %s", job_id, reason)
        return True
