"""Retained MARK_SET_DONE messages: recorded with their event, found by covering spec."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Delete, Dialect, Table, bindparam, delete, insert, literal_column, select
from sqlalchemy.sql.elements import ColumnElement

from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.driver import compiled
from hcat_notify.store.event_rows import done_rows
from hcat_notify.store.models import OutboxRow, RetentionRow, TableRow
from hcat_notify.store.records import RetainedDone, TableInfo
from hcat_notify.store.tx import Tx

__all__ = [
    "add_mark_set_done",
    "delete_expired",
    "delete_expired_on_driver",
    "find_covering_done",
    "retained_dones",
]


def _retained(row: RetentionRow, name: TableName) -> RetainedDone:
    return RetainedDone(
        event_id=row.event_id,
        table=name,
        spec=PartitionSpec.from_mapping(row.spec_json),
        created_at=row.created_at,
        expires_at=row.expires_at,
        generation=row.generation,
        reason=row.reason,
    )


_RETENTION = cast(Table, RetentionRow.__table__)
_OUTBOX = cast(Table, OutboxRow.__table__)


def add_mark_set_done(
    tx: Tx,
    row: TableRow,
    info: TableInfo,
    spec: PartitionSpec | Mapping[str, str | None],
    *,
    generation: int = 1,
    reason: str = "writer",
    rule_version: int | None = None,
) -> tuple[int, PartitionSpec]:
    """Retention row and outbox event of a MARK_SET_DONE, in ``tx``; (event id, spec as
    recorded, keys sorted). A done of a table with a completeness rule goes through
    :func:`hcat_notify.store.completeness.mark_set_done`, which keeps the set's state.

    Raises:
        UnknownPartitionKeyError, InvalidSpecError: ``spec`` is not a done of the table
            (:meth:`TableInfo.done_spec`); nothing is added.
    """
    canonical = info.done_spec(spec)
    (event_id,) = tx.allocate_event_ids(1)
    rows = done_rows(
        event_id=event_id,
        table_id=row.id,
        table=info.name,
        topic=info.topic,
        bucket=tx.bucket_of(info.topic),
        spec=canonical,
        retention=info.retention,
        now=tx.now,
        generation=generation,
        reason=reason,
        rule_version=rule_version,
    )
    # Core statements on the connection: no ORM bulk step, no autoflush (a rule's done
    # is written while its set's row is being changed; the caller flushes that)
    connection = tx.connection()
    connection.execute(insert(_RETENTION), [rows.retention])
    connection.execute(insert(_OUTBOX), [rows.outbox])
    return event_id, canonical


def retained_dones(
    tx: Tx, by_id: Mapping[int, TableName], *, after_event_id: int = 0, limit: int | None = None
) -> list[RetainedDone]:
    """Unexpired MARK_SET_DONE messages of the tables ``by_id``, in event-id order."""
    query = (
        select(RetentionRow)
        .where(
            RetentionRow.table_id.in_(list(by_id)),
            RetentionRow.expires_at > tx.now,
            RetentionRow.event_id > after_event_id,
        )
        .order_by(RetentionRow.event_id)
    )
    bound = tx.id_order_bound()  # a later page must not find an id it passed
    if bound is not None:
        query = query.where(RetentionRow.event_id <= bound)
    if limit is not None:
        query = query.limit(limit)
    return [_retained(rrow, by_id[rrow.table_id]) for rrow in tx.session.scalars(query)]


def find_covering_done(
    tx: Tx, row: TableRow, name: TableName, wanted: PartitionSpec, *, min_generation: int = 1
) -> RetainedDone | None:
    """The oldest unexpired MARK_SET_DONE of the table that covers ``wanted`` (of set
    generation ``min_generation`` or later), or None."""
    # An equality lookup on (table, spec): at most 2^keys - 1 specs, a few rows each.
    # Expiry is checked here rather than in SQL: with a range condition on expires_at,
    # SQLite's planner walks the expiry index over every retained row of the table
    # instead (150 ms at a million rows instead of 0.1 ms).
    candidates = tx.session.scalars(
        select(RetentionRow).where(
            RetentionRow.table_id == row.id,
            RetentionRow.spec.in_(wanted.covering_canonicals()),
        )
    ).all()
    rows = [
        item
        for item in candidates
        if item.expires_at > tx.now and item.generation >= min_generation
    ]
    if not rows:
        return None
    return _retained(min(rows, key=lambda item: item.event_id), name)


def delete_expired(tx: Tx, batch_size: int, *, expired_at: datetime | None = None) -> int:
    """Delete up to ``batch_size`` retention rows expired at ``expired_at`` (default: the
    transaction's time), the first to expire first, in one statement; how many."""
    # One statement: the ids never travel to Python and back (a 1,000-id IN list cost
    # the sweep more CPU than the database's delete). The expiry index walks only
    # expired rows; a walk of the primary key would pass every older live row of a
    # table with a longer retention, batch after batch.
    # SKIP LOCKED (PostgreSQL; SQLite has one writer and no row locks): two sweeps at
    # once each take rows the other does not hold, instead of one waiting for the
    # other's batch and then finding its rows gone.
    expired = (
        select(_RETENTION.c.event_id)
        .where(_RETENTION.c.expires_at <= (tx.now if expired_at is None else expired_at))
        .order_by(_RETENTION.c.expires_at)
        .limit(batch_size)
        .with_for_update(skip_locked=True)
    )
    result = tx.session.connection().execute(
        delete(_RETENTION).where(_RETENTION.c.event_id.in_(expired))
    )
    return result.rowcount


def _expired_rowids_delete(dialect: str) -> Delete:
    """SQLite's batch (:func:`delete_expired_on_driver`): rows by ``rowid``, which the
    expiry index holds, so the inner walk reads no table row."""
    rowid: ColumnElement[int] = literal_column("rowid")
    expired = (
        select(rowid)
        .select_from(_RETENTION)
        .where(_RETENTION.c.expires_at <= bindparam("expired_at"))
        .order_by(_RETENTION.c.expires_at)
        .limit(bindparam("batch"))
    )
    return delete(_RETENTION).where(rowid.in_(expired))


def delete_expired_on_driver(
    cursor: Any, dialect: Dialect, batch_size: int, expired_at: datetime
) -> int:
    """:func:`delete_expired` on a SQLite driver cursor inside its write transaction
    (:meth:`hcat_notify.store.fast_path.FastPath.write`), one statement as there; how
    many. A sweep's batch holds the writers' lock only for this statement and the commit,
    with none of a session's steps in between (docs/operations.md, "Sizing")."""
    statement = compiled(dialect, _expired_rowids_delete)
    at = _RETENTION.c.expires_at.type.bind_processor(dialect)
    values = {"expired_at": expired_at if at is None else at(expired_at), "batch": batch_size}
    cursor.execute(*statement.bind(values))
    return int(cursor.rowcount)
