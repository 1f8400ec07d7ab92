"""The transaction object every aggregate module of the store works in.

A :class:`Tx` is one database transaction (an ORM session already begun), the time it
started by the catalog's clock, and the deployment settings. The aggregate modules
(:mod:`~hcat_notify.store.tables`, :mod:`~hcat_notify.store.partitions`, ...) are
functions of a ``Tx``, so that one transaction can span several of them: a commit
registers partitions, announces them and records a done at once.
"""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    Float,
    Result,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.exc import DatabaseError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from hcat_notify.config import Settings
from hcat_notify.errors import ConflictError, StoreError, StoreUnavailableError
from hcat_notify.model.events import EventType
from hcat_notify.model.names import TableName
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store.event_ids import allocate_event_ids, visible_through
from hcat_notify.store.models import OutboxRow, PartitionRow, TableRow
from hcat_notify.store.records import TableDrop, table_dropped, table_not_found

__all__ = [
    "OUTBOX_CHANNEL",
    "RELAY_CHANNEL",
    "WEBHOOKS_CHANNEL",
    "Tx",
    "clock_sql",
    "transaction",
]

OUTBOX_CHANNEL = "hcat_outbox"
"""PostgreSQL NOTIFY channel raised (at commit) by every transaction that adds events."""

RELAY_CHANNEL = "hcat_relay"
"""PostgreSQL NOTIFY channel raised by changes of the relay group (buckets, controller)."""

WEBHOOKS_CHANNEL = "hcat_webhooks"
"""PostgreSQL NOTIFY channel raised by changes of webhooks (added, paused, resumed, removed,
rotated, replayed, parked topics released, disabled): the relays' webhook passes look at
once rather than at their interval."""

_CLOCK = {
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}
"""The database's clock, seconds since the epoch, in each dialect's SQL."""


def clock_sql(dialect: str) -> ColumnElement[float]:
    """:meth:`Tx.clock` as an SQL expression of ``dialect``, for a statement that stores
    the time itself (one round trip fewer)."""
    return literal_column(_CLOCK[dialect], Float)


@functools.cache
def _host_name() -> str:
    # Looked up once: getfqdn() asks DNS when the host name is not in /etc/hosts, which
    # took seconds per ADD_PARTITION on such a machine.
    return socket.getfqdn()


