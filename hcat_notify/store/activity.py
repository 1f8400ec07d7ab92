"""What an operator's overview shows of each table: its last partition and last done.

One statement reads a page of tables with, for each, the last partition in key order
(the unique ``(table_id, path_spec)`` index, read backwards; for date-first keys the
newest date) and its newest retained done (the ``(table_id, event_id)`` index): each a
correlated lookup of one index entry, so the overview stays cheap however many
partitions a table has, and costs one round trip however many tables it shows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from hcat_notify.store.models import PartitionRow, RetentionRow, TableRow
from hcat_notify.store.records import TableActivity
from hcat_notify.store.tables import info_of
from hcat_notify.store.tx import Tx

__all__ = ["table_activity"]


def _last(column: Any, table_column: Any, order: Any) -> Any:
    """``column`` of the table's row that comes last by ``order`` (one index entry)."""
    # The table as a range of one value, ordered by the whole (table, order) index: with
    # "= table" and "order by" alone PostgreSQL, estimating from the few tables that have
    # dones that any table has thousands, walks the primary key backwards filtering on
    # the table, all of it for a table without one (15 s for 200 tables at 10^5 dones);
    # an equality would also let it drop the table from the order, and pick that again.
    return (
        select(column)
        .where(table_column.between(TableRow.id, TableRow.id))
        .order_by(table_column.desc(), order.desc())
        .limit(1)
        .correlate(TableRow)
        .scalar_subquery()
    )


def table_activity(tx: Tx, *, db: str | None = None, limit: int = 200) -> list[TableActivity]:
    """The first ``limit`` tables (of ``db`` if given) by name, each with its last
    partition in key order and its newest retained mark-set-done."""
    query = (
        select(
            TableRow,
            *(
                _last(column, PartitionRow.table_id, PartitionRow.path_spec)
                for column in (PartitionRow.path_spec, PartitionRow.created_at)
            ),
            *(
                _last(column, RetentionRow.table_id, RetentionRow.event_id)
                for column in (RetentionRow.spec, RetentionRow.created_at, RetentionRow.event_id)
            ),
        )
        .order_by(TableRow.db_name, TableRow.table_name)
        .limit(limit)
    )
    if db is not None:
        query = query.where(TableRow.db_name == db.lower())
    return [
        TableActivity(
            table=info_of(row),
            last_partition=last_partition,
            last_partition_at=last_partition_at,
            last_done=last_done,
            last_done_at=last_done_at,
            last_done_event_id=last_done_event_id,
        )
        for row, last_partition, last_partition_at, last_done, last_done_at, last_done_event_id in (
            tx.session.execute(query)
        )
    ]
