"""Event ids: handed out in increasing order, read in id order without gaps.

On SQLite, ids come from the one row of ``hcat_event_counter``, whose lock every
writer holds to commit. On PostgreSQL they come from a sequence (writers do not wait
for each other), and a reader that walks events in id order reads only up to
:func:`visible_through`: every id at or below it is committed or rolled back, so no
event appears later behind a position the reader has passed. See docs/architecture.md
("Event ids").
"""

from __future__ import annotations

from sqlalchemy import Connection, text, update

from hcat_notify.store.models import EventCounterRow

__all__ = [
    "ALLOCATE_POSTGRESQL",
    "HORIZON_POSTGRESQL",
    "ID_LOCK_SPACE",
    "allocate_event_ids",
    "ids_in_flight",
    "visible_through",
]

ALLOCATE_POSTGRESQL = "SELECT hcat_allocate_event_ids(%s)"
"""The allocation as driver SQL (psycopg's parameter style), for the writer's hot path:
one row, one column, the ids as a list."""


HORIZON_POSTGRESQL = "SELECT hcat_event_horizon()"
""":func:`visible_through` on PostgreSQL, as driver SQL."""


ID_LOCK_SPACE = 0x4843
"""The top 16 bits of the advisory lock a PostgreSQL transaction holding event ids takes
(migration 0010's ``ID_SPACE``)."""


def allocate_event_ids(connection: Connection, count: int) -> list[int]:
    """``count`` new event ids, increasing, in the transaction of ``connection``.

    Readers in id order do not read past the lowest of them before the transaction ends.
    """
    if count < 1:
        raise ValueError(f"event ids to allocate must be at least 1, got {count}")
    if connection.dialect.name == "postgresql":
        ids = connection.execute(
            text("SELECT hcat_allocate_event_ids(:count)"), {"count": count}
        ).scalar_one()
        return [int(i) for i in ids]
    last = connection.execute(
        update(EventCounterRow)
        .where(EventCounterRow.id == 1)
        .values(last_event_id=EventCounterRow.last_event_id + count)
        .returning(EventCounterRow.last_event_id)
    ).scalar_one()
    return list(range(last - count + 1, last + 1))


def visible_through(connection: Connection) -> int:
    """The highest event id at or below which every id is committed or rolled back
    (0 before the first event): what the next statement of a reader in id order may
    read up to without skipping an event that commits later."""
    if connection.dialect.name == "postgresql":
        return int(connection.execute(text(HORIZON_POSTGRESQL)).scalar_one())
    row = connection.execute(
        text("SELECT last_event_id FROM hcat_event_counter WHERE id = 1")
    ).first()
    return 0 if row is None else int(row[0])


def ids_in_flight(connection: Connection) -> bool:
    """Whether an open transaction holds event ids (PostgreSQL; always False on SQLite,
    whose writers hold the counter to commit): readers in id order stop below them until
    they end. A commit raises ``pg_notify``; a rollback (or a writer killed) raises
    nothing, so a reader held back by one must look again by itself."""
    if connection.dialect.name != "postgresql":
        return False
    return bool(
        connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' "
                "AND l.objsubid = 1 AND (l.classid::bigint >> 16) = :space "
                "AND l.database = (SELECT oid FROM pg_database "
                "WHERE datname = current_database()))"
            ),
            {"space": ID_LOCK_SPACE},
        ).scalar_one()
    )