@dataclass(frozen=True)
class Tx:
    """One open transaction of the catalog.

    Attributes:
        session: the ORM session, inside ``begin()``.
        now: the catalog clock's time when the transaction began.
        settings: the deployment's settings.
        pending: what steps of the transaction leave for its end (keyed by step).
        finishers: run, in order, when the block ends without an error, before the
            commit (:meth:`before_commit`): a step that must see everything the
            transaction wrote (completeness: the sets a write touched).
    """

    session: Session
    now: datetime
    settings: Settings
    bucket_count: Callable[[Session], int]
    pending: dict[str, Any] = field(default_factory=dict)
    finishers: list[Callable[[Tx], None]] = field(default_factory=list)
    _connection: list[Connection] = field(default_factory=list, init=False, repr=False)

    def connection(self) -> Connection:
        """The transaction's connection (``session.connection()``, asked once: the
        same for the whole transaction)."""
        if not self._connection:
            self._connection.append(self.session.connection())
        return self._connection[0]

    def before_commit(self, finisher: Callable[[Tx], None]) -> None:
        """Run ``finisher(tx)`` when the transaction's block ends, before its commit
        (once, however often it is asked)."""
        if finisher not in self.finishers:
            self.finishers.append(finisher)

    def finish(self) -> None:
        """Run the finishers (a finisher may add another; it runs too)."""
        index = 0
        while index < len(self.finishers):
            self.finishers[index](self)
            index += 1

    def bucket_of(self, topic: str) -> int:
        """The relay group's bucket of ``topic``."""
        return topic_bucket(topic, self.bucket_count(self.session))

    @property
    def dialect(self) -> str:
        return self.session.get_bind().dialect.name

    def table_row(self, name: TableName, *, lock: bool = False, share: bool = False) -> TableRow:
        """The table's row; ``lock`` serialises writers of the table (PostgreSQL);
        ``share`` lets such writers (``FOR SHARE``) run at once, serialised only with
        those that ``lock`` it (a rule change: a write then judges its sets by the rule
        in force at its commit).

        Raises:
            TableDroppedError: no such table, and the last one of that name was dropped.
            TableNotFoundError: no such table.
        """
        query = select(TableRow).where(
            TableRow.db_name == name.db, TableRow.table_name == name.table
        )
        if (lock or share) and self.dialect == "postgresql":
            # SQLite writers are serial already (BEGIN IMMEDIATE).
            query = query.with_for_update(read=not lock)
        row = self.session.execute(query).scalar_one_or_none()
        if row is None:
            drops = self.table_drops(name, limit=1)
            if drops:
                raise table_dropped(name, drops[0])
            raise table_not_found(name)
        return row

    def table_drops(self, name: TableName, *, limit: int) -> list[TableDrop]:
        """The newest ``limit`` drops of a table of that name, newest first: each its
        DROP_TABLE on the table's own topic (the body's ``tableTopic``; the last event of
        the drop, when it also went to the prefix topic)."""
        rows = self.session.execute(
            select(OutboxRow.event_id, OutboxRow.topic, OutboxRow.body)
            .where(
                OutboxRow.table_name == str(name),
                OutboxRow.event_type == EventType.DROP_TABLE.value,
            )
            .order_by(OutboxRow.event_id.desc())
            .limit(2 * limit)
        )
        drops = [
            TableDrop(row.event_id, row.topic)
            for row in rows
            if json.loads(row.body).get("tableTopic", row.topic) == row.topic
        ]
        return drops[:limit]

    def rows(self, query: Executable, params: Mapping[str, Any] | None = None) -> Result[Any]:
        """Run a Core statement on this transaction's connection, without the ORM.

        For hot reads of plain columns: the session's ORM layer (entity loading, per-row
        bookkeeping) costs more than the rows. Pending ORM changes are flushed first, as
        ``session.execute`` would.
        """
        self.session.flush()
        return self.session.connection().execute(query, params)

    def allocate_event_ids(self, count: int) -> list[int]:
        """``count`` new event ids, in order (see :mod:`hcat_notify.store.event_ids`:
        readers in id order do not pass them before this transaction ends)."""
        ids = allocate_event_ids(self.connection(), count)
        self.notify(OUTBOX_CHANNEL)
        return ids

    def last_event_id(self) -> int:
        """The highest event id at or below which every event is committed or rolled
        back: where a reader that starts now is complete up to."""
        return visible_through(self.session.connection())

    def id_order_bound(self) -> int | None:
        """The id a read of events in id order must stop at (a position passed is never
        revisited), or None where every committed event is already below any later one
        (SQLite, whose writers hold the counter to commit)."""
        if self.dialect != "postgresql":
            return None
        return visible_through(self.session.connection())

    def notify(self, channel: str) -> None:
        """Wake the processes listening on ``channel`` when this transaction commits.

        PostgreSQL delivers ``pg_notify`` at commit; SQLite needs nothing, its waiters
        see the file's ``data_version`` change.
        """
        if self.dialect == "postgresql":
            self.session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": channel})

    def clock(self) -> float:
        """The database's clock, in seconds since the epoch.

        Leases, heartbeats and session timeouts are judged by it, never by a host's own
        clock: PostgreSQL's ``clock_timestamp()``; SQLite, which runs in this process,
        its ``julianday('now')`` (milliseconds).
        """
        return float(self.session.execute(select(clock_sql(self.dialect))).scalar_one())

    def server(self) -> str:
        """The ``server`` field of messages: configured, or this host's name."""
        return self.settings.server_name or _host_name()

    def compare_and_set(
        self,
        row: TableRow | PartitionRow,
        expected_version: int,
        what: str,
        **values: Any,
    ) -> None:
        """``UPDATE … WHERE id = :id AND version = :expected``; no row → ConflictError.

        On success ``row`` is refreshed with the new values and version.
        """
        model = type(row)
        result = self.session.execute(
            update(model)
            .where(model.id == row.id, model.version == expected_version)
            .values(**values, version=expected_version + 1, updated_at=self.now)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount < 1:  # type: ignore[attr-defined]
            raise ConflictError(
                f"{what} was changed by another process (expected version "
                f"{expected_version}, found {row.version}); re-read it and retry"
            )
        self.session.expire(row)
        self.session.refresh(row)


def _reason(exc: DBAPIError) -> str:
    text_ = str(exc.orig) if exc.orig is not None else str(exc)
    lines = [line.strip() for line in text_.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


@contextmanager
def transaction(
    engine: Engine,
    settings: Settings,
    clock: Callable[[], datetime],
    url: str,
    bucket_count: Callable[[Session], int],
) -> Iterator[Tx]:
    """A :class:`Tx` on ``engine``; committed when the block ends, rolled back on error.

    Database failures become one-line :class:`StoreError` (or
    :class:`StoreUnavailableError` when the database cannot be used at all: gone,
    locked, damaged).
    """
    try:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            tx = Tx(session, clock(), settings, bucket_count)
            yield tx
            tx.finish()
    except DBAPIError as exc:
        # A damaged file comes as a bare DatabaseError ("database disk image is
        # malformed"); constraint and data errors are its other subclasses.
        unavailable = (
            exc.connection_invalidated
            or isinstance(exc, OperationalError | InterfaceError)
            or type(exc) is DatabaseError
        )
        error = StoreUnavailableError if unavailable else StoreError
        raise error(f"database {url} failed: {_reason(exc)}") from exc
