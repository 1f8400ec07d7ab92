"""What an operator's overview shows of each table: its last partition and last done.

Each table costs two index lookups: the last partition in key order (the unique
``(table_id, path_spec)`` index, read backwards; for date-first keys the newest date)
and its newest retained done (the ``(table_id, event_id)`` index), so the overview stays
cheap however many partitions a table has.
"""

from __future__ import annotations

from sqlalchemy import select

from hcat_notify.store.models import PartitionRow, RetentionRow, TableRow
from hcat_notify.store.records import TableActivity
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx

__all__ = ["table_activity"]


def table_activity(tx: Tx, *, db: str | None = None, limit: int = 200) -> list[TableActivity]:
    """The first ``limit`` tables (of ``db`` if given) by name, each with its last
    partition in key order and its newest retained mark-set-done."""
    query = select(TableRow).order_by(TableRow.db_name, TableRow.table_name).limit(limit)
    if db is not None:
        query = query.where(TableRow.db_name == db.lower())
    found = []
    for row in tx.session.scalars(query):
        last = tx.session.execute(
            select(PartitionRow.path_spec, PartitionRow.created_at)
            .where(PartitionRow.table_id == row.id)
            .order_by(PartitionRow.path_spec.desc())
            .limit(1)
        ).first()
        done = tx.session.execute(
            select(RetentionRow.spec, RetentionRow.created_at, RetentionRow.event_id)
            .where(RetentionRow.table_id == row.id)
            .order_by(RetentionRow.event_id.desc())
            .limit(1)
        ).first()
        found.append(
            TableActivity(
                table=info_of(row),
                last_partition=None if last is None else last.path_spec,
                last_partition_at=None if last is None else last.created_at,
                last_done=None if done is None else done.spec,
                last_done_at=None if done is None else done.created_at,
                last_done_event_id=None if done is None else done.event_id,
            )
        )
    return found
